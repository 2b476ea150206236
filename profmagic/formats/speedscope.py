"""speedscope JSON (https://www.speedscope.app/file-format-schema.json): read and write.

Each speedscope profile becomes one thread. Time units become seconds in the ``wall``
metric (``metric="cpu"`` when the producer measured CPU time); unit ``none`` and ``bytes``
land in ``samples``. What speedscope cannot hold (several metrics, sample counts of
aggregated stacks, frame kinds, meta) travels in an ``x-profmagic`` block that other
readers ignore, so a written profile reads back equal.
"""
from __future__ import annotations

import json
import math
import re

import numpy as np
import pandas as pd

from ..errors import ProfileFormatError
from ..reasons import REASONS
from ..model import MEMORY_METRICS, WEIGHT_METRICS, Profile, Raw, make_frames, thread_table
from ._common import (EXT, MAX_DEPTH, MAX_THREADS, StackTree, carried_meta, checked_ext, ext_block, load_json,
                      parse_json, thread_attrs, too_deep, too_many_threads, version as _version)
from .registry import Format

NAME = "speedscope"
FORMAT = Format(NAME, __name__, suffixes=(".speedscope.json", ".json"), mime="application/json",
                label="speedscope JSON",
                opens="opens in speedscope (www.speedscope.app: drop the file on the page; it stays in your browser)")
SCHEMA = "https://www.speedscope.app/file-format-schema.json"
UNITS = {"none": None, "bytes": None, "nanoseconds": 1e-9, "microseconds": 1e-6,
         "milliseconds": 1e-3, "seconds": 1.0}


def sniff(head: bytes) -> bool:
    h = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    return h.startswith(b"{") and (b"speedscope" in head or (b'"profiles"' in head and b'"shared"' in head))


def guess_kind(name: str, file: str) -> str:
    f = file or ""
    if f.endswith((".py", ".pyx", ".pyw")) or f.startswith("<ipython-input") or name == "<module>":
        return "python"
    if name.endswith("_[k]") or f in ("[kernel.kallsyms]", "[kernel]") or f.endswith("vmlinux"):
        return "kernel"
    if ".so" in f or f.endswith((".c", ".cc", ".cpp", ".h", ".hpp")) or f.startswith("/usr/lib"):
        return "native"
    return "other"


def _err(source, where, msg):
    return ProfileFormatError(msg, source=source, where=where)


def _frames(doc, source):
    shared = doc.get("shared")
    if not isinstance(shared, dict) or not isinstance(shared.get("frames"), list):
        raise _err(source, "shared.frames", "expected a list of frames under shared.frames")
    raw = shared["frames"]
    ext = ext_block(doc)
    kinds = ext.get("kinds") if isinstance(ext.get("kinds"), list) and len(ext.get("kinds")) == len(raw) else None
    names, files, lines, ks = [], [], [], []
    for i, fr in enumerate(raw):
        if not isinstance(fr, dict) or not isinstance(fr.get("name"), str):
            raise _err(source, f"shared.frames[{i}]", "expected an object with a string 'name'")
        file = fr.get("file") or ""
        line = fr.get("line")
        if line is not None and not isinstance(line, int):
            raise _err(source, f"shared.frames[{i}].line", f"expected an integer or null, got {line!r}")
        names.append(fr["name"])
        files.append(file if isinstance(file, str) else str(file))
        lines.append(line)
        ks.append(kinds[i] if kinds else guess_kind(fr["name"], files[-1]))
    return make_frames(names, files, lines, ks)


def _sampled(prof, pi, nframes, source, blobs=None):
    samples = prof.get("samples")
    weights = prof.get("weights")
    if blobs is not None and (isinstance(samples, str) or isinstance(weights, str)):
        fast = _sampled_fast(blobs, samples, weights, nframes)
        if fast is None:
            raise _Fallback()
        stacks, ids, w = fast
        start = float(prof.get("startValue") or 0)
        times = start + np.concatenate(([0.0], np.cumsum(w)[:-1])) if len(w) else np.zeros(0)
        return stacks, ids, w, times
    if not isinstance(samples, list) or not isinstance(weights, list):
        raise _err(source, f"profiles[{pi}]", "a sampled profile needs 'samples' and 'weights' lists")
    if len(samples) != len(weights):
        raise _err(source, f"profiles[{pi}]",
                   f"'samples' has {len(samples)} entries but 'weights' has {len(weights)}; expected equal lengths")
    try:
        w = np.asarray(weights, dtype=np.float64)
    except (TypeError, ValueError):
        bad = next(i for i, x in enumerate(weights) if not isinstance(x, (int, float)) or isinstance(x, bool))
        raise _err(source, f"profiles[{pi}].weights[{bad}]", f"expected a number, got {weights[bad]!r}") from None
    if len(w) and (w < 0).any():
        i = int(np.argmax(w < 0))
        raise _err(source, f"profiles[{pi}].weights[{i}]", f"negative weight {weights[i]!r}; expected ≥ 0")
    if len(w) and not np.isfinite(w).all():
        i = int(np.argmax(~np.isfinite(w)))
        raise _err(source, f"profiles[{pi}].weights[{i}]", f"expected a finite number, got {weights[i]!r}")
    intern: dict[tuple, int] = {}
    ids = np.empty(len(samples), dtype=np.int64)
    for i, s in enumerate(samples):
        try:
            key = tuple(s)
        except TypeError:
            raise _err(source, f"profiles[{pi}].samples[{i}]", "expected a list of frame indices") from None
        sid = intern.get(key)
        if sid is None:
            if len(key) > MAX_DEPTH:
                raise too_deep(source, f"profiles[{pi}].samples[{i}]")
            for f in key:
                if not isinstance(f, int) or isinstance(f, bool) or not 0 <= f < nframes:
                    raise _err(source, f"profiles[{pi}].samples[{i}]",
                               f"frame index {f!r} is not in shared.frames (0..{nframes - 1})")
            sid = intern[key] = len(intern)
        ids[i] = sid
    stacks = list(intern)
    start = float(prof.get("startValue") or 0)
    times = start + np.concatenate(([0.0], np.cumsum(w)[:-1])) if len(w) else np.zeros(0)
    return stacks, ids, w, times


def _evented(prof, pi, nframes, source, tree: StackTree):
    """Stacks from O/C events, as nodes of ``tree`` while walking (O(1) an event, whatever the depth)."""
    events = prof.get("events")
    if not isinstance(events, list):
        raise _err(source, f"profiles[{pi}]", "an evented profile needs an 'events' list")
    open_: list[int] = []
    cur = -1   # the node of open_'s stack
    intern: dict[int, int] = {}
    ids, ws, ts = [], [], []
    last = None
    for ei, ev in enumerate(events):
        where = f"profiles[{pi}].events[{ei}]"
        if not isinstance(ev, dict) or ev.get("type") not in ("O", "C"):
            raise _err(source, where, "expected an event with type 'O' or 'C'")
        at, fr = ev.get("at"), ev.get("frame")
        if not isinstance(at, (int, float)) or isinstance(at, bool) or not math.isfinite(at):
            raise _err(source, where, f"expected a number in 'at', got {at!r}")
        if not isinstance(fr, int) or isinstance(fr, bool) or not 0 <= fr < nframes:
            raise _err(source, where, f"frame index {fr!r} is not in shared.frames (0..{nframes - 1})")
        if last is not None:
            if at < last:
                raise _err(source, where, f"event at {at} comes before the previous one at {last}; "
                                          "expected events in time order")
            if open_ and at > last:
                sid = intern.setdefault(cur, len(intern))
                ids.append(sid)
                ws.append(at - last)
                ts.append(last)
        last = at
        if ev["type"] == "O":
            open_.append(fr)
            cur = tree.push(cur, fr, where)
        else:
            if not open_ or open_[-1] != fr:
                top = open_[-1] if open_ else None
                raise _err(source, where, f"unbalanced events: closes frame {fr} but "
                                          + (f"frame {top} is open" if top is not None else "no frame is open"))
            open_.pop()
            cur = tree.parent[cur]
    if open_:
        raise _err(source, f"profiles[{pi}]",
                   f"unbalanced events: {len(open_)} frame(s) still open at the end (innermost {open_[-1]})")
    stacks = [tree.stack(node, f"profiles[{pi}]") for node in intern]
    return stacks, np.asarray(ids, dtype=np.int64), np.asarray(ws, dtype=np.float64), np.asarray(ts, dtype=np.float64)


# -- fast path: the big numeric arrays are parsed straight from the bytes ---------------------
# json.loads would build a Python list per sample (about 8x the file in memory). Instead the
# "samples" and "weights" arrays are cut out of the text, the small rest goes through parse_json,
# the samples' numbers are parsed by numpy into one int32 array, and only distinct stacks become
# tuples. Anything unexpected (whitespace inside a number, a key inside a string, bad numbers)
# falls back to the plain path, which gives the precise error.
_KEY = re.compile(rb'"(samples|weights)"\s*:\s*\[')
_SAMPLES_END = re.compile(rb"\]\s*\]")
_WS = b" \t\r\n"
_INTS = b"0123456789,[]"
_DIGITS_APART = re.compile(rb"[0-9][ \t\r\n]+[0-9]")
_JSON_NUMBER = re.compile(rb"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?\Z")
_NUMBER_APART = re.compile(rb"[0-9.eE+-][ \t\r\n]+[0-9.eE+-]")
_NUMBERS = b"0123456789.eE+-,"
_CHUNK = 1 << 22
_MIN_FAST = 1 << 20  # smaller files gain nothing


class _Fallback(Exception):
    pass


def _cut(data: bytes):
    """(skeleton bytes, blobs) with each big array replaced by a placeholder string, or None."""
    pieces, blobs, pos = [], {}, 0
    while True:
        m = _KEY.search(data, pos)
        if m is None:
            break
        start = m.end()  # just after the array's '['
        if m.group(1) == b"samples":
            e = _SAMPLES_END.search(data, start)
            if e is None or data[start:start + 64].lstrip(_WS)[:1] != b"[":
                pos = start
                continue
            span = (start, e.start() + 1, "samples")
            close = e.end()
        else:
            close = data.find(b"]", start) + 1
            if close <= 0:
                break
            span = (start, close - 1, "weights")
        pieces.append(data[pos:start - 1])
        pieces.append(b'"\\u0000pm%d"' % len(blobs))  # reads back as "\0pm<n>": no real name has a NUL
        blobs[f"\0pm{len(blobs)}"] = span
        pos = close
    if not blobs:
        return None
    pieces.append(data[pos:])
    return b"".join(pieces), blobs


def _parse_samples(data: bytes, a: int, b: int, nframes: int, powers: list | None = None):
    """Interned stacks and one stack id per sample for the text ``[..],[..],...`` in data[a:b], or None.
    Numbers are parsed with numpy, 4 MB of text at a time, into one int32 array of frames; samples are
    interned by a hash of their frames, each checked against its class's first sample (a collision
    makes the plain path decide), and only distinct stacks become tuples, of shared int objects."""
    if nframes >= 1 << 31:
        return None
    flat_parts, len_parts, hash_parts = [], [], []
    powers = [] if powers is None else powers   # the hash's powers, made once for all chunks (of all arrays)
    pos = a
    first = True
    while pos < b:
        cut = data.find(b"]", min(pos + _CHUNK, b - 1))
        if cut < 0 or cut >= b:
            cut = b - 1
        chunk = data[pos:cut + 1]
        pos = cut + 1
        lead = b"[" if first else b","   # a comma between chunks, none before the first
        got = _chunk_frames(chunk, int(not first), nframes, powers) if chunk[:1] == lead else None
        if got is None:
            if not chunk.translate(None, _INTS):   # no white space: the text is not what we read
                return None
            if _DIGITS_APART.search(chunk):   # "1 2" is no number; removing the space would make one
                return None
            chunk = chunk.translate(None, _WS)
            if chunk.translate(None, _INTS):
                return None
            if not chunk:   # white space after the last "]"
                continue
            got = _chunk_frames(chunk, int(not first), nframes, powers) if chunk[:1] == lead else None
            if got is None:
                return None
        first = False
        flat_parts.append(got[0])
        len_parts.append(got[1])
        hash_parts.append(got[2])
    if not len_parts:
        return [], np.zeros(0, np.int64)
    flat = np.concatenate(flat_parts)
    del flat_parts
    lengths = np.concatenate(len_parts)
    starts = np.zeros(len(lengths), np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    ids, uniq = pd.factorize(np.concatenate(hash_parts))
    ids = ids.astype(np.int64, copy=False)
    # factorize numbers classes in order of first appearance: a class's first sample is where ids
    # first exceeds every id before it.
    seen = np.maximum.accumulate(ids)
    rep = np.flatnonzero(np.concatenate(([True], seen[1:] > seen[:-1])))
    if not _same_as_rep(flat, starts, lengths, ids, rep):
        return None
    return _tuples(flat, starts[rep], lengths[rep], nframes), ids


def _chunk_frames(chunk: bytes, skip: int, nframes: int, cache: list | None = None):
    """(frames int32, frames per sample, hash per sample) of ``[1,2],[3],[]`` (from byte ``skip``),
    or None when the text is not exactly that (JSON integers without leading zeros, below ``nframes``)."""
    c = np.frombuffer(chunk, np.uint8, offset=min(skip, len(chunk)))
    n = len(c)
    if n < 2 or c[0] != 91 or c[-1] != 93:
        return None
    pos = np.flatnonzero((c - np.uint8(48)) > 9)   # the non-digits: "[", "]" and ","
    tok = _TOKEN[c[pos]]   # 1 "[", -1 "]", 0 ","; 2 anything else
    if (tok == 2).any():
        return None
    depth = np.cumsum(tok)   # after each token: 1 inside a sample, 0 between samples
    num = np.diff(pos) > 1   # a number between token k and k + 1
    opening, closing, comma = tok == 1, tok == -1, tok == 0
    inside = depth[:-1] == 1
    ok = (depth[-1] == 0 and ((depth == 0) | (depth == 1)).all() and not (opening & (depth != 1)).any()
          and not (closing & (depth != 0)).any() and not (num & ~inside).any())
    if ok:
        # A comma inside has a number on each side; one between samples has "]" before and "[" after.
        before = np.concatenate(([False], num))
        after = np.concatenate((num, [False]))
        prev_tok = np.concatenate(([2], tok[:-1]))
        next_tok = np.concatenate((tok[1:], [2]))
        ok = not (comma & np.where(depth == 1, ~(before & after), (prev_tok != -1) | (next_tok != 1))).any() \
            and not (opening[1:] & (tok[:-1] != 0)).any()
    if not ok:
        return None
    ends = pos[1:][num] - 1   # each number's last digit
    width = np.diff(pos)[num] - 1
    if len(width):
        wmax = int(width.max())
        if wmax <= 4:   # frame indices below 10,000: a word per number
            val = _short_numbers(c, ends, width)
        elif wmax > 9 or ((width > 1) & (c[ends - width + 1] == 48)).any():   # "01" is no JSON number
            return None
        else:
            val = np.subtract(c[ends], 48, dtype=np.int32)
            for j in range(1, wmax):
                digit = np.subtract(np.where(width > j, c[ends - j], 48), 48, dtype=np.int32)
                digit *= 10 ** j
                val += digit
        if val is None or int(val.max()) >= nframes:
            return None
    else:
        val = np.zeros(0, np.int32)
    # A sample's tokens are "[", a comma between each two of its numbers, "]".
    o, e = opening.nonzero()[0], closing.nonzero()[0]
    lengths = np.where(num[o], e - o, 0)
    if len(lengths) and int(lengths.max()) > MAX_DEPTH:
        return None
    # A hash per sample: sum of (frame + 1) * B**k over its k-th frames, modulo 2**64 (B odd, so
    # B**-first undoes the offset of the sample in the chunk), plus its length mixed in.
    first = np.zeros(len(lengths), np.int64)
    np.cumsum(lengths[:-1], out=first[1:])
    pw, inv = _powers(len(val) + 1, cache)
    total = np.zeros(len(val) + 1, np.uint64)
    mixed = np.add(val, 1, dtype=np.uint64, casting="unsafe")
    mixed *= pw[:len(val)]
    np.cumsum(mixed, out=total[1:])
    h = (total[first + lengths] - total[first]) * inv[first] + lengths.astype(np.uint64) * _MIX_LEN
    return val, lengths, h


def _short_numbers(c: np.ndarray, ends: np.ndarray, width: np.ndarray) -> np.ndarray | None:
    """The numbers of 1-4 digits whose last digits are ``c[ends]``, as int32, or None for a leading
    zero. Each number's 4 bytes are read as one little-endian word (its last digit the top byte),
    the bytes before it masked off, and the digits combined in pairs within the word."""
    pad = np.concatenate((np.zeros(3, np.uint8), c))
    x = np.ndarray((len(c),), "<u4", pad, 0, (1,))[ends]   # bytes c[e-3..e]
    drop = (np.uint32(4) - width.astype(np.uint32)) * np.uint32(8)   # bits of the bytes before the number
    keep = np.right_shift(np.uint32(0xFFFFFFFF), drop)
    keep = np.left_shift(keep, drop)
    y = (x & keep) - (np.uint32(0x30303030) & keep)   # digit values; 0 in front
    if ((width > 1) & ((np.right_shift(y, drop) & np.uint32(0xFF)) == 0)).any():   # "01" is no JSON number
        return None
    t = (y * np.uint32(10) + np.right_shift(y, np.uint32(8))) & np.uint32(0x00FF00FF)   # two 2-digit halves
    return ((t & np.uint32(0xFF)) * np.uint32(100) + np.right_shift(t, np.uint32(16))).astype(np.int32)


_TOKEN = np.full(256, 2, np.int8)
_TOKEN[ord("[")], _TOKEN[ord("]")], _TOKEN[ord(",")] = 1, -1, 0
_BASE = 0x2545F4914F6CDD1D   # odd: it has an inverse modulo 2**64
_MIX_LEN = np.uint64(0x9E3779B97F4A7C15)
def _powers(n: int, cache: list | None = None):
    """(B**k, B**-k) modulo 2**64 for k < n, by doubling (numpy's cumprod is slow on uint64).
    ``cache``: a list holding the longest table made so far, shared by the chunks of one array."""
    want = n
    if cache is not None:
        if cache and cache[0].shape[1] >= n:
            return cache[0][:, :n]
        n += n // 4   # chunks differ in size: room for the next ones
    out = np.empty((2, max(n, 1)), np.uint64)
    out[:, 0] = 1
    b = np.array([[_BASE], [pow(_BASE, -1, 1 << 64)]], np.uint64)   # B**s, B**-s
    s = 1
    while s < n:
        m = min(s, n - s)
        np.multiply(out[:, :m], b, out=out[:, s:s + m])
        b = b * b
        s *= 2
    if cache is not None:
        cache[:] = [out]
    return out[:, :want]
_BLOCK = 1 << 22   # frames handled at once when checking and building stacks


def _same_as_rep(flat, starts, lengths, ids, rep) -> bool:
    """Whether every sample's frames equal those of its class's first sample."""
    dup = np.flatnonzero(rep[ids] != np.arange(len(ids)))
    if not len(dup):
        return True
    r = rep[ids[dup]]
    if (lengths[dup] != lengths[r]).any():
        return False
    cum = np.cumsum(lengths[dup])
    lo = 0
    while lo < len(dup):
        hi = max(int(np.searchsorted(cum, (cum[lo - 1] if lo else 0) + _BLOCK)), lo + 1)
        ln = lengths[dup[lo:hi]]
        step = np.arange(int(ln.sum())) - np.repeat(np.cumsum(ln) - ln, ln)
        if (flat[np.repeat(starts[dup[lo:hi]], ln) + step] != flat[np.repeat(starts[r[lo:hi]], ln) + step]).any():
            return False
        lo = hi
    return True


_REC = np.dtype([("t", "u1"), ("v", "<i4")])   # marshal's record: a type byte, a 4-byte little-endian int


def _tuples(flat, starts, lengths, nframes) -> list:
    """A root-first tuple per (start, length) of ``flat``, its items shared int objects.

    Made by ``marshal.loads`` from records written here with numpy (version 3, all 5 bytes long):
    a tuple of the ints 0..nframes-1, each flagged as a reference, then a list of the stacks'
    tuples whose items are references to those ints. About twice as fast as slicing one tuple of
    ints per stack in Python. Only this module's arrays go in: frame ids checked below ``nframes``."""
    import marshal
    out: list = []
    head = np.empty(2 + nframes, _REC)
    head["t"][:2] = ord("(")
    head["v"][:2] = (2, nframes)
    head["t"][2:] = ord("i") | 0x80   # FLAG_REF: the int is the reference of its own index
    head["v"][2:] = np.arange(nframes)
    cum = np.cumsum(lengths)
    lo = 0
    while lo < len(starts):
        hi = max(int(np.searchsorted(cum, (cum[lo - 1] if lo else 0) + _BLOCK)), lo + 1)
        ln = lengths[lo:hi]
        ends = np.cumsum(ln)
        s0, k, f = int(starts[lo]), hi - lo, int(ends[-1])
        if int(starts[hi - 1]) + int(ln[-1]) - s0 == f:   # the rows lie back to back
            sel = flat[s0:s0 + f]
        else:
            sel = flat[np.repeat(starts[lo:hi], ln) + (np.arange(f) - np.repeat(ends - ln, ln))]
        rec = np.empty(len(head) + 1 + k + f, _REC)
        rec[:len(head)] = head
        rec["t"][len(head)], rec["v"][len(head)] = ord("["), k
        body = rec[len(head) + 1:]
        at = (ends - ln) + np.arange(k)   # each stack's tuple head, its frames after it
        item = np.ones(k + f, bool)
        item[at] = False
        body["t"] = ord("r")
        body["t"][at] = ord("(")
        body["v"][at] = ln
        body["v"][item] = sel
        out += marshal.loads(rec)[1]
        lo = hi
    return out


def _parse_weights(data: bytes, a: int, b: int):
    text = data[a:b]
    if text.translate(None, _NUMBERS):
        if _NUMBER_APART.search(text):
            return None
        text = text.translate(None, _WS)
        if text.translate(None, _NUMBERS):
            return None
    if not text.strip(_WS):
        return np.zeros(0)
    # Weights repeat (a sampler's interval): parse each distinct text once.
    codes, uniq = pd.factorize(np.array(text.split(b","), dtype=object))
    if not all(map(_JSON_NUMBER.match, uniq)):   # float() also takes "+1", ".5", "01"; JSON does not
        return None
    return np.array([float(u) for u in uniq], dtype=np.float64)[codes]


def _sampled_fast(blobs, samples, weights, nframes):
    """(stacks, ids, weights) from cut-out arrays, or None when the plain path must decide."""
    data = blobs["\0data"]
    if isinstance(samples, str):
        a, b, kind = blobs.get(samples, (0, 0, None))
        got = _parse_samples(data, a, b, nframes, blobs.setdefault("\0powers", [])) if kind == "samples" else None
        if got is None:
            return None
        stacks, ids = got
    else:
        return None
    if isinstance(weights, str):
        a, b, kind = blobs.get(weights, (0, 0, None))
        w = _parse_weights(data, a, b) if kind == "weights" else None
    elif isinstance(weights, list) and all(type(x) in (int, float) for x in weights):
        w = np.asarray(weights, dtype=np.float64)
    else:
        w = None
    if w is None or len(w) != len(ids) or (w < 0).any() or not np.isfinite(w).all():
        return None
    return stacks, ids, w


def _read_fast(data: bytes, source: str, metric: str):
    cut = _cut(data)
    if cut is None:
        return None
    skeleton, blobs = cut
    try:
        doc = parse_json(skeleton)
    except ValueError:   # invalid JSON, not UTF-8, an integer over Python's digit limit
        return None
    # Every placeholder must sit where a sampled profile's samples or weights belong.
    profiles = doc.get("profiles") if isinstance(doc, dict) else None
    if not isinstance(profiles, list):
        return None
    seen = [v for p in profiles if isinstance(p, dict) and p.get("type") == "sampled"
            for v in (p.get("samples"), p.get("weights")) if isinstance(v, str) and v in blobs]
    if len(seen) != len(set(seen)) or len(seen) != len(blobs):
        return None
    blobs["\0data"] = data
    try:
        return from_dict(doc, source=source, metric=metric, raw=Raw(data, NAME), _blobs=blobs)
    except (_Fallback, ProfileFormatError):
        return None


def read(data: bytes, source: str = "<input>", metric: str = "wall") -> Profile:
    if len(data) >= _MIN_FAST:
        prof = _read_fast(data, source, metric)
        if prof is not None:
            return prof
    doc = load_json(data, source)
    return from_dict(doc, source=source, metric=metric, raw=Raw(data, NAME))


def from_dict(doc, source: str = "<input>", metric: str = "wall", raw: Raw | None = None,
              _blobs: dict | None = None) -> Profile:
    if not isinstance(doc, dict) or not isinstance(doc.get("profiles"), list):
        raise _err(source, "$", "expected a speedscope object with a 'profiles' list")
    if len(doc["profiles"]) > MAX_THREADS:   # each profile is a thread
        raise too_many_threads(source, "profiles")
    frames = _frames(doc, source)
    nframes = len(frames)
    ext = checked_ext(doc, source)
    tree = StackTree(source, raw.size if raw is not None else 0)
    # The metric the weights are in: what our writer recorded, else the caller's choice.
    if ext.get("metric") in ("wall", "cpu") + MEMORY_METRICS:
        metric = ext["metric"]
    elif ext.get("metric") == "off_cpu":
        metric = "wall"
    units = set()
    threads: list[str] = []
    taken: set[str] = set()          # the names in threads
    dup_from: dict[str, int] = {}    # name -> the next k to try for "name (k)"
    rows_thread, rows_stack, rows_n, rows_reason = [], [], [], []
    table = _ext_threads(ext, len(doc["profiles"]))
    extra_cols: dict[str, list] = {}
    s_parts = []
    base = 0
    for pi, prof in enumerate(doc["profiles"]):
        if not isinstance(prof, dict):
            raise _err(source, f"profiles[{pi}]", "expected an object")
        unit = prof.get("unit", "none")
        if unit not in UNITS:
            raise _err(source, f"profiles[{pi}].unit", f"unknown unit {unit!r}; expected one of {', '.join(UNITS)}")
        units.add(unit)
        kind = prof.get("type")
        if kind == "sampled":
            stacks, ids, w, times = _sampled(prof, pi, nframes, source, _blobs)
        elif kind == "evented":
            stacks, ids, w, times = _evented(prof, pi, nframes, source, tree)
        else:
            raise _err(source, f"profiles[{pi}].type", f"expected 'sampled' or 'evented', got {kind!r}")
        name = table[pi]["label"] if table else str(prof.get("name") or f"profile {pi}")
        if name in taken:   # the first free "name (k)", k from where this name's search stopped
            stem, k = name, dup_from.get(name, 2)
            while f"{stem} ({k})" in taken:
                k += 1
            dup_from[stem] = k + 1
            name = f"{stem} ({k})"
        taken.add(name)
        threads.append(name)
        tid = len(threads) - 1
        scale = UNITS[unit]
        pext = _profile_ext(prof, pi, len(w), source)
        reason = _reason_ext(prof, pi, len(w), source)
        if reason is not None:   # each (stack, reason) is a row of its own (reasons.py)
            stacks, ids, row_reason = _by_reason(stacks, ids, reason)
            rows_reason += row_reason
        else:
            rows_reason += [None] * len(stacks)
        counts = np.asarray(pext["samples"], dtype=np.float64) if "samples" in pext else None
        if counts is not None and len(counts) != len(w):
            counts = None
        if counts is None:
            counts = w if scale is None or metric in MEMORY_METRICS else np.ones(len(w))
        nst = len(stacks)
        rows_thread += [tid] * nst
        rows_stack += stacks
        rows_n.append(np.bincount(ids, weights=counts, minlength=nst))
        per_metric = {}
        if metric in MEMORY_METRICS:  # our own memory profile: weights in bytes or allocations
            per_metric[metric] = w
        elif scale is not None:
            per_metric[metric] = w * scale
        for m in WEIGHT_METRICS:
            if m in pext:
                per_metric[m] = np.asarray([np.nan if v is None else v for v in pext[m]], dtype=np.float64)
        for m, vals in per_metric.items():
            col = extra_cols.setdefault(m, [np.full(len(r), np.nan) for r in rows_n[:-1]])
            # NaN stays NaN in the sum only if every sample of the stack is NaN.
            agg = np.bincount(ids, weights=np.nan_to_num(vals), minlength=nst)
            known = np.bincount(ids, weights=~np.isnan(vals), minlength=nst) > 0
            col.append(np.where(known, agg, np.nan))
        for m, col in extra_cols.items():
            if len(col) < len(rows_n):
                col.append(np.full(nst, np.nan))
        ordered = prof.get("type") == "evented" or unit not in ("none", "bytes") or "time" in pext
        if len(ids) and ordered:
            t = np.asarray(pext["time"], dtype=np.float64) if "time" in pext \
                else (times * scale if scale is not None else times)
            part = {"time": t, "stack": ids + base}
            for m, vals in per_metric.items():
                part[m] = vals
            part["reason"] = reason if reason is not None else [None] * len(ids)
            runq = ext_block(prof).get("runq")   # run-queue seconds, with the reasons (reasons.split)
            if reason is not None and isinstance(runq, list) and len(runq) == len(ids) \
                    and all(x is None or type(x) in (int, float) for x in runq):
                part["runq"] = np.asarray([np.nan if x is None else x for x in runq], dtype=np.float64)
            cw = ext_block(prof).get("change_width")   # where a change was placed (transforms/cpu_split.py)
            if isinstance(cw, list) and len(cw) == len(ids) \
                    and all(x is None or (type(x) in (int, float) and x >= 0) for x in cw):
                part["change_width"] = np.asarray([np.nan if x is None else x for x in cw], dtype=np.float64)
            part.update(_waker_ext(prof, pi, len(ids), source))
            s_parts.append(pd.DataFrame(part))
        base += nst
    n = np.concatenate(rows_n) if rows_n else np.zeros(0)
    stacks_df = pd.DataFrame({"thread": np.asarray(rows_thread, dtype=np.int64),
                              "stack": pd.Series(rows_stack, dtype=object)})
    stacks_df["samples"] = n.astype(np.int64) if np.all(n == np.round(n)) else n
    for m, col in extra_cols.items():
        stacks_df[m] = np.concatenate(col) if col else np.zeros(0)
    has_reason = rows_reason.count(None) != len(rows_reason)   # at C speed: a row per distinct stack
    if has_reason:
        stacks_df["reason"] = pd.Series(rows_reason, dtype=object)
    samples_df = pd.concat(s_parts, ignore_index=True) if s_parts else None
    if samples_df is not None and not has_reason:
        samples_df = samples_df.drop(columns="reason")
    if samples_df is not None and len(s_parts) > 1:  # one part per thread: interleave them in time order
        samples_df = samples_df.sort_values("time", kind="stable").reset_index(drop=True)
    time_units = units - {"none", "bytes"}
    exporter, name = doc.get("exporter"), doc.get("name")   # text, or nothing: writers carry them as meta
    meta = {"format": NAME, "source": source, "exporter": exporter if isinstance(exporter, str) else None,
            "name": name if isinstance(name, str) else None, "units": sorted(units)}
    carried = _carried_meta(ext, source)
    if carried.get("format") not in (None, NAME):
        carried["converted_from"] = carried["format"]
    meta.update(carried)
    meta.update(format=NAME, source=source)
    if "bytes" in units:
        meta["unit"] = "bytes"
    primary = ext.get("metric") or (metric if time_units else "samples")
    if primary == "off_cpu" and not {"wall", "cpu"} <= set(stacks_df):
        primary = "samples"
    elif primary not in stacks_df and primary not in ("samples", "off_cpu"):
        primary = "samples"
    for m in ext.get("unknown_metrics") or ():
        if m not in stacks_df:
            stacks_df[m] = np.nan
    rows = [dict(t, label=lab) for t, lab in zip(table, threads)] if table else \
        _named_threads(threads, str(doc.get("exporter") or ""))
    return Profile(frames, stacks_df, samples_df, meta, raw, primary, threads=thread_table(rows))


def _ext_threads(ext: dict, n: int) -> list[dict] | None:
    """Our writer's thread table, one row per profile, when it is there and fits."""
    rows = ext.get("threads")
    if not isinstance(rows, list) or len(rows) != n or not all(isinstance(r, dict) and "label" in r for r in rows):
        return None
    return [{**thread_attrs(r), "label": str(r["label"])} for r in rows]


# py-spy names each thread `Thread <tid> "<name>"`, with --subprocesses `Process <pid> Thread <tid> "<name>"`.
_PYSPY_THREAD = re.compile(r'^(?:Process (\d+) )?Thread (\d+)(?: "(.*)")?$')


def _named_threads(labels: list[str], exporter: str) -> list[dict]:
    """Thread rows from profile names; py-spy's names give the pid, native id and thread name."""
    rows = []
    for lab in labels:
        m = _PYSPY_THREAD.match(lab) if exporter.startswith("py-spy") else None
        if m is None:
            rows.append({"label": lab})
        else:
            pid, tid, name = m.group(1), int(m.group(2)), m.group(3)
            rows.append({"label": lab if pid is None else lab.split(" ", 2)[2], "tid": tid, "name": name,
                         "pid": None if pid is None else int(pid), "backend": "py-spy", "python": True})
    return rows


def _carried_meta(ext: dict, source: str) -> dict:
    """The x-profmagic block's meta (``checked_ext`` checked its metric and unknown metrics)."""
    return carried_meta(ext.get("meta"), source, f"{EXT}.meta")


def _profile_ext(prof: dict, pi: int, n: int, source: str) -> dict:
    """A profile's x-profmagic block: per-sample columns (``samples``, ``time``, the weight metrics),
    each a list of ``n`` numbers (null for unknown); a column of another length is dropped."""
    block = ext_block(prof)
    out = {}
    for k in ("samples", "time") + WEIGHT_METRICS:
        v = block.get(k)
        if v is None:
            continue
        if not (isinstance(v, list) and all(x is None or (type(x) in (int, float)) for x in v)) \
                or (k in ("samples", "time") and None in v):
            raise _err(source, f"profiles[{pi}].{EXT}.{k}", "expected a list of numbers")
        if len(v) == n:
            out[k] = v
    return out


def _reason_ext(prof: dict, pi: int, n: int, source: str) -> list | None:
    """A profile's per-sample reasons (reasons.REASONS, or null), or None; another length is dropped."""
    v = ext_block(prof).get("reason")
    if v is None:
        return None
    if not isinstance(v, list) or any(x is not None and x not in REASONS for x in v):
        raise _err(source, f"profiles[{pi}].{EXT}.reason", f"expected a list of reasons ({', '.join(REASONS)})")
    return v if len(v) == n else None


# Per-sample wakers (perf --mode both, formats/perf_sched.py): who ended each wait, how, the
# waker's pid and its stack at the wakeup (frame names, root first).
WAKER_COLUMNS = {"woken_by": str, "ended": str, "waker_pid": int, "waker_stack": list}


def _waker_ext(prof: dict, pi: int, n: int, source: str) -> dict:
    out = {}
    ext = ext_block(prof)
    for k, kind in WAKER_COLUMNS.items():
        v = ext.get(k)
        if v is None:
            continue
        if not isinstance(v, list) or not all(
                x is None or (type(x) is kind and (kind is not list or all(isinstance(y, str) for y in x)))
                for x in v):
            raise _err(source, f"profiles[{pi}].{EXT}.{k}",
                       f"expected a list of {'lists of frame names' if kind is list else kind.__name__} or null")
        if len(v) == n:
            col = np.empty(n, dtype=object)
            for i, x in enumerate(v):
                col[i] = tuple(x) if kind is list and x is not None else x
            out[k] = col
    return out


def _waker_cols(sm) -> dict:
    out = {}
    for k, kind in WAKER_COLUMNS.items():
        if k in sm:
            out[k] = [None if x is None or (not isinstance(x, tuple) and pd.isna(x)) else
                      list(x) if kind is list else kind(x) for x in sm[k].astype(object).tolist()]
    return out


def _by_reason(stacks: list, ids: np.ndarray, reason: list) -> tuple[list, np.ndarray, list]:
    """Rows keyed by (stack, reason): (their stacks, each sample's row, each row's reason)."""
    keys: dict[tuple, int] = {}
    new = np.empty(len(ids), dtype=np.int64)
    for i, (s, r) in enumerate(zip(ids.tolist(), reason)):
        new[i] = keys.setdefault((s, r), len(keys))
    return [stacks[s] for s, _ in keys], new, [r for _, r in keys]


def _reasons_of(col) -> list:
    return [None if v is None or v != v else str(v) for v in col.astype(object).tolist()]


def _jsonable(v):
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating, float)):
        return None if not math.isfinite(float(v)) else float(v)
    if v is None or isinstance(v, (str, int, bool)):
        return v
    return str(v)


def _clean(a: np.ndarray) -> list:
    return [None if x != x else float(x) for x in a.tolist()]


def to_dict(profile: Profile) -> dict:
    fr = profile.frames
    # Frame ids become positions in shared.frames.
    order = fr.index.to_numpy()
    pos = np.full(int(order.max()) + 1 if len(order) else 0, -1, dtype=np.int64)
    pos[order] = np.arange(len(order))
    frames = []
    for name, file, line in zip(fr["name"], fr["file"], fr["line"]):
        f = {"name": str(name)}
        if file:
            f["file"] = str(file)
        if line is not pd.NA and line is not None:
            f["line"] = int(line)
        frames.append(f)
    primary = profile.metric if profile.metric != "off_cpu" else "wall"
    time_metric = primary in ("wall", "cpu")
    stacks = profile.stacks
    known = [m for m in WEIGHT_METRICS if m in stacks]
    unknown = [m for m in known if not stacks[m].notna().any()]
    stack_pos = [[int(pos[f]) for f in s] for s in stacks["stack"]]
    profiles = []
    # Memory weights belong to stacks, not to time-ordered samples: a profile with memory is written per stack.
    ordered = (profile.samples is not None and len(profile.samples) > 0
               and not any(m in stacks for m in MEMORY_METRICS))
    row_threads = profile.thread_ids()
    sample_threads = row_threads[profile.samples["stack"].to_numpy()] if ordered else None
    for tid, thread in enumerate(profile.threads):
        ext: dict = {}
        if ordered:
            sm = profile.samples[sample_threads == tid]
            ids = sm["stack"].to_numpy()
            w = sm[primary].to_numpy(dtype=np.float64) if time_metric and primary in sm else np.ones(len(ids))
            ext["time"] = sm["time"].astype(float).tolist()
            for m in known:
                if m in sm and m != primary:
                    ext[m] = _clean(sm[m].to_numpy(dtype=np.float64))
            if "samples" in sm:
                ext["samples"] = sm["samples"].astype(float).tolist()
            if "reason" in sm:
                ext["reason"] = _reasons_of(sm["reason"])
            for col in ("runq", "change_width"):
                if col in sm:
                    ext[col] = _clean(sm[col].to_numpy(dtype=np.float64))
            ext.update(_waker_cols(sm))
        else:
            ids = np.flatnonzero(row_threads == tid)
            w = stacks[primary].to_numpy(dtype=np.float64)[ids] if primary in stacks else np.ones(len(ids))
            n = stacks["samples"].to_numpy()[ids]
            if time_metric or not np.array_equal(n, w):
                ext["samples"] = n.astype(float).tolist()
            for m in known:
                if m != primary:
                    ext[m] = _clean(stacks[m].to_numpy(dtype=np.float64)[ids])
            if "reason" in stacks:
                ext["reason"] = _reasons_of(stacks["reason"].iloc[ids])
        w = np.nan_to_num(w)
        total = float(w.sum())
        start = float(ext["time"][0]) if ext.get("time") else 0.0
        p = {
            "type": "sampled",
            "name": str(thread),
            "unit": "seconds" if time_metric else ("bytes" if primary in ("bytes", "allocated") else "none"),
            "startValue": start,
            "endValue": start + total,
            "samples": [stack_pos[i] for i in ids],
            "weights": [float(x) if time_metric else (int(x) if float(x).is_integer() else float(x))
                        for x in w.tolist()],
        }
        if ext:
            p[EXT] = ext
        profiles.append(p)
    meta = _jsonable(dict(profile.meta))
    table = [_jsonable({k: (None if v is pd.NA else v) for k, v in row.items()})
             for row in profile.thread_table.to_dict("records")]
    return {
        "$schema": SCHEMA,
        "exporter": f"profmagic@{_version()}",
        "name": str(profile.meta.get("name") or profile.meta.get("backend") or "profile"),
        "activeProfileIndex": 0,
        "shared": {"frames": frames},
        "profiles": profiles,
        EXT: {"kinds": [str(k) for k in fr["kind"]], "metric": profile.metric, "meta": meta,
              "unknown_metrics": unknown, "threads": table},
    }


def json_bytes(doc) -> bytes:
    """Compact UTF-8 JSON; lone surrogates (undecodable input bytes) are escaped instead."""
    try:
        return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(doc, separators=(",", ":")).encode("ascii")


def write(profile: Profile) -> bytes:
    return json_bytes(to_dict(profile))

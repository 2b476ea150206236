"""Folded stacks (Brendan Gregg's ``a;b;c 42``): read and write.

Counts have no time unit, so they land in the ``samples`` metric. Lines are written in the
order stackcollapse prints them: sorted by the bytes of the stack.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..errors import ProfileFormatError
from ._common import decode
from ..model import Profile, Raw, StackBuilder
from .registry import Format

NAME = "folded"
FORMAT = Format(NAME, __name__, suffixes=(".folded", ".txt", ".collapsed"), mime="text/plain",
                label="folded stacks", opens="opens in flamegraph.pl and speedscope")
# As flamegraph.pl: the stack is everything before the last whitespace and the count.
_LINE = re.compile(r"^(.*)\s(\d+(?:\.\d*)?)$")
_PY_TAIL = re.compile(r"\.pyx?:(\d+)\)$")   # the end of "name (file.py:12)"
MAX_COUNT = 1 << 53   # a line's count, at most: the largest a float counts exactly (no writer repeats a count)


def sniff(head: bytes) -> bool:
    try:
        text = decode(head)
    except UnicodeDecodeError:
        return False
    lines = [ln.rstrip("\r") for ln in text.split("\n")[:20] if ln.strip()]
    if len(lines) > 1 and not text.endswith("\n"):
        lines = lines[:-1]  # the head may cut the last line
    return bool(lines) and all(_LINE.match(ln) for ln in lines)


def frame_kind(name: str) -> tuple[str, str | None, int | None]:
    """(kind, file, line) guessed from a folded frame name; the name itself is kept as is."""
    if name.endswith("_[k]"):
        return "kernel", None, None
    if name.endswith("_[j]"):
        return "other", None, None
    # "name (file.py:12)": the end first, then the last " (" before it. For a name (no newline in it)
    # this is what r"^.* \((.+\.pyx?):(\d+)\)$" matches, in linear time: that regex takes time
    # quadratic in a name of many " (".
    m = _PY_TAIL.search(name)
    if m:
        p = name.rfind(" (", 0, m.start() - 1)
        if p >= 0:
            return "python", name[p + 2:m.start(1) - 1], int(m.group(1))
    return "other", None, None


_BATCH = 20_000  # stacks whose frame names are factorised together
_CHUNK = 1 << 22  # bytes of input split into lines at a time
_LINE_B = re.compile(rb"^(.*)\s(\d+(?:\.\d*)?)$")


def _utf8(data: bytes) -> bytes:
    """The input as UTF-8 bytes (UTF-16 with a BOM is re-encoded; a UTF-8 BOM is dropped)."""
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return decode(data).encode("utf-8", "surrogateescape")
    return data[3:] if data[:3] == b"\xef\xbb\xbf" else data


def _too_many(num: bytes, source: str, line: int):
    text = num.decode("ascii", "replace")
    raise ProfileFormatError(f"a count of {text[:40]}{'...' if len(text) > 40 else ''}; at most 2**53 "
                             f"({MAX_COUNT:,}, the count limit)", source=source, line=line)


def _parse_lines(data: bytes, source: str, lenient: bool):
    """{stack bytes: count} (duplicate lines add up), skipped line count, whether any count is decimal.

    Works on bytes, a chunk of lines at a time, so the whole text never exists as str or as one list."""
    counts: dict[bytes, float] = {}
    skipped = 0
    any_float = False
    get = counts.get
    base = 0  # line number before the chunk
    pos, size = 0, len(data)
    while pos < size:
        cut = data.find(b"\n", pos + _CHUNK)
        cut = size if cut < 0 else cut + 1
        lines = data[pos:cut].split(b"\n")
        pos = cut
        for i, line in enumerate(lines):
            if line.endswith(b"\r"):
                line = line[:-1]
            stack, sp, num = line.rpartition(b" ")
            if sp and num.isdigit():
                count = int(num) if len(num) <= 16 else _too_many(num, source, base + i + 1)
            else:
                if not line.strip():
                    continue
                m = _LINE_B.match(line)
                if not m:
                    if lenient:
                        skipped += 1
                        continue
                    text = line.decode("utf-8", "replace")
                    raise ProfileFormatError(f"expected 'frame;frame;... COUNT', got {text[:200]!r}",
                                             source=source, line=base + i + 1)
                stack, num = m.groups()
                if b"." in num:
                    any_float = True
                    count = float(num)
                else:
                    count = int(num) if len(num) <= 16 else _too_many(num, source, base + i + 1)
            if count > MAX_COUNT:
                _too_many(num, source, base + i + 1)
            counts[stack] = get(stack, 0) + count
        base += len(lines) - 1
    return counts, skipped, any_float


def read(data: bytes, source: str = "<input>", lenient: bool = False, thread: str = "all") -> Profile:
    counts, skipped, any_float = _parse_lines(_utf8(data), source, lenient)
    if not counts:
        raise ProfileFormatError("no stacks found; expected lines of 'frame;frame;... COUNT'",
                                 source=source, offset=0)
    b = StackBuilder()
    b.thread(thread)
    frame_ids: dict[bytes, int] = {}
    texts = list(counts)
    for i in range(0, len(texts), _BATCH):
        batch = [t for t in texts[i:i + _BATCH] if t]
        # All names of a batch at once: one split and one hash pass instead of a lookup per frame.
        codes, uniq = pd.factorize(np.array(b";".join(batch).split(b";"), dtype=object))
        remap = []
        for raw_name in uniq:
            fid = frame_ids.get(raw_name)
            if fid is None:
                name = raw_name.decode("utf-8", "surrogateescape")
                kind, file, ln = frame_kind(name)
                fid = frame_ids[raw_name] = b.frame(name, file, ln, kind)
            remap.append(fid)
        # Map through the list so every stack shares the same int objects (millions of entries).
        fids = list(map(remap.__getitem__, codes.tolist()))
        pos = 0
        for t in batch:
            n = t.count(b";") + 1
            b.add(b.stack(thread, fids[pos:pos + n]), samples=counts[t])
            pos += n
        if len(batch) < len(texts[i:i + _BATCH]):  # the empty stack: a line with only a count
            b.add(b.stack(thread, ()), samples=counts[b""])
    del counts, texts
    meta = {"format": NAME, "backend": "folded", "source": source, "skipped_lines": skipped}
    if any_float:
        meta["fractional_counts"] = True
    return b.build(metric="samples", meta=meta, raw=Raw(data, NAME))


# Lone surrogates but those surrogateescape makes of undecodable bytes (U+DC80..U+DCFF): JSON's "\\ud800".
_LONE = re.compile("[\ud800-\udc7f\udd00-\udfff]")


def _clean(name: str) -> str:
    # ';' separates frames and a newline ends a line: as stackcollapse does, ';' becomes ':'. A lone
    # surrogate has no UTF-8: it becomes the text \ud800 (surrogateescape gives back the bytes of the rest).
    name = name.replace(";", ":").replace("\n", " ").replace("\r", " ")
    return _LONE.sub(lambda m: f"\\u{ord(m.group()):04x}", name) if _LONE.search(name) else name


def _fmt(v: float) -> str:
    if float(v).is_integer():
        return str(int(v))
    return f"{v:.9g}"


def lines(profile: Profile, metric: str | None = None, thread_roots: bool | None = None) -> dict[str, float]:
    """Folded stack text -> weight. With several threads, each stack is rooted at its thread's name
    unless ``thread_roots`` is False."""
    metric = metric or profile.metric
    weights = profile.weights(metric).to_numpy()
    names = {fid: _clean(str(n)) for fid, n in profile.frames["name"].items()}
    if thread_roots is None:
        # Readers whose stacks already start with a process/thread frame (perf script) set this False.
        thread_roots = profile.meta.get("folded_thread_roots", len(profile.threads) > 1)
    out: dict[str, float] = {}
    for thread, stack, w in zip(profile.stacks["thread"], profile.stacks["stack"], weights):
        if w != w or w == 0:  # NaN or nothing
            continue
        parts = [names[f] for f in stack]
        if thread_roots:
            parts.insert(0, _clean(str(thread)))
        key = ";".join(parts)
        out[key] = out.get(key, 0) + w
    return out


def write_text(profile: Profile, metric: str | None = None, thread_roots: bool | None = None) -> str:
    agg = lines(profile, metric, thread_roots)
    keys = sorted(agg, key=lambda k: k.encode("utf-8", errors="surrogateescape"))
    return "".join(f"{k} {_fmt(agg[k])}\n" for k in keys)


def write(profile: Profile, metric: str | None = None) -> bytes:
    # surrogateescape gives back the bytes a name was read from (_clean wrote any other lone surrogate).
    return write_text(profile, metric).encode("utf-8", errors="surrogateescape")

"""pstats files: the marshalled stats dict that ``pstats.Stats.dump_stats`` and
``cProfile.Profile.dump_stats`` write.

The dict maps ``(file, line, function)`` to ``(primitive calls, calls, tottime, cumtime,
callers)``; ``callers`` maps each caller's key to ``(calls, primitive calls, tottime, cumtime)``
of the calls it made (cProfile) or to a call count (the pure-Python ``profile`` module).

pstats keeps caller→callee pairs only, not stacks, so stacks are rebuilt, approximately:

1. Cut recursion and cycles: a depth-first walk from the roots (functions nobody called)
   along caller→callee edges drops every edge back into a function still on the walk's path
   (self-calls included); functions reachable only through a cycle start a walk of their own.
2. Walk the remaining acyclic graph callers first. A root has one path, itself, with share 1.
   A function's paths are its callers' paths extended by it, each caller weighted by its share
   of the function's cumtime (by call count where cumtimes are all zero). Only the heaviest
   paths are kept per function (at most ``MAX_PATHS``), renormalised; how many, and how deep,
   is bounded by the size of the call graph (``rebuild``), so a dense graph cannot explode.
3. Each function's tottime is split over its paths by those shares; the last path takes the
   remainder, so the rebuilt total equals the sum of tottime.

``table()`` gives the exact flat table (the primary view of this format). The bytes are read by
``decode``, a reader of the marshal subset pstats files use, not by ``marshal``, which is not
meant for untrusted input (a crafted file can crash the process).
"""
from __future__ import annotations

import heapq
import math
import struct
import sys

import numpy as np
import pandas as pd

from ..errors import ProfileFormatError
from ..model import Profile, Raw, StackBuilder
from .registry import Format

NAME = "pstats"
FORMAT = Format(NAME, __name__, raw_suffix=".pstats")
MAX_PATHS = 256          # paths kept per function, at most
MIN_PER_FUNCTION = 4     # ... and at least, whatever the budget
# The rebuilt stacks are bounded by the call graph's size (functions + caller entries):
PATHS_PER_ENTRY, MIN_PATHS = 2, 20_000
FRAMES_PER_ENTRY, MIN_FRAMES = 40, 1_000_000
CUT = "[callers cut]"    # stands for the callers above a path cut to the depth limit
APPROXIMATE = ("stacks rebuilt from caller→callee pairs (pstats keeps no stacks): each function's "
               "time is split over its callers in proportion to their cumtime; the flat table is exact")


def sniff(head: bytes) -> bool:
    """A marshalled dict whose first key is a 3-tuple (or an empty dict)."""
    if len(head) < 2 or head[0] not in (0x7B, 0xFB):  # TYPE_DICT, with or without FLAG_REF
        return False
    if head[1] == 0x30:  # TYPE_NULL: the empty dict
        return len(head) == 2
    if head[1] in (0x29, 0xA9):  # small tuple: one length byte
        return len(head) > 2 and head[2] == 3
    if head[1] in (0x28, 0xA8):  # tuple: 4-byte length
        return head[2:6] == b"\x03\x00\x00\x00"
    return False


def _label(key) -> str:
    file, line, name = key
    return name if file == "~" else f"{name} ({file}:{line})"


# The marshal format (CPython's Python/marshal.c): a type code byte, with FLAG_REF (0x80) set when
# the object goes into the reference table, then its payload. pstats files use only the codes below.
MAX_DEPTH = 10          # a pstats dict nests 4 deep: stats{key: (.., callers{key: (..)})}
MEMORY_FACTOR = 8       # estimated bytes of objects built per byte of input, at most
MEMORY_BASE = 1 << 20
_EXPECT = "; expected a pstats dict (marshalled dicts, tuples, strings, ints and floats)"
_I32 = struct.Struct("<i").unpack_from
_F64 = struct.Struct("<d").unpack_from
_NO_KEY = object()
_OTHER = {"c": "code object", "[": "list", "<": "set", ">": "frozenset", "x": "complex number",
          "y": "complex number", "S": "StopIteration", ".": "Ellipsis"}


# Records from _parse to _build: (op, offset, a, b).
_OPEN_TUPLE, _OPEN_DICT, _VALUE, _REF, _END_DICT, _DONE = range(6)
_KEY, _VAL = -1, -2      # a dict's state in the parser: waiting for a key, or for its value
_COST = {0x69: 32, 0x67: 24, 0x66: 24, 0x6C: 40}   # bytes an int, float or long costs when built


def decode(data: bytes, source: str = "<input>"):
    """What ``marshal.loads(data)`` returns, for the subset pstats files use: dict, tuple, str, int,
    float (and None, True, False).

    Not ``marshal``, which trusts its input (a crafted file can crash the process or make it allocate
    gigabytes): ``_parse`` checks every declared length against the bytes left before anything is
    built, nesting (at most ``MAX_DEPTH``), references (none to a container still being read: a cycle)
    and type codes (no code objects, lists, sets...); ``_build`` makes the objects from its records,
    estimated to stay within ``MEMORY_FACTOR`` times the input.
    """
    data = bytes(data)
    return _build(_parse(data, source), MEMORY_FACTOR * len(data) + MEMORY_BASE, source)


def _fail(source, msg, at):
    raise ProfileFormatError(msg + _EXPECT, source=source, offset=at)


def _parse(data: bytes, source: str):
    """The marshal data as records, one a type code (a finished tuple adds ``_DONE``), until the first
    object is complete: ``(_OPEN_TUPLE, at, items, ref slot)``, ``(_OPEN_DICT, at, 0, ref slot)``,
    ``(_VALUE, at, value, type code | FLAG_REF)``, ``(_REF, at, index, 0)``, ``(_END_DICT, at, 0, 0)``.
    Every check that needs no object built is made here, with the offset of the code that fails it."""
    size = len(data)
    pending: list[bool] = []   # per reference slot: a container still being read
    stack: list[list] = []     # open containers: [items left (a tuple) | _KEY | _VAL (a dict), ref slot]
    pos = 0

    def short(n, what, at, left):
        _fail(source, f"the marshal data ends early: {what} needs {n:,} bytes, {left:,} are left", at)

    def count(pos, one_byte, what, at):
        """(a declared count of items or bytes, the position after it): one byte or four, at most
        the bytes left (every item takes at least one)."""
        width = 1 if one_byte else 4
        if pos + width > size:
            short(width, f"{what}'s length", at, size - pos)
        n = data[pos] if one_byte else _I32(data, pos)[0]
        pos += width
        if not 0 <= n <= size - pos:
            _fail(source, f"{what} declares {n:,} items but only {size - pos:,} bytes are left", at)
        return n, pos

    while True:
        at = pos
        if pos + 1 > size:
            short(1, "a type code", at, size - pos)
        code = data[pos]
        flag = code & 0x80
        code &= 0x7F
        pos += 1
        if code == 0x72:                                    # 'r' a reference
            if pos + 4 > size:
                short(4, "a reference", at, size - pos)
            i = _I32(data, pos)[0]
            pos += 4
            if not 0 <= i < len(pending):
                _fail(source, f"reference {i} to an object not read yet ({len(pending)} so far)", at)
            if pending[i]:
                _fail(source, f"reference {i} to a container that is still being read (a cycle)", at)
            yield _REF, at, i, 0
        elif code in (0x28, 0x29, 0x7B):                    # '(' tuple, ')' small tuple, '{' dict
            if len(stack) >= MAX_DEPTH:
                _fail(source, f"the marshal data nests deeper than {MAX_DEPTH} levels", at)
            n = 0
            if code != 0x7B:
                n, pos = count(pos, code == 0x29, "a tuple", at)
            slot = -1
            if flag:
                slot = len(pending)
                pending.append(True)
            yield (_OPEN_DICT, at, 0, slot) if code == 0x7B else (_OPEN_TUPLE, at, n, slot)
            if code == 0x7B or n:
                stack.append([_KEY if code == 0x7B else n, slot])
                continue
            if flag:                                        # the empty tuple: complete already
                pending[slot] = False
            yield _DONE, at, 0, 0
        elif code == 0x30 and stack and stack[-1][0] == _KEY:   # '0' ends a dict
            slot = stack.pop()[1]
            if slot >= 0:
                pending[slot] = False
            yield _END_DICT, at, 0, 0
        else:
            v = _scalar(data, pos, code, at, source)
            pos = v[1]
            if flag:
                pending.append(False)
            yield _VALUE, at, v[0], code | flag
        # The value goes into the open containers, closing each tuple it completes.
        while stack:
            top = stack[-1]
            if top[0] == _KEY:
                top[0] = _VAL
                break
            if top[0] == _VAL:
                top[0] = _KEY
                break
            top[0] -= 1
            if top[0]:
                break
            stack.pop()
            if top[1] >= 0:
                pending[top[1]] = False
            yield _DONE, at, 0, 0
        else:
            return   # bytes after the object are ignored, as marshal does


def _scalar(data: bytes, pos: int, code: int, at: int, source: str):
    """(the value of a scalar's type code at ``at``, the position after it)."""
    size = len(data)

    def short(n, what):
        _fail(source, f"the marshal data ends early: {what} needs {n:,} bytes, {size - pos:,} are left", at)

    if code == 0x69:                                        # 'i' int32
        if pos + 4 > size:
            short(4, "an int")
        return _I32(data, pos)[0], pos + 4
    if code == 0x67:                                        # 'g' binary float
        if pos + 8 > size:
            short(8, "a float")
        return _F64(data, pos)[0], pos + 8
    if code in (0x75, 0x74, 0x61, 0x41, 0x7A, 0x5A, 0x73):  # u t a A z Z: str; s: bytes
        width = 1 if code in (0x7A, 0x5A) else 4
        if pos + width > size:
            short(width, "a string's length")
        n = data[pos] if width == 1 else _I32(data, pos)[0]
        pos += width
        if not 0 <= n <= size - pos:
            _fail(source, f"a string declares {n:,} items but only {size - pos:,} bytes are left", at)
        raw = data[pos:pos + n]
        pos += n
        if code == 0x73:
            return raw, pos
        if code in (0x75, 0x74):                            # UTF-8, surrogates allowed (as marshal)
            try:
                v = raw.decode("utf-8", "surrogatepass")
            except UnicodeDecodeError as e:
                _fail(source, f"a string that is not UTF-8 ({e.reason})", at)
        else:                                               # one byte per character
            v = raw.decode("latin-1")
        return (sys.intern(v) if code in (0x74, 0x41, 0x5A) else v), pos
    if code == 0x6C:                                        # 'l' long: 15-bit digits, least first
        if pos + 4 > size:
            short(4, "an int")
        n = _I32(data, pos)[0]
        pos += 4
        if abs(n) > 5:   # 75 bits: more than any count or line number
            _fail(source, f"an int of {abs(n)} 15-bit digits (too large for a count or line number)", at)
        if pos + 2 * abs(n) > size:
            short(2 * abs(n), "an int")
        v = 0
        for k in range(abs(n) - 1, -1, -1):
            d = data[pos + 2 * k] | data[pos + 2 * k + 1] << 8
            if d >> 15 or (d == 0 and k == abs(n) - 1):
                _fail(source, "an int with a digit out of range", at)
            v = v << 15 | d
        return (-v if n < 0 else v), pos + 2 * abs(n)
    if code == 0x66:                                        # 'f' float as text
        if pos + 1 > size:
            short(1, "a float length")
        n = data[pos]
        if pos + 1 + n > size:
            short(1 + n, "a float")
        raw = data[pos + 1:pos + 1 + n]
        try:
            return float(raw.decode("ascii")), pos + 1 + n
        except ValueError:
            _fail(source, f"a float that is not a number ({raw!r})", at)
    if code in (0x4E, 0x54, 0x46):                          # N T F
        return (None if code == 0x4E else code == 0x54), pos
    what = "TYPE_NULL outside a dict" if code == 0x30 else _OTHER.get(chr(code), f"type code {code:#04x}")
    _fail(source, f"marshal {what} is not part of a pstats file", at)


def _build(records, budget: int, source: str):
    """The object ``_parse``'s records describe; refused when its estimated size passes ``budget`` bytes
    (checked after each type code, as it is read)."""
    refs: list = []
    stack: list[list] = []   # open containers: [items (a list) | a dict, a dict's key waiting for its value, slot]
    v = None
    for op, at, a, b in records:
        if op == _VALUE:
            v = a
            budget -= _COST.get(b & 0x7F, 0) if v.__class__ not in (str, bytes) else sys.getsizeof(v)
            if b & 0x80:
                refs.append(v)
        elif op == _DONE or op == _END_DICT:
            c, _, slot = stack.pop()
            v = c if op == _END_DICT else tuple(c)
            if slot >= 0:
                refs[slot] = v
        elif op == _REF:
            v = refs[a]
        else:   # _OPEN_TUPLE, _OPEN_DICT
            budget -= 64 if op == _OPEN_DICT else 56 + 8 * a
            if budget < 0:
                _fail(source, f"the marshal data would need more than {MEMORY_FACTOR}x its size in memory", at)
            if b >= 0:
                refs.append(None)
            stack.append([{} if op == _OPEN_DICT else [], _NO_KEY, b])
            continue
        if op != _DONE and budget < 0:
            _fail(source, f"the marshal data would need more than {MEMORY_FACTOR}x its size in memory", at)
        if stack:   # into the open container
            top = stack[-1]
            c = top[0]
            if c.__class__ is list:
                c.append(v)
            elif top[1] is _NO_KEY:
                top[1] = v
            else:
                try:
                    c[top[1]] = v
                except TypeError:
                    _fail(source, f"a dict key of type {type(top[1]).__name__}", at)
                top[1] = _NO_KEY
                budget -= 64
    return v


def load(data: bytes, source: str = "<input>") -> dict:
    """The validated stats dict."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"pstats data must be bytes, not {type(data).__name__}")
    data = bytes(data)
    if not data or data[0] not in (0x7B, 0xFB):
        raise ProfileFormatError("expected a marshalled dict (first byte '{'), as pstats.Stats.dump_stats "
                                 f"writes; got {data[:8]!r}", source=source, offset=0)
    stats = decode(data, source)
    if not isinstance(stats, dict):
        raise ProfileFormatError(f"expected a dict, got {type(stats).__name__}", source=source, offset=0)
    if not stats:
        raise ProfileFormatError("the stats dict holds no functions; expected at least one entry",
                                 source=source, offset=0)
    num, isfinite = (int, float), math.isfinite   # type(), not isinstance(): bool is refused

    def nums(t, n):   # a tuple of n finite numbers (a sum is finite only when every term is)
        return type(t) is tuple and len(t) == n and all(type(v) in num for v in t) and isfinite(sum(t))

    for i, (key, val) in enumerate(stats.items()):
        if not (type(key) is tuple and len(key) == 3 and type(key[0]) is str
                and type(key[1]) is int and type(key[2]) is str):
            raise ProfileFormatError("expected a key (file: str, line: int, function: str)",
                                     source=source, where=f"entry {i}")
        if not (type(val) is tuple and len(val) == 5 and nums(val[:4], 4) and type(val[4]) is dict):
            raise ProfileFormatError("expected (primitive calls, calls, tottime, cumtime, callers: dict)",
                                     source=source, where=f"entry {i} {key!r}")
        for ck, cv in val[4].items():
            if ck not in stats:
                raise ProfileFormatError(f"caller {ck!r} has no entry of its own; expected every caller "
                                         "to be a key of the dict", source=source, where=f"entry {i} {key!r}")
            if not (nums(cv, 4) or (type(cv) in num and isfinite(cv))):
                raise ProfileFormatError(f"caller {ck!r}: expected (calls, primitive calls, tottime, cumtime) "
                                         "or a call count", source=source, where=f"entry {i} {key!r}")
    return stats


def _edge(cv) -> tuple[float, float]:
    """(calls, cumtime) of one caller→callee edge; cumtime is NaN for count-only edges."""
    if isinstance(cv, tuple):
        return float(cv[0]), float(cv[3])
    return float(cv), math.nan


def _acyclic_parents(keys: list, stats: dict) -> tuple[list[list[tuple[int, float]]], list[int]]:
    """Caller lists with back edges cut, each caller weighted by its share; and a topological order."""
    idx = {k: i for i, k in enumerate(keys)}
    n = len(keys)
    children: list[list[int]] = [[] for _ in range(n)]
    for f, val in stats.items():
        for g in val[4]:
            children[idx[g]].append(idx[f])
    state = [0] * n  # 0 new, 1 on the walk's path, 2 done
    kept: set[tuple[int, int]] = set()
    post: list[int] = []
    has_caller = [bool(stats[k][4]) for k in keys]
    cum = [stats[k][3] for k in keys]
    starts = [i for i in range(n) if not has_caller[i]]
    starts += sorted((i for i in range(n) if has_caller[i]), key=lambda i: -cum[i])
    for s in starts:
        if state[s]:
            continue
        state[s] = 1
        walk = [(s, iter(children[s]))]
        while walk:
            node, it = walk[-1]
            for c in it:
                if state[c] == 1:
                    continue  # back edge (recursion or a cycle): cut
                kept.add((node, c))
                if state[c] == 0:
                    state[c] = 1
                    walk.append((c, iter(children[c])))
                    break
            else:
                state[node] = 2
                post.append(node)
                walk.pop()
    parents: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    for f, val in stats.items():
        fi = idx[f]
        edges = [(idx[g], *_edge(cv)) for g, cv in val[4].items() if (idx[g], fi) in kept]
        cts = [ct for _, _, ct in edges]
        if edges and all(not math.isnan(c) for c in cts) and sum(cts) > 0:
            ws = cts
        elif edges and sum(nc for _, nc, _ in edges) > 0:
            ws = [nc for _, nc, _ in edges]
        else:
            ws = [1.0] * len(edges)
        tot = sum(ws)
        parents[fi] = [(g, w / tot) for (g, _, _), w in zip(edges, ws)]
    return parents, post[::-1]


def budgets(stats: dict) -> tuple[int, int]:
    """(paths, frames) the rebuilt stacks may hold, in proportion to the call graph's size."""
    size = len(stats) + sum(len(v[4]) for v in stats.values())
    return max(MIN_PATHS, PATHS_PER_ENTRY * size), max(MIN_FRAMES, FRAMES_PER_ENTRY * size)


class Paths:
    """The rebuilt paths as a tree: node ``i`` is function ``func[i]`` called from node ``parent[i]``
    (-1 at a root). ``of[f]``: function ``f``'s paths as ``(share, node)``, heaviest first."""

    def __init__(self, n: int):
        self.parent: list[int] = []
        self.func: list[int] = []
        self.depth: list[int] = []
        self.of: list[list[tuple[float, int]]] = [[] for _ in range(n)]
        self.per_function = 0      # the most paths kept for one function
        self.pruned = False        # whether some function had more
        self.max_depth = 0         # paths deeper than this are cut at the root side (0: none)

    def extend(self, f: int, paths: list[tuple[float, int]]) -> None:
        """``of[f]``: each (share, node) in ``paths`` with ``f`` appended to the node's path."""
        n = len(self.func)
        self.of[f] = [(w, n + i) for i, (w, _) in enumerate(paths)]
        self.parent += [up for _, up in paths]
        self.func += [f] * len(paths)
        self.depth += [self.depth[up] + 1 if up >= 0 else 1 for _, up in paths]


def _paths(n: int, parents: list, order: list[int], cap: int) -> Paths:
    """Each function's ``cap`` heaviest paths, found by merging its callers' path lists (each sorted
    heaviest first) rather than extending all of them."""
    t = Paths(n)
    t.per_function = cap
    for f in order:
        if not parents[f]:
            t.extend(f, [(1.0, -1)])
            continue
        lists = [(t.of[g], share) for g, share in parents[f]]
        heap = [(-share * ps[0][0], j, 0) for j, (ps, share) in enumerate(lists)]
        heapq.heapify(heap)
        got = []
        while heap and len(got) < cap:
            w, j, k = heap[0]
            ps, share = lists[j]
            got.append((-w, ps[k][1]))
            if k + 1 < len(ps):
                heapq.heapreplace(heap, (-share * ps[k + 1][0], j, k + 1))
            else:
                heapq.heappop(heap)
        t.pruned = t.pruned or bool(heap)
        tot = sum(w for w, _ in got)
        t.extend(f, [(w / tot, up) for w, up in got] if tot > 0 else [(1.0 / len(got), up) for _, up in got])
    return t


def rebuild(stats: dict) -> tuple[list, Paths]:
    """The function keys, and their paths.

    Work and memory stay in proportion to the call graph (see ``budgets``): each function keeps at
    most ``min(MAX_PATHS, paths budget / functions)`` paths; when their frames exceed the frames
    budget, fewer paths per function (down to ``MIN_PER_FUNCTION``), and if that is not enough, the
    paths are cut at the root side to the depth that fits."""
    keys = list(stats)
    parents, order = _acyclic_parents(keys, stats)
    path_budget, frame_budget = budgets(stats)
    cap = max(MIN_PER_FUNCTION, min(MAX_PATHS, path_budget // max(1, len(keys))))
    t = _paths(len(keys), parents, order, cap)
    frames = sum(t.depth)
    if frames > frame_budget and cap > MIN_PER_FUNCTION:   # deep paths: keep fewer, not shorter
        t = _paths(len(keys), parents, order, max(MIN_PER_FUNCTION, cap * frame_budget // frames))
        frames = sum(t.depth)
    if frames > frame_budget:   # the deepest cut D with sum(min(depth, D)) within budget
        depths = t.depth
        lo, hi = 2, max(depths)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if sum(min(d, mid) for d in depths) <= frame_budget:
                lo = mid
            else:
                hi = mid - 1
        t.max_depth = lo
    return keys, t


def _frame_args(key) -> tuple:
    file, line, name = key
    if file == "~":  # built-in functions: cProfile files them under "~", line 0
        return name, "", None, "native"
    return name, file, line, "python"


def from_stats(stats: dict, metric: str = "wall", thread: str = "pstats", raw: Raw | None = None,
               source: str = "<input>", thread_attrs: dict | None = None) -> Profile:
    if metric not in ("wall", "cpu"):
        raise ValueError(f"metric must be 'wall' or 'cpu', got {metric!r}")
    keys, t = rebuild(stats)
    b = StackBuilder()
    fids = [b.frame(*_frame_args(k)) for k in keys]
    cut = b.frame(CUT, None, None, "other") if t.max_depth else None
    b.thread(thread, **(thread_attrs or {}))
    stacks: list[tuple] = []     # each node's stack of frame ids, root first
    for i, (up, f, d) in enumerate(zip(t.parent, t.func, t.depth)):
        if not t.max_depth or d <= t.max_depth:
            stacks.append((stacks[up] if up >= 0 else ()) + (fids[f],))
        else:   # keep the leafmost max_depth - 1 frames under the CUT frame
            tail = []
            while len(tail) < t.max_depth - 1:
                tail.append(fids[t.func[i]])
                i = t.parent[i]
            stacks.append((cut, *reversed(tail)))
    for i, k in enumerate(keys):
        _, nc, tt, _, _ = stats[k]
        left = float(tt)
        last = len(t.of[i]) - 1
        for j, (share, node) in enumerate(t.of[i]):
            w = left if j == last else float(tt) * share
            left -= w
            b.add(b.stack(thread, stacks[node]), samples=0, **{metric: w, "calls": float(nc) * share})
    other = "cpu" if metric == "wall" else "wall"
    approx = APPROXIMATE
    if t.pruned:
        approx += f"; only the {t.per_function} heaviest paths per function are kept"
    if t.max_depth:
        approx += f"; paths deeper than {t.max_depth} frames are cut: their callers above are one frame {CUT!r}"
    meta = {"format": NAME, "source": source, "method": "deterministic (every call and return)",
            "approximate": approx, "functions": len(keys),
            "calls": int(sum(v[1] for v in stats.values())),
            "total_tottime": float(sum(v[2] for v in stats.values()))}
    return b.build(metric=metric, meta=meta, raw=raw, unknown_metrics=(other,))


def read(data: bytes, source: str = "<input>", metric: str = "wall", thread: str = "pstats",
         thread_attrs: dict | None = None) -> Profile:
    """``metric``: what the profiler's timer measured (pstats does not say): wall or cpu.
    ``thread`` and ``thread_attrs`` (tid, name...) describe the thread that was profiled."""
    stats = load(data, source)
    opts = {"metric": metric, "thread": thread, "thread_attrs": dict(thread_attrs or {})}
    return from_stats(stats, metric=metric, thread=thread, source=source, thread_attrs=thread_attrs,
                      raw=Raw(bytes(data), NAME, filename="profile.pstats", options=opts))


def table(data) -> pd.DataFrame:
    """The exact flat table: one row per function, heaviest cumtime first.

    ``data``: pstats bytes, a stats dict, or a Profile read from pstats (its raw bytes are used).
    """
    if isinstance(data, Profile):
        if data.raw is None or data.raw.format != NAME:
            raise ValueError("this profile was not read from pstats data; the flat table needs the pstats bytes")
        stats = load(data.raw.read(), data.meta.get("source", "<profile>"))
    elif isinstance(data, dict):
        stats = data
    else:
        stats = load(data)
    callees: dict[tuple, list[str]] = {k: [] for k in stats}
    for f, val in stats.items():
        for g in val[4]:
            callees[g].append(_label(f))
    rows = []
    for k, (cc, nc, tt, ct, callers) in stats.items():
        name, file, line, _ = _frame_args(k)
        rows.append({
            "name": name, "file": file, "line": line,
            "ncalls": int(nc), "primitive_calls": int(cc),
            "tottime": float(tt), "tottime_per_call": float(tt) / nc if nc else np.nan,
            "cumtime": float(ct), "cumtime_per_call": float(ct) / cc if cc else np.nan,
            "callers": [_label(g) for g in callers], "callees": callees[k],
        })
    df = pd.DataFrame(rows)
    df["line"] = pd.array(df["line"].tolist(), dtype="Int64")
    return df.sort_values(["cumtime", "tottime"], ascending=False, kind="stable").reset_index(drop=True)

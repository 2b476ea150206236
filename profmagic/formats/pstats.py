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
   of the function's cumtime (by call count where cumtimes are all zero). At most
   ``MAX_PATHS`` paths are kept per function, heaviest first, renormalised.
3. Each function's tottime is split over its paths by those shares; the last path takes the
   remainder, so the rebuilt total equals the sum of tottime.

``table()`` gives the exact flat table (the primary view of this format). marshal is not
meant for untrusted input: read only files you would load with pstats.
"""
from __future__ import annotations

import marshal
import math

import numpy as np
import pandas as pd

from ..errors import ProfileFormatError
from ..model import Profile, Raw, StackBuilder

NAME = "pstats"
MAX_PATHS = 256
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


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _label(key) -> str:
    file, line, name = key
    return name if file == "~" else f"{name} ({file}:{line})"


def load(data: bytes, source: str = "<input>") -> dict:
    """The validated stats dict."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"pstats data must be bytes, not {type(data).__name__}")
    data = bytes(data)
    if not data or data[0] not in (0x7B, 0xFB):
        raise ProfileFormatError("expected a marshalled dict (first byte '{'), as pstats.Stats.dump_stats "
                                 f"writes; got {data[:8]!r}", source=source, offset=0)
    try:
        stats = marshal.loads(data)
    except EOFError:
        raise ProfileFormatError("the marshal data ends early; expected a complete pstats dict",
                                 source=source, offset=len(data)) from None
    except (ValueError, TypeError) as e:
        raise ProfileFormatError(f"not valid marshal data ({e}); expected a pstats dict",
                                 source=source, where="marshal stream") from None
    if not isinstance(stats, dict):
        raise ProfileFormatError(f"expected a dict, got {type(stats).__name__}", source=source, offset=0)
    if not stats:
        raise ProfileFormatError("the stats dict holds no functions; expected at least one entry",
                                 source=source, offset=0)
    for i, (key, val) in enumerate(stats.items()):
        where = f"entry {i} {key!r}"
        if not (isinstance(key, tuple) and len(key) == 3 and isinstance(key[0], str)
                and isinstance(key[1], int) and isinstance(key[2], str)):
            raise ProfileFormatError("expected a key (file: str, line: int, function: str)",
                                     source=source, where=f"entry {i}")
        if not (isinstance(val, tuple) and len(val) == 5 and all(_num(v) for v in val[:4])
                and isinstance(val[4], dict)):
            raise ProfileFormatError("expected (primitive calls, calls, tottime, cumtime, callers: dict)",
                                     source=source, where=where)
        for ck, cv in val[4].items():
            if ck not in stats:
                raise ProfileFormatError(f"caller {ck!r} has no entry of its own; expected every caller "
                                         "to be a key of the dict", source=source, where=where)
            if not (_num(cv) or (isinstance(cv, tuple) and len(cv) == 4 and all(_num(v) for v in cv))):
                raise ProfileFormatError(f"caller {ck!r}: expected (calls, primitive calls, tottime, cumtime) "
                                         "or a call count", source=source, where=where)
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


def rebuild(stats: dict) -> tuple[list, list[dict[tuple, float]], bool]:
    """(keys, per function {path of key indices: share}, whether paths were pruned)."""
    keys = list(stats)
    parents, order = _acyclic_parents(keys, stats)
    paths: list[dict[tuple, float]] = [{} for _ in keys]
    pruned = False
    for f in order:
        if not parents[f]:
            paths[f] = {(f,): 1.0}
            continue
        acc: dict[tuple, float] = {}
        for g, share in parents[f]:
            for p, w in paths[g].items():
                q = p + (f,)
                acc[q] = acc.get(q, 0.0) + w * share
        if len(acc) > MAX_PATHS:
            pruned = True
            acc = dict(sorted(acc.items(), key=lambda kv: -kv[1])[:MAX_PATHS])
        tot = sum(acc.values())
        paths[f] = {p: w / tot for p, w in acc.items()} if tot > 0 else {p: 1.0 / len(acc) for p in acc}
    return keys, paths, pruned


def _frame_args(key) -> tuple:
    file, line, name = key
    if file == "~":  # built-in functions: cProfile files them under "~", line 0
        return name, "", None, "native"
    return name, file, line, "python"


def from_stats(stats: dict, metric: str = "wall", thread: str = "pstats", raw: Raw | None = None,
               source: str = "<input>", thread_attrs: dict | None = None) -> Profile:
    if metric not in ("wall", "cpu"):
        raise ValueError(f"metric must be 'wall' or 'cpu', got {metric!r}")
    keys, paths, pruned = rebuild(stats)
    b = StackBuilder()
    fids = [b.frame(*_frame_args(k)) for k in keys]
    b.thread(thread, **(thread_attrs or {}))
    for i, k in enumerate(keys):
        _, nc, tt, _, _ = stats[k]
        items = list(paths[i].items())
        left = float(tt)
        for j, (path, share) in enumerate(items):
            w = left if j == len(items) - 1 else float(tt) * share
            left -= w
            sid = b.stack(thread, [fids[x] for x in path])
            b.add(sid, samples=0, **{metric: w, "calls": float(nc) * share})
    other = "cpu" if metric == "wall" else "wall"
    approx = APPROXIMATE + (f"; only the {MAX_PATHS} heaviest paths per function are kept" if pruned else "")
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

"""Joining time with memory: a time recording and a memory recording (memray's, or profmagic's sampled
tracker's) of the same run in one Profile."""
from __future__ import annotations

from typing import Iterable

import numpy as np
import pandas as pd

from ..model import MEMORY_METRICS, Profile, make_frames, thread_table
from .merge import _key_frames, _thread_attrs
from .ops import keep_threads


# -- time beside memory ------------------------------------------------------------------------------
MEMORY_SLOWS = ("wall and CPU time were measured while memray recorded: its profile function slows "
                "pure-Python code (Python 3.11 runs unspecialised bytecode while one is set) and each "
                "allocation it sees costs time (bench/RESULTS.md, memray: cost per option)")
MEMORY_EXACT_SLOWS = ("wall and CPU time were measured while memray traced every allocation and every Python "
                      "object (--memory-exact), which slows allocation-heavy code several times over "
                      "(bench/RESULTS.md, memray: cost per option)")

MEMORY_SAMPLED_SLOWS = ("wall and CPU time were measured while profmagic's sampled tracker counted allocations "
                        "(no profile function; bench/RESULTS.md, Sampled allocation tracker)")


def align_names(mem_p: Profile, time_p: Profile) -> Profile:
    """memray names a Python function by its code's name (``run``; comprehensions qualified by their
    caller, formats/memray.py); time backends by that name (py-spy) or the qualified one (the sampler:
    ``Worker.run``). Give memray's frames the time profile's name for the same function: same file,
    one name a dotted suffix of the other, and of several (``A.run``, ``B.run``), the one that starts
    last at or before memray's line (time backends that qualify names give each function's first line)."""
    by_file: dict[str, list[tuple[str, int]]] = {}
    tf = time_p.frames
    for name, file, line in zip(tf["name"], tf["file"], tf["line"]):
        if file:
            by_file.setdefault(file, []).append((str(name), -1 if pd.isna(line) else int(line)))
    names = []
    for name, file, line in zip(mem_p.frames["name"], mem_p.frames["file"], mem_p.frames["line"]):
        cands = {n: ln for n, ln in sorted(by_file.get(file, []), key=lambda x: x[1])
                 if n == name or n.endswith("." + name) or name.endswith("." + n)}
        if len(cands) > 1 and not pd.isna(line):
            before = [n for n, ln in cands.items() if ln <= int(line)]
            cands = {max(before, key=cands.get): 0} if before else cands
        names.append(next(iter(cands)) if len(cands) == 1 else name)
    return mem_p.replace(frames=mem_p.frames.assign(name=pd.Series(names, dtype=object, index=mem_p.frames.index)))


def _tids(p: Profile) -> list:
    return [None if t is pd.NA else int(t) for t in p.thread_table["tid"]]


def time_and_memory(time_p: Profile, mem_p: Profile, drop_tids: Iterable = (),
                    time_started: float | None = None) -> Profile:
    """One Profile from a time recording and a memray recording of the same run: per (thread, stack)
    the time side's samples, wall and CPU beside the memory side's bytes, allocated and allocations.

    Threads are one where both saw the same native id (the time side's label is kept); threads whose
    native id is in ``drop_tids`` (the recorders' own helpers) leave. memray's frames get the time
    side's function names (``align_names``), so ``functions(m)`` lines up across metrics. A metric is
    0 on rows only the other recording has (they carry none of it), so every total is its recording's
    own; a metric its recording did not measure stays NaN everywhere. Time-ordered samples are the time
    side's. ``time_started`` (unix s): when the time recorder started, to put memray's timeline on its clock.
    """
    drop = set()
    for t in drop_tids:
        try:
            drop.add(int(t))
        except (TypeError, ValueError):
            continue
    if drop:
        time_p, mem_p = (keep_threads(p, [lab for lab, tid in zip(p.threads, _tids(p)) if tid not in drop])
                         for p in (time_p, mem_p))
    mem_p = align_names(mem_p, time_p)
    frame_ids: dict[tuple, int] = {}
    table: list[dict] = []
    by_tid: dict[int, int] = {}
    by_label: dict[str, int] = {}
    keys: dict[tuple, int] = {}
    row_of: list[np.ndarray] = []
    for p in (time_p, mem_p):
        fmap = {f: frame_ids.setdefault(k, len(frame_ids)) for f, k in _key_frames(p).items()}
        ids = []
        for attrs, tid in zip(_thread_attrs(p), _tids(p)):
            j = by_tid.get(tid) if tid is not None else by_label.get(attrs["label"])
            if j is None:
                j = len(table)
                if attrs["label"] in by_label:   # the same label for another thread: keep both apart
                    attrs = {**attrs, "label": f"{attrs['label']} (memray)"}
                table.append(attrs)
                by_label[attrs["label"]] = j
                if tid is not None:
                    by_tid[tid] = j
            ids.append(j)
        th = np.asarray(ids, dtype=np.int64)[p.thread_ids()] if len(p.stacks) else np.zeros(0, np.int64)
        row_of.append(np.fromiter((keys.setdefault((int(t), tuple(fmap[f] for f in s)), len(keys))
                                   for t, s in zip(th, p.stacks["stack"])), dtype=np.int64, count=len(th)))
    n = len(keys)
    cols: dict = {"thread": np.fromiter((k[0] for k in keys), dtype=np.int64, count=n),
                  "stack": pd.Series([k[1] for k in keys], dtype=object)}
    skip = ("thread", "stack", "process", "rank")
    owners = [(time_p, row_of[0], [c for c in time_p.stacks if c not in skip and c not in MEMORY_METRICS]),
              (mem_p, row_of[1], [c for c in MEMORY_METRICS if c in mem_p.stacks])]
    for p, rows, names in owners:
        for c in names:
            vals = p.stacks[c].to_numpy()
            if vals.dtype.kind not in "fiu":   # another column (eu-stack's on_cpu): the first value wins
                out = [None] * n
                for r, v in zip(rows, vals):
                    out[r] = v if out[r] is None else out[r]
                cols[c] = pd.Series(out, dtype=object)
                continue
            v = vals.astype(np.float64)
            if c in p.meta.unknown or (len(v) and np.isnan(v).all()):
                cols[c] = np.full(n, np.nan)   # not measured by its recording: unknown on every row
                continue
            acc = np.zeros(n)
            np.add.at(acc, rows, v)
            cols[c] = acc.astype(np.int64) if vals.dtype.kind in "iu" else acc
    if "samples" not in cols:
        cols["samples"] = np.zeros(n, dtype=np.int64)
    frames = make_frames(*zip(*frame_ids)) if frame_ids else make_frames([], [], [], [])
    samples = time_p.samples
    if samples is not None:
        samples = samples.assign(stack=row_of[0][samples["stack"].to_numpy(dtype=np.int64)])
    m = mem_p.meta
    tl = m.get("memory_timeline")
    if tl and time_started and tl.get("t0_unix"):  # memray's clock against the time recorder's start (to a few ms)
        tl = {**tl, "starts_after_time_recorder": tl["t0_unix"] - float(time_started)}
    meta = time_p.meta.replace(
        memray=m.get("memray"), memray_mode=m.get("memray_mode"), memory_timeline=tl, cost=m.get("cost"),
        memory={k: v for k, v in m.items() if k not in ("memory_timeline", "processes", "unknown")},
        unknown={**dict(time_p.meta.unknown), **dict(m.unknown)},
        metric_labels={**dict(time_p.meta.get("metric_labels") or {}), **dict(m.get("metric_labels") or {})},
        approximate="; ".join(x for x in (time_p.meta.get("approximate"), m.get("approximate"),
                                          MEMORY_EXACT_SLOWS if m.get("python_allocators") else
                                          MEMORY_SAMPLED_SLOWS if m.get("backend") == "memsample" else MEMORY_SLOWS) if x))
    return Profile(frames, pd.DataFrame(cols), samples, meta, None, time_p.metric, threads=thread_table(table))

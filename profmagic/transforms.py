"""Pure functions Profile -> Profile: choose threads, trim to the cell, calibrate, combine
recordings, focus, prune, rename; and the processors a recording runs through (``Cell``).

None of them mutates its input; each returns a new Profile whose meta records what was done.
"""
from __future__ import annotations

import itertools
import math
import os
import re
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

import numpy as np
import pandas as pd

from .awaits import AWAIT
from .model import (KINDS, MEMORY_METRICS, TIME_METRICS, Profile, StackBuilder, make_frames, thread_table,
                    unique_labels)
from .threads import thread_label


# -- rows ---------------------------------------------------------------------------------------
def regroup(profile: Profile, thread: np.ndarray, stack: list, keep: np.ndarray, note: Mapping,
            threads: pd.DataFrame | None = None) -> Profile:
    """Rows with new (thread id, stack) keys, merged where two old rows now coincide. ``keep`` marks
    the old rows that stay; ``threads`` replaces the thread table (``thread`` ids refer to it)."""
    old = profile.stacks
    key_to_new: dict = {}
    row_map = np.full(len(old), -1, dtype=np.int64)
    for i in np.flatnonzero(keep):
        row_map[i] = key_to_new.setdefault((int(thread[i]), stack[i]), len(key_to_new))
    n = len(key_to_new)
    keys = list(key_to_new)
    cols = {"thread": np.asarray([k[0] for k in keys], dtype=np.int64),
            "stack": pd.Series([k[1] for k in keys], dtype=object)}
    sel = row_map >= 0
    for c in old.columns:
        if c in ("thread", "stack", "process", "rank"):
            continue
        vals = old[c].to_numpy()
        if vals.dtype.kind in "fiu":
            v = vals[sel].astype(np.float64)
            agg = np.bincount(row_map[sel], weights=np.nan_to_num(v), minlength=n)
            has = np.bincount(row_map[sel], weights=~np.isnan(v), minlength=n) > 0
            out = np.where(has, agg, np.nan)
            cols[c] = out.astype(np.int64) if vals.dtype.kind in "iu" else out
        else:  # extra object columns: the first value wins
            first: dict = {}
            for i in np.flatnonzero(sel):
                first.setdefault(row_map[i], vals[i])
            cols[c] = pd.Series([first.get(j) for j in range(n)], dtype=object)
    samples = profile.samples
    if samples is not None:
        new_ids = row_map[samples["stack"].to_numpy()]
        samples = samples[new_ids >= 0].assign(stack=new_ids[new_ids >= 0]).reset_index(drop=True)
    return profile.replace(stacks=pd.DataFrame(cols), samples=samples,
                           threads=profile.thread_table if threads is None else threads,
                           meta=profile.meta.replace(**note))


def _thread_rows(profile: Profile, labels: Iterable[str] | None) -> np.ndarray:
    """A bool per stack row: is its thread one of ``labels`` (all when None)."""
    if labels is None:
        return np.ones(len(profile.stacks), dtype=bool)
    want = set(labels)
    ids = [i for i, lab in enumerate(profile.threads) if lab in want]
    return np.isin(profile.thread_ids(), ids)


def _by_label(profile: Profile, label: str) -> int | None:
    try:
        return profile.threads.index(label)
    except ValueError:
        return None


# -- threads ------------------------------------------------------------------------------------
def keep_threads(profile: Profile, keep: Iterable[str] | Callable[[str], bool]) -> Profile:
    """Only the threads named in ``keep`` (or for which ``keep(label)`` is true)."""
    pred = keep if callable(keep) else set(keep).__contains__
    wanted = np.fromiter((bool(pred(t)) for t in profile.threads), dtype=bool, count=len(profile.threads))
    dropped = [t for t, w in zip(profile.threads, wanted) if not w]
    table = profile.thread_table[wanted].reset_index(drop=True)
    remap = np.full(len(wanted), -1, dtype=np.int64)
    remap[wanted] = np.arange(int(wanted.sum()))
    rows = wanted[profile.thread_ids()] if len(profile.stacks) else np.zeros(0, dtype=bool)
    sub = profile.subset(rows)
    stacks = sub.stacks.assign(thread=remap[sub.thread_ids()])
    meta = profile.meta.replace(dropped_threads=list(profile.meta.get("dropped_threads", [])) + dropped)
    return sub.replace(stacks=stacks, threads=table, meta=meta)


def cell_threads(profile: Profile, cell_tid: int, before: Iterable[int]) -> list[str]:
    """Thread labels that belong to the cell: the thread that ran it and every thread whose native id
    was not alive before it started (so threads the cell started, even those already finished).
    A thread without a native id cannot be told apart and is kept."""
    before = set(before) - {cell_tid}
    out = []
    for lab, tid in zip(profile.thread_table["label"], profile.thread_table["tid"]):
        if tid is pd.NA or int(tid) == cell_tid or int(tid) not in before:
            out.append(lab)
    return out


def drop_kernel_threads(profile: Profile, cell_tid: int, before: Iterable[int]) -> Profile:
    return keep_threads(profile, cell_threads(profile, cell_tid, before))


def relabel_threads(profile: Profile, names: Mapping[str, str]) -> Profile:
    """Rename threads (old label -> new label); threads whose labels become equal merge (the first
    one's other attributes are kept)."""
    names = {a: b for a, b in names.items() if a != b}
    if not names:
        return profile
    table = profile.thread_table
    new_labels = [names.get(lab, lab) for lab in table["label"]]
    first: dict[str, int] = {}
    remap = np.empty(len(new_labels), dtype=np.int64)
    rows = []
    for i, lab in enumerate(new_labels):
        j = first.get(lab)
        if j is None:
            j = first[lab] = len(rows)
            row = table.iloc[i].to_dict()
            row["label"] = lab
            rows.append(row)
        remap[i] = j
    new_table = thread_table(rows)
    old = profile.stacks
    cell = profile.meta.get("cell_thread")
    note = {"cell_thread": names.get(cell, cell)} if cell else {}
    return regroup(profile, remap[profile.thread_ids()], list(old["stack"]), np.ones(len(old), dtype=bool),
                   note, threads=new_table)


def name_threads(profile: Profile, names: Mapping[int, str]) -> Profile:
    """Threads whose native id is in ``names`` (tid -> current name) get that name and the label
    ``Thread <tid> "<name>"``: profilers that cache names by pthread id can show a stale one."""
    fix = {}
    for lab, tid in zip(profile.thread_table["label"], profile.thread_table["tid"]):
        if tid is not pd.NA and int(tid) in names:
            fix[lab] = thread_label(int(tid), names[int(tid)])
    out = relabel_threads(profile, fix)
    t = out.thread_table.copy()
    for i, tid in enumerate(t["tid"]):
        if tid is not pd.NA and int(tid) in names:
            t.at[i, "name"] = names[int(tid)]
    return out.replace(threads=t)


def drop_idle_threads(profile: Profile, metric: str | None = None) -> Profile:
    """Drop threads whose every sample carries no weight in ``metric`` (default: cpu when known)."""
    if metric is None:
        metric = "cpu" if "cpu" in profile.metrics else profile.metric
    w = profile.weights(metric).fillna(0).to_numpy()
    busy = set(np.unique(profile.thread_ids()[w > 0]).tolist())
    return keep_threads(profile, [lab for i, lab in enumerate(profile.threads) if i in busy])


def group_processes(profile: Profile, label: Callable[[int], str]) -> Profile:
    """Give every thread whose pid is known the process ``label(pid)`` (py-spy ``-s`` records the
    pid of each thread); ``meta["processes"]`` gets each pid."""
    t = profile.thread_table.copy()
    procs = dict(profile.meta.processes)
    for i, pid in enumerate(t["pid"]):
        if pid is not pd.NA and t.at[i, "process"] is None:
            lab = label(int(pid))
            t.at[i, "process"] = lab
            procs.setdefault(lab, {"pid": int(pid)})
    t["label"] = unique_labels(t["label"].tolist(), t["process"].tolist())
    return profile.replace(threads=t, meta=profile.meta.replace(processes=procs))


# -- the cell ------------------------------------------------------------------------------------
# Where the interpreter starts a module-level code object (exec, eval, import, the main script): one
# such native frame per ``<module>`` Python frame.
EXEC_ENTRY = "PyEval_EvalCode"
# A native stack that reaches one of these is whole (unwound to the thread's start).
_THREAD_ROOTS = re.compile(r"^(_start|__libc_start_main\S*|__libc_start_call_main|main|Py_BytesMain|Py_RunMain"
                           r"|start_thread|__clone3?|clone3?|thread_run|pythread_wrapper)$")


def trim_native_to_cell(profile: Profile, thread: str, entries_above: int) -> Profile:
    """Cut the native stacks of ``thread`` (the cell's) at the cell: the cell runs as module code
    through the interpreter's ``PyEval_EvalCode``, and ``entries_above`` of those frames lie above
    it (the kernel's, IPython's: one per ``<module>`` Python frame where the cell was started). So
    the cell begins at the frame after the (``entries_above`` + 1)-th ``PyEval_EvalCode`` from the
    root; what is above it folds away. For stacks that name no Python file (perf without CPython's
    perf support, eu-stack's ``[python]``), where ``trim_to_cell`` has nothing to cut at.

    A whole stack (unwound to the thread's start) with fewer such frames was sampled outside the
    cell (the magic around it) and is dropped; a truncated one is kept as it is. Other threads are
    kept whole. Nothing changes when no stack of ``thread`` reaches the cell (unwinding that never
    gets to ``PyEval_EvalCode``), and ``meta["trim_note"]`` says so."""
    fr = profile.frames
    entry = set(fr.index[(fr["name"] == EXEC_ENTRY).to_numpy()].tolist())
    roots = set(fr.index[fr["name"].astype(str).str.match(_THREAD_ROOTS).to_numpy()].tolist())
    mine = _thread_rows(profile, [thread])
    old = profile.stacks
    new_stacks, keep, cut_any = [], np.ones(len(old), dtype=bool), False
    for i, s in enumerate(old["stack"]):
        if not mine[i]:
            new_stacks.append(s)
            continue
        seen, cut = 0, None
        for j, f in enumerate(s):
            if f in entry:
                seen += 1
                if seen == entries_above + 1:
                    cut = j + 1
                    break
        if cut is not None and cut < len(s):
            new_stacks.append(tuple(s[cut:]))
            cut_any = True
        else:
            new_stacks.append(s)
            keep[i] = not any(f in roots for f in s)
    if not cut_any:
        return profile.with_meta(trim_note=f"native stacks not trimmed: no stack of {thread} reaches the cell's "
                                           f"{EXEC_ENTRY}")
    dropped = int(old["samples"].to_numpy()[~keep].sum())
    return regroup(profile, profile.thread_ids(), new_stacks, keep,
                   {"trimmed_native_to_cell": thread, "samples_outside_cell": dropped})


def trim_to_cell(profile: Profile, cell_filename: str, threads: Iterable[str] | None = None) -> Profile:
    """Cut every stack above its first frame from ``cell_filename`` (IPython's and the kernel's own
    frames). In ``threads`` (default: all), stacks with no cell frame are dropped: they were
    sampled outside the cell (the magic itself). Stacks of other threads are kept whole."""
    fr = profile.frames
    in_cell = set(fr.index[(fr["file"] == cell_filename).to_numpy()].tolist())
    # With no cell frame at all there is nothing to cut against when the profiler cannot name Python
    # files (perf, eu-stack) or traced no call in the cell (cProfile). A sampler that names Python
    # files and saw no cell frame sampled only the magic around the cell: drop those samples.
    names_files = bool(((fr["kind"] == "python") & (fr["file"] != "")).any())
    traced = "calls" in profile.stacks
    drop_outside = bool(in_cell) or (names_files and not traced)
    strict = _thread_rows(profile, threads) if drop_outside else np.zeros(len(profile.stacks), dtype=bool)
    old = profile.stacks
    new_stacks, keep = [], np.ones(len(old), dtype=bool)
    for i, s in enumerate(old["stack"]):
        cut = next((j for j, f in enumerate(s) if f in in_cell), None)
        if cut is None:
            new_stacks.append(s)
            keep[i] = not strict[i]
        else:
            new_stacks.append(tuple(s[cut:]))
    dropped = int(old["samples"].to_numpy()[~keep].sum()) if len(old) else 0
    return regroup(profile, profile.thread_ids(), new_stacks, keep,
                   {"trimmed_to": cell_filename, "samples_outside_cell": dropped})


# -- seconds that add up ---------------------------------------------------------------------------
def calibrate(profile: Profile, thread: str, seconds: float, metric: str | None = None) -> Profile:
    """Reweight every sample by 1/effective rate, where the effective rate is ``thread``'s sample
    count divided by the measured ``seconds`` it ran. Raw counts stay in ``samples``.

    For samplers whose weights are 1/requested rate (py-spy): afterwards ``thread`` sums to ``seconds``.
    Under 5 samples the estimate means nothing: the profile is left as it was, marked uncalibrated.
    """
    metric = metric or profile.metric
    st = profile.stacks
    mine = _thread_rows(profile, [thread])
    n = int(st.loc[mine, "samples"].sum()) if len(st) else 0
    if n < 5 or not seconds or seconds <= 0 or metric not in TIME_METRICS:
        return profile.with_meta(calibrated=False)
    eff = n / seconds
    per = 1.0 / eff
    st = st.assign(**{metric: st["samples"].to_numpy(dtype=np.float64) * per})
    samples = profile.samples
    if samples is not None and len(samples):
        old_total = float(profile.weights(metric).sum())
        k = (float(st[metric].sum()) / old_total) if old_total else 1.0
        samples = samples.assign(time=samples["time"].to_numpy(dtype=np.float64) * k)
        if metric in samples:
            samples = samples.assign(**{metric: per})
    meta = profile.meta.replace(calibrated=True, calibrated_against=thread, calibration_seconds=float(seconds),
                                rate=eff, calibrated_rate=eff,
                                requested_rate=profile.meta.requested_rate or profile.meta.rate)
    return profile.replace(stacks=st, samples=samples, meta=meta)


def split_cpu_at_stack_changes(profile: Profile) -> Profile:
    """A sample's CPU delta covers the whole interval since the thread's previous sample; given all
    to the stack seen at its end, the tail of a busy function lands on the sleep after it. Where the
    stack changed, split the delta between the previous and the current stack, assuming each kept
    its CPU rate: rate_i = u*rate_prev + (1-u)*rate_next gives u, the share still in the previous
    stack, each rate its neighbouring interval's. On bench/groundtruth.py the split took the CPU
    error from 2.6 points to at most 1 (bench/RESULTS.md); the rate of a run of up to 8 intervals
    did worse there (3 runs each, worst wall 5.8-6.0 pp and CPU 2.3-3.3 pp, against 2.7-3.5 and 1-2).
    The interval's wall time is split at the same point. Then no sample keeps more CPU than its wall
    time (the excess moves to the next sample).
    Per-sample ``cpu`` and the stacks' ``cpu`` totals are both updated; each thread's sum is kept
    but for a last excess, which is dropped. For the in-process samplers' recordings (the built-in
    sampler, child processes)."""
    sm = profile.samples
    if sm is None or not len(sm) or "cpu" not in sm or "wall" not in sm:
        return profile
    orig = sm["cpu"].to_numpy(np.float64)
    new = orig.copy()
    wall = sm["wall"].to_numpy(np.float64)
    new_wall = wall.copy()
    stack = sm["stack"].to_numpy()
    c0 = np.nan_to_num(orig)
    rate = np.clip(np.divide(c0, wall, out=np.zeros_like(c0), where=wall > 0), 0.0, 1.0)
    for idx in sm.groupby("thread", sort=False).indices.values():  # each thread's rows, in time order
        for k in range(1, len(idx) - 1):
            i, j, n = idx[k], idx[k - 1], idx[k + 1]
            if stack[i] == stack[j] or math.isnan(orig[i]) or math.isnan(new[j]):
                continue
            rp, rn = rate[j], rate[n]
            u = 0.5 if abs(rp - rn) < 1e-9 else min(max((rate[i] - rn) / (rp - rn), 0.0), 1.0)
            # The previous stack's part of the CPU: u*rp of u*rp + (1-u)*rn. Inside [0, 1] that is
            # u*rp*wall; clipped (a neighbour's rate was under-measured) it stays consistent with u.
            den = u * rp + (1 - u) * rn
            prev = orig[i] * (u * rp / den if den > 0 else u)
            new[j] += prev
            new[i] -= prev
            # The same boundary splits the interval's wall time: u of it was still the previous stack.
            new_wall[j] += u * wall[i]
            new_wall[i] -= u * wall[i]
        # A CPU clock read a moment after the pass can exceed the pass's wall time: carry the excess
        # to the next sample, so no stack has cpu > wall and cpu + off-CPU = wall holds per thread.
        carry = 0.0
        for i in idx:
            if math.isnan(new[i]):
                continue
            c = new[i] + carry
            new[i], carry = (new_wall[i], c - new_wall[i]) if c > new_wall[i] else (c, 0.0)
    moved = np.nan_to_num(new - orig)
    moved_wall = new_wall - wall
    if not moved.any() and not moved_wall.any():
        return profile
    stacks = profile.stacks.copy()
    for col, delta in (("cpu", moved), ("wall", moved_wall)):
        stacks[col] = stacks[col].to_numpy(np.float64) + np.bincount(stack, weights=delta, minlength=len(stacks))
    return profile.replace(stacks=stacks, samples=sm.assign(cpu=new, wall=new_wall))


# -- two recordings of one run -----------------------------------------------------------------------
def _key_frames(p: Profile) -> dict:
    fr = p.frames
    return {fid: (n, f, None if pd.isna(l) else int(l), str(k))
            for fid, n, f, l, k in zip(fr.index, fr["name"], fr["file"], fr["line"], fr["kind"])}


def _thread_attrs(p: Profile) -> list[dict]:
    return [{k: (None if v is pd.NA else v) for k, v in row.items()} for row in p.thread_table.to_dict("records")]


def _per_sample_seconds(p: Profile) -> dict[str, float]:
    """Seconds one sample stands for, per thread: its wall (or cpu) weight over its sample count."""
    col = "wall" if "wall" in p.metrics else ("cpu" if "cpu" in p.metrics else None)
    rate = float(p.meta.get("rate") or 100.0)
    out = {}
    for th, g in p.stacks.groupby("thread", sort=False, observed=True):
        n = float(g["samples"].sum())
        w = float(g[col].sum()) if col else n / rate
        out[th] = w / n if n else 1.0 / rate
    return out


def combine_idle(wall: Profile, cpu: Profile, cpu_weights: bool | None = None) -> Profile:
    """One Profile with ``wall``, ``cpu`` (and so ``off_cpu``) per stack, from a recording of every
    sample (``wall``: py-spy ``--idle``) and one of on-CPU samples only (``cpu``) of the same run.

    A cpu recording calibrated to the cell's measured CPU time (``meta["calibrated"]``) keeps its
    weights; otherwise both count samples at the same rate, so its samples are weighted by the wall
    recording's seconds per sample of the same thread. A stack seen only by the cpu recording is
    kept with wall = cpu. ``cpu_weights=True`` keeps the cpu profile's own weights (merge_runs).
    """
    sps = _per_sample_seconds(wall)
    rate = float(wall.meta.get("rate") or 100.0)
    b = StackBuilder()
    for p in (wall, cpu):
        for row in _thread_attrs(p):
            b.thread(row.pop("label"), **row)
    acc: dict[tuple, list[float]] = {}
    wall_col = "wall" if "wall" in wall.metrics else None
    if cpu_weights is None:
        cpu_weights = bool(cpu.meta.get("calibrated"))
    cpu_col = "cpu" if cpu_weights and "cpu" in cpu.metrics else None
    for which, p in ((0, wall), (1, cpu)):
        frames = _key_frames(p)
        col = wall_col if which == 0 else cpu_col
        ws = p.stacks[col].to_numpy(float) if col else None
        for i, (th, st, n) in enumerate(zip(p.stacks["thread"], p.stacks["stack"], p.stacks["samples"])):
            v = acc.setdefault((th, tuple(frames[f] for f in st)), [0.0, 0.0, 0.0, False])
            if which == 0:   # wall s, cpu s, wall samples, seen in wall
                v[0] += ws[i] if ws is not None else n * sps.get(th, 1.0 / rate)
                v[2] += n
                v[3] = True
            else:
                v[1] += ws[i] if ws is not None else n * sps.get(th, 1.0 / rate)
    cpu_only = 0.0
    for (th, frames), (w, c, n, seen) in acc.items():
        if not seen:  # the wall recording missed this stack: it ran, so its wall is at least its cpu
            cpu_only += c
            w = c
        sid = b.stack(th, [b.frame(*f) for f in frames])
        b.add(sid, samples=n if seen else max(1, int(round(c / sps.get(th, 1.0 / rate)))), wall=w, cpu=c)
    meta = wall.meta.replace(
        mode="both", cpu_only_seconds=cpu_only, cpu_samples=int(cpu.stacks["samples"].sum()),
        cpu_method=("two py-spy recordings at once, --idle (wall) and without (cpu)"
                    + ("; cpu calibrated to the cell's CPU time" if cpu_col else
                       "; cpu = non-idle samples x the --idle recording's seconds per sample")),
        approximate="py-spy's idle detection decides on/off-CPU")
    return b.build(metric="wall", meta=meta, raw=wall.raw)


def merge_runs(wall: Profile, cpu: Profile) -> Profile:
    """``--mode both --rerun`` for one-clock backends: wall from the first run, cpu from the second,
    matched by (thread, stack). A stack seen only in the cpu run keeps wall = cpu."""
    p = combine_idle(wall, cpu, cpu_weights=True)
    meta = wall.meta.replace(
        mode="both", runs=2, cell_cpu=cpu.meta.get("cell_cpu"), message=None,
        cpu_run={k: cpu.meta.get(k) for k in ("cell_wall", "cell_cpu", "sample_count", "timer")},
        cpu_method="two runs of the code: wall time from the first run, CPU time from the second, matched by stack",
        approximate="wall and CPU time come from two separate runs of the code (--rerun)",
        cpu_only_seconds=p.meta.get("cpu_only_seconds"),
        calls_note="call counts are in each run's own profile; the merged one keeps samples"
        if "calls" in wall.stacks else None)
    return p.replace(meta=meta)


def merge_thread_sources(primary: Profile, secondary: Profile, offset: float = 0.0) -> Profile:
    """Every thread of ``primary``, and the threads of ``secondary`` whose native id ``primary`` does
    not have (py-spy's Python threads, eu-stack's pure native ones). ``offset`` moves ``primary``'s
    sample times onto ``secondary``'s clock. A metric one side lacks is NaN on its rows."""
    taken = {int(t) for t in primary.thread_table["tid"] if t is not pd.NA}
    b = StackBuilder()
    sources = {}
    for p, tool, off, keep in ((primary, primary.meta.get("backend"), offset, lambda tid: True),
                               (secondary, secondary.meta.get("backend"), 0.0,
                                lambda tid: tid is pd.NA or int(tid) not in taken)):
        frames = _key_frames(p)
        tids = p.thread_table["tid"].to_numpy(dtype=object)
        attrs = _thread_attrs(p)
        ids = p.thread_ids()
        rowmap, fmap = {}, {}
        cols = [c for c in ("wall", "cpu") if c in p.stacks]
        for row, stack in enumerate(p.stacks["stack"]):
            if not keep(tids[ids[row]]):
                continue
            a = dict(attrs[ids[row]])
            a["backend"] = a.get("backend") or tool
            th = b.thread(a.pop("label"), **a)
            sources[b.threads[th]] = a["backend"]
            fids = [fmap.setdefault(f, b.frame(*frames[f])) for f in stack]
            extra = {"on_cpu": p.stacks.at[row, "on_cpu"]} if "on_cpu" in p.stacks else {}
            rowmap[row] = b.stack(th, fids, **extra)
        if p.samples is not None and len(p.samples):
            s = p.samples
            for i in range(len(s)):
                row = int(s["stack"].iat[i])
                if row in rowmap:
                    w = {c: float(s[c].iat[i]) if c in s else np.nan for c in cols}
                    w.update({c: np.nan for c in ("wall", "cpu") if c not in w})
                    b.add(rowmap[row], samples=1, time=float(s["time"].iat[i]) + off, **w)
        else:
            for row, sid in rowmap.items():
                w = {c: float(p.stacks.at[row, c]) if c in p.stacks else np.nan for c in ("wall", "cpu")}
                b.add(sid, samples=int(p.stacks.at[row, "samples"]), **w)
    meta = secondary.meta.replace(thread_sources=sources)
    return b.build(metric="wall", meta=meta)


# -- time beside memory ------------------------------------------------------------------------------
MEMORY_SLOWS = ("wall and CPU time were measured while memray traced every allocation, which slows "
                "allocation-heavy code (bench/RESULTS.md, memray)")


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
        approximate="; ".join(x for x in (time_p.meta.get("approximate"), m.get("approximate"), MEMORY_SLOWS) if x))
    return Profile(frames, pd.DataFrame(cols), samples, meta, None, time_p.metric, threads=thread_table(table))


# -- narrowing --------------------------------------------------------------------------------------
def focus(profile: Profile, function: str) -> Profile:
    """Only the stacks through ``function`` (a frame name), each cut to start at its first call."""
    fr = profile.frames
    ids = set(fr.index[(fr["name"] == function).to_numpy()].tolist())
    if not ids:
        raise KeyError(f"no frame named {function!r} in this profile")
    old = profile.stacks
    new_stacks, keep = [], np.zeros(len(old), dtype=bool)
    for i, s in enumerate(old["stack"]):
        cut = next((j for j, f in enumerate(s) if f in ids), None)
        new_stacks.append(tuple(s[cut:]) if cut is not None else s)
        keep[i] = cut is not None
    return regroup(profile, profile.thread_ids(), new_stacks, keep, {"focus": function})


def prune(profile: Profile, min_share: float = 0.005, metric: str | None = None) -> Profile:
    """Cut frames whose subtree (per thread, by path) carries less than ``min_share`` of the total;
    their weight goes to their parent, so totals are unchanged."""
    metric = metric or profile.metric
    w = profile.weights(metric).fillna(0).to_numpy(dtype=np.float64)
    total = w.sum()
    if total <= 0:
        return profile
    ids = profile.thread_ids()
    path_w: dict = {}
    for t, s, x in zip(ids, profile.stacks["stack"], w):
        for j in range(1, len(s) + 1):
            k = (t, s[:j])
            path_w[k] = path_w.get(k, 0.0) + x
    new_stacks = []
    for t, s in zip(ids, profile.stacks["stack"]):
        j = len(s)
        while j > 1 and path_w[(t, s[:j])] < min_share * total:
            j -= 1
        new_stacks.append(tuple(s[:j]))
    return regroup(profile, ids, new_stacks, np.ones(len(profile.stacks), dtype=bool), {"pruned_below": min_share})


# -- display names ------------------------------------------------------------------------------------
def rename_files(profile: Profile, names: Mapping[str, str]) -> Profile:
    """Replace file names (e.g. the kernel's cell temp files by ``In[N]``); frames keep their ids."""
    if not names:
        return profile
    fr = profile.frames.assign(file=[names.get(f, f) for f in profile.frames["file"]])
    return profile.replace(frames=fr, meta=profile.meta.replace(
        renamed_files={**profile.meta.get("renamed_files", {}), **dict(names)}))


def cell_names(filename_map: Mapping[str, int]) -> dict[str, str]:
    """IPython's compile cache filename -> execution count, as display names ``In[N]``."""
    return {f: f"In[{n}]" for f, n in filename_map.items()}


# -- the processors of a recording ---------------------------------------------------------------------
@dataclass
class Cell:
    """What the processors know about the code that was recorded."""
    tid: int                                  # native id of the thread that ran it
    thread_name: str
    filename: str | None = None               # the file it was compiled under (trim to it)
    before: frozenset = frozenset()           # native ids of threads that are not the user's
    keep_all_threads: bool = False
    live_names: Mapping[int, str] = field(default_factory=dict)   # tid -> current thread name
    file_names: Mapping[str, str] = field(default_factory=dict)   # cell file -> "In[N]"
    mode: str = "wall"
    unmeasured: Mapping[str, str] = field(default_factory=dict)   # clock -> why the backend cannot
    awaits: tuple = ()                        # awaits.Wait of a top-level-await cell
    own: frozenset = frozenset()              # native ids of profmagic's own threads (threads.OWN)
    entries_above: int = 0                    # PyEval_EvalCode frames above the cell (exec_entries_above)
    sees_awaits: bool = False                 # the backend samples awaiting coroutines itself
    wall: float = 0.0                         # measured around the code: seconds of wall time,
    cpu: float = 0.0                          # of the thread's CPU time,
    run_delay: float | None = None            # and of waiting for a core (None: unknown)
    hidden: tuple = ()                        # folders of profmagic's start-up hooks in a command (record)


def cell_thread(p: Profile, cell: Cell) -> str:
    """The label of the cell's thread in ``p`` (by native id), or the label it would have."""
    for lab, tid in zip(p.thread_table["label"], p.thread_table["tid"]):
        if tid is not pd.NA and int(tid) == cell.tid:
            return lab
    return thread_label(cell.tid, cell.thread_name)


def only_users_threads(p: Profile, cell: Cell) -> Profile:
    return p if cell.keep_all_threads else drop_kernel_threads(p, cell.tid, cell.before)


def live_thread_names(p: Profile, cell: Cell) -> Profile:
    return name_threads(p, {**cell.live_names, cell.tid: cell.thread_name})


def attribute_awaits(p: Profile, cell: Cell) -> Profile:
    """A top-level-await cell: the cell thread's samples outside the cell (its event loop idle in
    ``select`` while the cell's coroutines await) go to the coroutine chains that were awaiting, in
    proportion to each wait's measured duration, ending in an ``[await]`` frame. Time-ordered
    samples are dropped then (their stacks changed); the meta says so."""
    if not cell.awaits or cell.sees_awaits or not cell.filename:
        return p
    th = _by_label(p, cell_thread(p, cell))
    if th is None or not len(p.stacks):
        return p
    fr = p.frames
    in_cell = set(fr.index[(fr["file"] == cell.filename).to_numpy()].tolist())
    st = p.stacks
    idle = (p.thread_ids() == th) & np.fromiter((not any(f in in_cell for f in s) for s in st["stack"]),
                                                dtype=bool, count=len(st))
    metric = "wall" if "wall" in st and st["wall"].notna().any() else "samples"
    have = float(st.loc[idle, metric].sum())
    waited = sum(w.end - w.start for w in cell.awaits)
    if have <= 0 or waited <= 0:
        return p
    per_second = have / max(waited, have) if metric == "wall" else have / waited
    keys = {(n, f, None if pd.isna(ln) else int(ln), str(k)): i
            for i, n, f, ln, k in zip(fr.index, fr["name"], fr["file"], fr["line"], fr["kind"])}
    new_frames: list[tuple] = []

    def fid(key):
        if key not in keys:
            keys[key] = int(fr.index.max()) + 1 + len(new_frames) if len(fr) else len(new_frames)
            new_frames.append(key)
        return keys[key]

    given: dict[tuple, float] = {}
    for w in cell.awaits:
        stack = tuple(fid((n, f, ln, "python")) for n, f, ln in w.chain) + (fid((AWAIT, "", None, "other")),)
        given[stack] = given.get(stack, 0.0) + (w.end - w.start) * per_second
    total_given = sum(given.values())
    keep = 1.0 - total_given / have
    rows = []
    numeric = [c for c in st.columns if c not in ("thread", "stack", "process", "rank")
               and st[c].dtype.kind in "fiu"]
    for stack, amount in given.items():
        share = amount / have
        row = {"thread": th, "stack": stack}
        for c in numeric:
            row[c] = float(st.loc[idle, c].sum()) * share
        rows.append(row)
    scaled = st.drop(columns=[c for c in ("process", "rank") if c in st]).assign(thread=p.thread_ids())
    for c in numeric:
        scaled[c] = np.where(idle, st[c].to_numpy(dtype=np.float64) * keep, st[c].to_numpy(dtype=np.float64))
    out = pd.concat([scaled, pd.DataFrame(rows)], ignore_index=True)
    if "samples" in out:
        out["samples"] = np.round(out["samples"].to_numpy(dtype=np.float64)).astype(np.int64)
    frames = p.frames
    if new_frames:
        add = make_frames(*zip(*new_frames))
        add.index = pd.RangeIndex(len(fr) and int(fr.index.max()) + 1, (len(fr) and int(fr.index.max()) + 1)
                                  + len(new_frames), name="frame")
        frames = pd.concat([fr, add])
        frames["kind"] = pd.Categorical(frames["kind"].astype(object), categories=KINDS)
    note = {"awaits": f"{len(cell.awaits)} awaits, {waited:.3f} s: the event loop's idle time was given to the "
                      "awaiting coroutines in proportion to their measured waits"}
    if p.samples is not None:
        note["time_order_dropped"] = "await time was re-attributed by measured duration, not per sample"
    return p.replace(frames=frames, stacks=out, samples=None, meta=p.meta.replace(**note))


# profmagic's own code (not its case study): frames of it below the user's code are the profiler's.
_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
_OWN_EXEMPT = (os.path.join(_PACKAGE, "casestudy") + os.sep,)


_IMPORTS = ("<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>")


def hide_profmagic(p: Profile, cell: Cell) -> Profile:
    """profmagic's own threads leave, and its frames below the user's code (a recording inside a
    recording, or ``session.run(fn)`` calling back into the user's ``fn``) fold into their caller.

    A command's start-up hook (``cell.hidden``: record's sitecustomize, the children's) is trimmed
    with the import frames that ran it: a sample of the hook alone (waiting for the recorder, putting
    the command's path back) is profmagic's, not the command's, and is dropped; one that reaches the
    process's own sitecustomize keeps it, under the frame that imported the hook."""
    own = {lab for lab, tid in zip(p.threads, p.thread_table["tid"]) if tid is not pd.NA and int(tid) in cell.own}
    if own:
        p = keep_threads(p, [t for t in p.threads if t not in own])
    files = p.frames["file"].astype(str)
    hooks = tuple(cell.hidden)
    hook = set(p.frames.index[[bool(hooks) and f.startswith(hooks) for f in files]].tolist())
    ours = hook | set(p.frames.index[[f.startswith(_PACKAGE) and not f.startswith(_OWN_EXEMPT)
                                      for f in files]].tolist())
    if not ours:
        return p
    imports = set(p.frames.index[files.isin(_IMPORTS).to_numpy()].tolist()) if hook else set()
    new, changed = [], False
    keep = np.ones(len(p.stacks), dtype=bool)
    for i, orig in enumerate(p.stacks["stack"]):
        s = orig
        h = next((j for j, f in enumerate(s) if f in hook), None) if hook else None
        if h is not None:
            above = next((j for j in range(h + 1, len(s)) if s[j] not in ours and s[j] not in imports), None)
            if above is None:
                keep[i] = False
                new.append(s)
                continue
            below = h
            while below > 0 and s[below - 1] in imports:
                below -= 1
            s = s[:below] + s[above:]
        kept = s[:1] + tuple(f for f in s[1:] if f not in ours) if s and s[0] not in ours else s
        new.append(kept)
        changed |= kept != orig
    if not changed and keep.all():
        return p
    note = {"profmagic_frames": "folded into their caller"}
    if not keep.all():
        note["hook_samples_dropped"] = int(p.stacks["samples"].to_numpy()[~keep].sum())
    p = regroup(p, p.thread_ids(), new, keep, note)
    return _without_frames(p, ours | imports) if hook else p


def _without_frames(p: Profile, drop: set) -> Profile:
    """``p`` without those frames of ``drop`` that no stack uses any more (a command's profile names
    no file of its start-up hook); frame ids renumbered 0..n-1."""
    used = set(itertools.chain.from_iterable(p.stacks["stack"]))
    gone = {f for f in drop if f not in used}
    if not gone:
        return p
    fr = p.frames
    kept = [f for f in fr.index.tolist() if f not in gone]
    new_id = {f: i for i, f in enumerate(kept)}
    frames = fr.loc[kept].reset_index(drop=True)
    frames.index.name = "frame"
    stacks = p.stacks.assign(stack=pd.Series([tuple(new_id[f] for f in s) for s in p.stacks["stack"]],
                                             dtype=object, index=p.stacks.index))
    return p.replace(frames=frames, stacks=stacks)


def native_to_cell(p: Profile, cell: Cell) -> Profile:
    """Stacks that name no frame of the cell's file (native stacks of perf or eu-stack): cut the cell's
    thread at its ``PyEval_EvalCode`` (``trim_native_to_cell``)."""
    if not cell.filename or (p.frames["file"] == cell.filename).any():
        return p
    return trim_native_to_cell(p, cell_thread(p, cell), cell.entries_above)


def to_cell(p: Profile, cell: Cell) -> Profile:
    if not cell.filename:
        return p
    return trim_to_cell(p, cell.filename, threads=[cell_thread(p, cell)])


def clocks(p: Profile, cell: Cell) -> Profile:
    """Under ``--mode both``, a wall and a cpu column: NaN (and said why) for a clock the backend
    does not measure, never zero."""
    if cell.mode != "both":
        return p
    st = p.stacks
    unknown = dict(p.meta.unknown)
    for m in TIME_METRICS:
        if m in cell.unmeasured:
            if m not in st or st[m].notna().any():
                if m == p.metric and (set(TIME_METRICS) - {m}) - set(st):
                    st = st.assign(**{(set(TIME_METRICS) - {m}).pop(): st[m]})
                st = st.assign(**{m: np.nan})
            unknown[m] = cell.unmeasured[m]
        elif m not in st:
            st = st.assign(**{m: np.nan})
    metric = p.metric if p.metric not in cell.unmeasured else next(
        (m for m in TIME_METRICS if m not in cell.unmeasured), "samples")
    return p.replace(stacks=st, metric=metric, meta=p.meta.replace(mode="both", unknown=unknown))


def named_files(p: Profile, cell: Cell) -> Profile:
    return rename_files(p, cell.file_names)


# The processors every recording runs, in order (session.py adds the backend's own after `clocks`).
PROCESSORS: tuple[Callable[[Profile, Cell], Profile], ...] = (only_users_threads, live_thread_names,
                                                                  attribute_awaits, native_to_cell, to_cell,
                                                                  hide_profmagic, clocks)
FINAL: tuple[Callable[[Profile, Cell], Profile], ...] = (named_files,)
# The ones that need a cell run in this process (its thread, its file, its awaits, the kernel's threads):
# a recording of other processes or of a command (session.PidsTarget, CommandTarget) runs the others.
CELL_ONLY = frozenset({only_users_threads, live_thread_names, attribute_awaits, native_to_cell, to_cell})

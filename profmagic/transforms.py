"""Pure functions Profile -> Profile: trim to the cell, choose threads, calibrate, focus, prune, rename.

None of them mutates its input; each returns a new Profile whose meta records what was done.
"""
from __future__ import annotations

import re
from typing import Callable, Iterable, Mapping

import numpy as np
import pandas as pd

from .threads import thread_native_id
from .profile import TIME_METRICS, Profile


def _time_columns(profile: Profile) -> list[str]:
    return [m for m in TIME_METRICS if m in profile.stacks]


def _with_stacks(profile: Profile, stacks: pd.DataFrame, meta_update: dict | None = None,
                 keep_rows: np.ndarray | None = None, row_map: np.ndarray | None = None) -> Profile:
    """A profile over new stack rows. ``keep_rows`` (bool per old row) or ``row_map`` (new row per old
    row, -1 = dropped) carries the time-ordered samples along."""
    samples = profile.samples
    if samples is not None:
        if row_map is None:
            old_keep = keep_rows if keep_rows is not None else np.ones(len(profile.stacks), dtype=bool)
            row_map = np.full(len(old_keep), -1, dtype=np.int64)
            row_map[old_keep] = np.arange(int(old_keep.sum()))
        new_ids = row_map[samples["stack"].to_numpy()]
        samples = samples[new_ids >= 0].copy()
        samples["stack"] = new_ids[new_ids >= 0]
        samples["thread"] = stacks["thread"].to_numpy()[samples["stack"].to_numpy()] if len(samples) else \
            samples["thread"]
        samples = samples.reset_index(drop=True)
    meta = dict(profile.meta)
    present = set(stacks["thread"])
    meta["threads"] = [t for t in profile.threads if t in present]
    meta.update(meta_update or {})
    return profile.replace(stacks=stacks.reset_index(drop=True), samples=samples, meta=meta)


def _process_columns(profile: Profile) -> list[str]:
    """Columns that say which process a row came from: ``process`` and a concat key (``rank``)."""
    key = (profile.meta.get("concat") or {}).get("key")
    return ["process"] + ([key] if key and key != "process" else [])


def _regroup(profile: Profile, thread: np.ndarray, stack: list, keep: np.ndarray, note: dict) -> Profile:
    """Rows with new (thread, stack) keys, merged where two old rows now coincide."""
    old = profile.stacks
    # Rows of different processes never merge, even when their thread labels and stacks coincide.
    who = [c for c in _process_columns(profile) if c in old]
    tags = list(zip(*(old[c].to_numpy() for c in who))) if who else None
    key_to_new: dict = {}
    row_map = np.full(len(old), -1, dtype=np.int64)
    for i in np.flatnonzero(keep):
        k = (thread[i], stack[i], tags[i]) if who else (thread[i], stack[i])
        row_map[i] = key_to_new.setdefault(k, len(key_to_new))
    n = len(key_to_new)
    keys = list(key_to_new)
    cols = {"thread": pd.Series([k[0] for k in keys], dtype=object),
            "stack": pd.Series([k[1] for k in keys], dtype=object)}
    for j, c in enumerate(who):
        cols[c] = pd.Series([k[2][j] for k in keys], dtype=object)
    sel = row_map >= 0
    for c in old.columns:
        if c in ("thread", "stack") or c in who:
            continue
        vals = old[c].to_numpy()
        if vals.dtype.kind in "fiu":
            v = vals[sel].astype(np.float64)
            known = ~np.isnan(v)
            agg = np.bincount(row_map[sel], weights=np.nan_to_num(v), minlength=n)
            has = np.bincount(row_map[sel], weights=known, minlength=n) > 0
            out = np.where(has, agg, np.nan)
            if vals.dtype.kind in "iu":
                out = out.astype(np.int64)
            cols[c] = out
        else:  # extra object columns: the first value wins
            first = {}
            for i in np.flatnonzero(sel):
                first.setdefault(row_map[i], vals[i])
            cols[c] = pd.Series([first.get(j) for j in range(n)], dtype=object)
    return _with_stacks(profile, pd.DataFrame(cols), note, row_map=row_map)


# -- the cell --------------------------------------------------------------------------------
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
    strict = set(profile.threads if threads is None else threads) if drop_outside else set()
    old = profile.stacks
    new_stacks, keep = [], np.ones(len(old), dtype=bool)
    for i, (t, s) in enumerate(zip(old["thread"], old["stack"])):
        cut = next((j for j, f in enumerate(s) if f in in_cell), None)
        if cut is None:
            new_stacks.append(s)
            keep[i] = t not in strict
        else:
            new_stacks.append(tuple(s[cut:]))
    dropped = int(old["samples"].to_numpy()[~keep].sum()) if len(old) else 0
    return _regroup(profile, old["thread"].to_numpy(), new_stacks, keep,
                    {"trimmed_to": cell_filename, "samples_outside_cell": dropped})


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
    old = profile.stacks
    new_stacks, keep, cut_any = [], np.ones(len(old), dtype=bool), False
    for i, (t, s) in enumerate(zip(old["thread"], old["stack"])):
        if t != thread:
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
        return profile.replace(meta={**profile.meta, "trim_note": (
            f"native stacks not trimmed: no stack of {thread} reaches the cell's {EXEC_ENTRY}")})
    dropped = int(old["samples"].to_numpy()[~keep].sum())
    return _regroup(profile, old["thread"].to_numpy(), new_stacks, keep,
                    {"trimmed_native_to_cell": thread, "samples_outside_cell": dropped})


def keep_threads(profile: Profile, keep: Iterable[str] | Callable[[str], bool]) -> Profile:
    """Only the threads named in ``keep`` (or for which ``keep(label)`` is true)."""
    pred = keep if callable(keep) else set(keep).__contains__
    mask = np.fromiter((bool(pred(t)) for t in profile.stacks["thread"]), dtype=bool, count=len(profile.stacks))
    dropped = sorted(set(profile.stacks["thread"][~mask]))
    meta = {"dropped_threads": list(profile.meta.get("dropped_threads", [])) + dropped}
    return _with_stacks(profile, profile.stacks[mask], meta, keep_rows=mask)


def cell_threads(profile: Profile, cell_native_id: int, before: Iterable[int]) -> list[str]:
    """Thread labels that belong to the cell: the thread that ran it and every thread whose native id
    was not alive before it started (so threads the cell started, even those already finished).
    A label without a native id cannot be told apart and is kept."""
    before = set(before) - {cell_native_id}
    out = []
    for t in profile.threads:
        tid = thread_native_id(t)
        if tid is None or tid == cell_native_id or tid not in before:
            out.append(t)
    return out


def drop_kernel_threads(profile: Profile, cell_native_id: int, before: Iterable[int]) -> Profile:
    return keep_threads(profile, cell_threads(profile, cell_native_id, before))


def relabel_threads(profile: Profile, names: Mapping[str, str]) -> Profile:
    """Rename threads (old label -> new label); labels that become equal merge."""
    names = {a: b for a, b in names.items() if a != b}
    if not names:
        return profile
    old = profile.stacks
    thread = np.asarray([names.get(t, t) for t in old["thread"]], dtype=object)
    out = _regroup(profile, thread, list(old["stack"]), np.ones(len(old), dtype=bool), {})
    meta = dict(out.meta)
    meta["threads"] = list(dict.fromkeys(names.get(t, t) for t in profile.threads))
    for key in ("cell_thread",):
        if key in meta:
            meta[key] = names.get(meta[key], meta[key])
    return out.replace(meta=meta)


def drop_idle_threads(profile: Profile, metric: str | None = None) -> Profile:
    """Drop threads whose every sample carries no weight in ``metric`` (default: cpu when known)."""
    if metric is None:
        metric = "cpu" if "cpu" in profile.metrics else profile.metric
    w = profile.weights(metric).fillna(0)
    busy = set(profile.stacks["thread"][(w > 0).to_numpy()])
    return keep_threads(profile, busy)


_PROCESS_THREAD = re.compile(r"^Process (\d+) (Thread .*)$")


def split_processes(profile: Profile, label: Callable[[int], str] = lambda pid: f"pid {pid}") -> Profile:
    """py-spy ``--subprocesses`` names threads ``Process <pid> Thread <tid> "<name>"``: move the
    process into the ``process`` column (``label(pid)``) and keep ``Thread <tid> "<name>"``."""
    old = profile.stacks
    names, procs, pids = {}, {}, {}
    for t in profile.threads:
        m = _PROCESS_THREAD.match(str(t))
        if m:
            names[t], pids[t] = m.group(2), int(m.group(1))
            procs[t] = label(pids[t])
    if not names:
        return profile
    st = old.copy()
    prev = st["process"] if "process" in st else pd.Series([None] * len(st), dtype=object)
    st["process"] = pd.Series([procs.get(t, p) for t, p in zip(st["thread"], prev)], dtype=object)
    st["thread"] = pd.Series([names.get(t, t) for t in st["thread"]], dtype=object)
    samples = profile.samples
    if samples is not None and len(samples):
        samples = samples.assign(thread=st["thread"].to_numpy()[samples["stack"].to_numpy()])
    meta = dict(profile.meta)
    meta["threads"] = list(dict.fromkeys(names.get(t, t) for t in profile.threads))
    procinfo = dict(meta.get("processes") or {})
    for t, pid in pids.items():
        procinfo.setdefault(procs[t], {"pid": pid})
    meta["processes"] = procinfo
    return profile.replace(stacks=st, samples=samples, meta=meta)


# -- seconds that add up ---------------------------------------------------------------------
def calibrate(profile: Profile, thread: str, seconds: float, metric: str | None = None) -> Profile:
    """Reweight every sample by 1/effective rate, where the effective rate is ``thread``'s sample
    count divided by the measured ``seconds`` it ran. Raw counts stay in ``samples``.

    For samplers whose weights are 1/requested rate (py-spy): afterwards ``thread`` sums to ``seconds``.
    Under 5 samples the estimate means nothing: the profile is left as it was, marked uncalibrated.
    """
    metric = metric or profile.metric
    st = profile.stacks
    n = int(st.loc[st["thread"] == thread, "samples"].sum()) if len(st) else 0
    if n < 5 or not seconds or seconds <= 0 or metric not in TIME_METRICS:
        return profile.replace(meta={**profile.meta, "calibrated": False})
    eff = n / seconds
    per = 1.0 / eff
    st = st.copy()
    st[metric] = st["samples"].to_numpy(dtype=np.float64) * per
    samples = profile.samples
    if samples is not None and len(samples):
        samples = samples.copy()
        old_total = float(profile.weights(metric).sum())
        k = (float(st[metric].sum()) / old_total) if old_total else 1.0
        if metric in samples:
            samples[metric] = per
        samples["time"] = samples["time"].to_numpy(dtype=np.float64) * k
    meta = dict(profile.meta)
    meta.update(calibrated=True, calibrated_against=thread, calibration_seconds=float(seconds),
                rate=eff, calibrated_rate=eff)
    meta.setdefault("requested_rate", profile.meta.get("rate"))
    return profile.replace(stacks=st, samples=samples, meta=meta)


# -- narrowing --------------------------------------------------------------------------------
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
    return _regroup(profile, old["thread"].to_numpy(), new_stacks, keep, {"focus": function})


def prune(profile: Profile, min_share: float = 0.005, metric: str | None = None) -> Profile:
    """Cut frames whose subtree (per thread, by path) carries less than ``min_share`` of the total;
    their weight goes to their parent, so totals are unchanged."""
    metric = metric or profile.metric
    w = profile.weights(metric).fillna(0).to_numpy(dtype=np.float64)
    total = w.sum()
    if total <= 0:
        return profile
    path_w: dict = {}
    for t, s, x in zip(profile.stacks["thread"], profile.stacks["stack"], w):
        for j in range(1, len(s) + 1):
            k = (t, s[:j])
            path_w[k] = path_w.get(k, 0.0) + x
    new_stacks = []
    for t, s in zip(profile.stacks["thread"], profile.stacks["stack"]):
        j = len(s)
        while j > 1 and path_w[(t, s[:j])] < min_share * total:
            j -= 1
        new_stacks.append(tuple(s[:j]))
    keep = np.ones(len(profile.stacks), dtype=bool)
    return _regroup(profile, profile.stacks["thread"].to_numpy(), new_stacks, keep, {"pruned_below": min_share})


# -- display names -----------------------------------------------------------------------------
def rename_files(profile: Profile, names: Mapping[str, str]) -> Profile:
    """Replace file names (e.g. the kernel's cell temp files by ``In[N]``); frames keep their ids."""
    if not names:
        return profile
    fr = profile.frames.copy()
    fr["file"] = [names.get(f, f) for f in fr["file"]]
    meta = dict(profile.meta)
    meta["renamed_files"] = {**meta.get("renamed_files", {}), **dict(names)}
    return profile.replace(frames=fr, meta=meta)


def cell_names(filename_map: Mapping[str, int]) -> dict[str, str]:
    """IPython's compile cache filename -> execution count, as display names ``In[N]``."""
    return {f: f"In[{n}]" for f, n in filename_map.items()}


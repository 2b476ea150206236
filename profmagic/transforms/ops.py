"""Pure functions Profile -> Profile on any recording: regroup rows, choose, rename and merge threads,
calibrate, focus, prune, rename files. The bottom of the package: it imports no other module of it.

None of them mutates its input; each returns a new Profile whose meta records what was done.
"""
from __future__ import annotations

from typing import Callable, Iterable, Mapping

import numpy as np
import pandas as pd

from ..model import TIME_METRICS, Profile, thread_table, unique_labels
from ..threads import thread_label


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
    meta = profile.meta.replace(calibrated=True, rate=eff,
                                requested_rate=profile.meta.requested_rate or profile.meta.rate)
    return profile.replace(stacks=st, samples=samples, meta=meta)

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

"""What the timeline formats (Chrome trace, gecko) share: who each thread is, its samples as runs, and
the meta our writers carry in their files.

A *track* is one (process, thread) pair of a Profile. ``tracks()`` names each with a pid, tid, thread
name and process name; ``runs()`` lays each track's samples out in time as *runs*: consecutive samples
with the same stack, merged, each lasting the sum of its samples' weights.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ._common import EXT, carried_meta


@dataclass(frozen=True)
class Track:
    process: str | None   # the stacks' process label, None in single-process profiles
    thread: str           # the Profile's thread label
    pid: int
    tid: int
    name: str             # thread name for viewers
    process_name: str


def tracks(profile) -> list[Track]:
    """Every thread with stacks, in the thread table's order, named from the table: its pid (else
    the process's or the profile's), tid (else a made-up one), thread name and process name."""
    table = profile.thread_table
    present = set(np.unique(profile.thread_ids()).tolist())
    procs = profile.meta.get("processes") or {}
    out, used = [], set()
    for i, row in enumerate(table.itertuples()):
        if i not in present:
            continue
        proc = row.process if isinstance(row.process, str) else None
        pid = row.pid if row.pid is not pd.NA else (procs.get(proc) or {}).get("pid") if proc else None
        if pid is None or pid is pd.NA:
            pid = profile.meta.get("pid")
        try:
            pid = int(pid)
        except (TypeError, ValueError):
            pid = 1  # nothing says which process: one made-up pid for all
        tid = int(row.tid) if row.tid is not pd.NA else i + 1
        while (pid, tid) in used:   # two threads claiming one id: keep them apart
            tid += 1_000_000
        used.add((pid, tid))
        name = row.name if isinstance(row.name, str) and row.name else str(row.label)
        pname = proc or str(profile.meta.get("name") or profile.meta.get("backend") or profile.meta.get("format")
                            or "process")
        out.append(Track(proc, str(row.label), pid, tid, name, pname))
    return out


def carry_meta(meta: dict, carried, fmt: str, source: str, where: str = f"{EXT}.meta") -> None:
    """Fold into ``meta`` the meta a writer of ours carried in the file (format and source stay this
    read's), each field checked for its type (``_common.carried_meta``)."""
    carried = carried_meta(carried, source, where)
    if not carried:
        return
    if carried.get("format") not in (None, fmt):
        carried["converted_from"] = carried["format"]
    meta.update(carried)
    meta.update(format=fmt, source=source)


def axis_metric(profile) -> str:
    """The metric that lays samples out in time: wall, else cpu, else samples."""
    for m in ("wall", "cpu"):
        if m in profile.metrics:
            return m
    return "samples"


@dataclass
class Runs:
    """One track's runs: start (s), duration (s in the axis metric), stack row, sample count, cpu (s or NaN)."""
    start: np.ndarray
    dur: np.ndarray
    row: np.ndarray
    samples: np.ndarray
    cpu: np.ndarray
    ordered: bool  # False: aggregated stacks laid end to end, the time axis is not the recording's


def runs(profile, track: Track, axis: str, unit: float) -> Runs:
    """``track``'s samples in time order, consecutive equal stacks merged.

    Each sample lasts its weight in ``axis`` (``unit`` seconds per sample when axis is "samples") and
    starts at its time or where the previous one ended, whichever is later: durations are kept exactly,
    start times may be pushed late where weights overlap. Profiles without time-ordered samples lay
    their stacks end to end in row order (``ordered`` False)."""
    st = profile.stacks
    mine = (st["thread"] == track.thread).to_numpy()
    sm = profile.samples
    ordered = sm is not None and len(sm) > 0
    if ordered:
        sm = sm[mine[sm["stack"].to_numpy()]]
        sm = sm.sort_values("time", kind="stable")
        row = sm["stack"].to_numpy(np.int64)
        t = sm["time"].to_numpy(np.float64)
        n = sm["samples"].to_numpy(np.float64) if "samples" in sm else np.ones(len(sm))
        w = _weights(sm, axis, n, unit)
        cpu = sm["cpu"].to_numpy(np.float64) if "cpu" in sm else np.full(len(sm), np.nan)
    else:
        row = np.flatnonzero(mine)
        n = st["samples"].to_numpy(np.float64)[row]
        w = _weights(st.iloc[row], axis, n, unit)
        cpu = st["cpu"].to_numpy(np.float64)[row] if "cpu" in st else np.full(len(row), np.nan)
        t = np.zeros(len(row))
    w = np.nan_to_num(np.maximum(w, 0.0))
    # Merge consecutive samples of one stack.
    if len(row):
        new = np.ones(len(row), bool)
        new[1:] = row[1:] != row[:-1]
        grp = np.cumsum(new) - 1
        first = np.flatnonzero(new)
        w_run = np.bincount(grp, weights=w)
        n_run = np.bincount(grp, weights=n)
        known = np.bincount(grp, weights=~np.isnan(cpu)) > 0
        cpu_run = np.where(known, np.bincount(grp, weights=np.nan_to_num(cpu)), np.nan)
        row, t = row[first], t[first]
    else:
        w_run = n_run = cpu_run = np.zeros(0)
    start = np.empty(len(row))
    end = -np.inf
    for i in range(len(row)):  # durations are kept; a start never falls before the previous end
        s = t[i] if ordered else 0.0
        start[i] = s if s > end else end
        end = start[i] + w_run[i]
    if not ordered and len(row):
        start -= start[0]
    return Runs(start, w_run, row, n_run, cpu_run, ordered)


def _weights(df, axis: str, n: np.ndarray, unit: float) -> np.ndarray:
    if axis == "samples" or axis not in df:
        return n * unit
    return df[axis].to_numpy(np.float64)

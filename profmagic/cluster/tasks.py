"""The data of the Ranks and Tasks views of a cluster Profile (cluster/assemble.py), and the
straggler. pandas only: no plotly, so the views can be drawn by any front end.

- ``ranks``: one row per rank (the driver and every worker), unreachable ones included;
- ``tasks``: wall, CPU and off-CPU per task prefix, summed over workers, or per worker;
- ``straggler``: the worker whose task time is furthest above the others', and the task that
  makes the difference;
- ``missing``: the ranks without samples (unreachable, or ended leaving nothing), with why.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..multi import PROCESS, by_process
from ..model import Profile
from .assemble import TASK

STATUS_TEXT = {"ok": "ran to the end", "ended": "ended during the recording",
               "unreachable": "could not be reached", "error": "could not record"}


def ranks(profile: Profile) -> pd.DataFrame:
    """One row per rank: role, status, samples, wall, cpu, off_cpu, tasks_wall (time in tasks),
    other_cpu (CPU of threads running no task, not in the stacks), error. Unreachable ranks
    have no samples and NaN times."""
    info = profile.meta.get("processes") or {}
    t = by_process(profile)
    st = profile.stacks
    in_task = st[TASK].notna() if TASK in st else pd.Series(False, index=st.index)
    task_wall = st.loc[in_task].groupby(PROCESS)["wall"].sum() if PROCESS in st else pd.Series(dtype=float)
    rows = []
    for label in list(info) + [p for p in t.index if p not in info]:
        i = info.get(label) or {}
        have = label in t.index
        rows.append({
            "rank": label, "role": i.get("role", "worker"), "status": i.get("status", "ok"),
            "samples": int(t.at[label, "samples"]) if have else 0,
            "wall": float(t.at[label, "wall"]) if have else np.nan,
            "cpu": float(t.at[label, "cpu"]) if have else np.nan,
            "off_cpu": float(t.at[label, "off_cpu"]) if have else np.nan,
            "tasks_wall": float(task_wall.get(label, 0.0)) if have else np.nan,
            "other_cpu": i.get("other_cpu", np.nan), "error": i.get("error")})
    out = pd.DataFrame(rows, columns=["rank", "role", "status", "samples", "wall", "cpu", "off_cpu",
                                      "tasks_wall", "other_cpu", "error"]).set_index("rank")
    out["status_text"] = [STATUS_TEXT.get(s, s) for s in out["status"]]
    return out


def missing(profile: Profile) -> dict[str, str]:
    """Ranks that ``meta["processes"]`` names but that have no samples and did not run to the end
    (a worker that could not be reached, or ended leaving no data): label -> what happened, with
    the engine's error. {} for a profile that is not a cluster's."""
    have = set(by_process(profile).index)
    out = {}
    for label, i in (profile.meta.get("processes") or {}).items():
        status = (i or {}).get("status", "ok")
        if label not in have and status != "ok":
            out[label] = STATUS_TEXT.get(status, status) + (f": {i['error']}" if i.get("error") else "")
    return out


def tasks(profile: Profile, by_worker: bool = False) -> pd.DataFrame:
    """Per task prefix (and per worker with ``by_worker``): samples, wall, cpu, off_cpu and
    wall_share (of all task wall time); ``keys``: distinct task keys seen (Dask). Heaviest first."""
    st = profile.stacks
    if TASK not in st:
        return pd.DataFrame(columns=["samples", "wall", "cpu", "off_cpu", "wall_share"])
    st = st[st[TASK].notna()]
    by = [TASK, PROCESS] if by_worker else [TASK]
    g = st.groupby(by, sort=False).agg(samples=("samples", "sum"), wall=("wall", "sum"), cpu=("cpu", "sum"))
    g["off_cpu"] = (g["wall"] - g["cpu"]).clip(lower=0)
    total = float(g["wall"].sum())
    g["wall_share"] = g["wall"] / total if total > 0 else np.nan
    info = profile.meta.get("processes") or {}
    if by_worker:
        g["keys"] = [((info.get(p) or {}).get("task_keys") or {}).get(t, np.nan) for t, p in g.index]
    else:
        keys = {}
        for i in info.values():
            for t, n in (i.get("task_keys") or {}).items():
                keys[t] = keys.get(t, 0) + n
        g["keys"] = [keys.get(t, np.nan) for t in g.index]
    return g.sort_values("wall", ascending=False, kind="stable")


def straggler(profile: Profile) -> dict:
    """The worker whose time in tasks is furthest above the median of the other workers', and the
    task prefix that accounts for most of the gap, with how much of that task was off-CPU there.
    ``text`` says it in one line; ``worker`` is None when fewer than two workers have samples."""
    r = ranks(profile)
    w = r[(r["role"] == "worker") & (r["samples"] > 0)]
    if len(w) < 2:
        return {"worker": None, "task": None, "text": f"{len(w)} worker(s) with samples: nothing to compare"}
    gaps = {p: float(w.at[p, "tasks_wall"]) - float(w["tasks_wall"].drop(p).median()) for p in w.index}
    worst = max(gaps, key=gaps.get)
    median = float(w["tasks_wall"].drop(worst).median())
    per = tasks(profile, by_worker=True)
    out = {"worker": worst, "tasks_wall": float(w.at[worst, "tasks_wall"]), "median_others": median,
           "task": None, "task_gap": None, "task_off_cpu_share": None}
    mine = per.xs(worst, level=PROCESS) if worst in per.index.get_level_values(PROCESS) else per.iloc[:0]
    if len(mine):
        others = [p for p in w.index if p != worst]
        table = per["wall"].unstack(PROCESS).reindex(columns=list(w.index)).fillna(0.0)
        excess = table[worst] - table[others].median(axis=1)
        task = str(excess.idxmax())
        row = mine.loc[task] if task in mine.index else None
        off = float(row["off_cpu"] / row["wall"]) if row is not None and row["wall"] > 0 else None
        out.update(task=task, task_gap=float(excess[task]), task_off_cpu_share=off)
    text = (f"{worst} is the straggler: {out['tasks_wall']:.2f} s of wall time in tasks vs a median "
            f"{median:.2f} s on the other workers")
    if out["task"] is not None:
        text += f"; task {out['task']} takes {out['task_gap']:.2f} s more there"
        if out["task_off_cpu_share"] is not None:
            kind = ("off-CPU: waiting (a lock, I/O, sleep)" if out["task_off_cpu_share"] >= 0.5
                    else "on CPU: computing")
            text += f", {out['task_off_cpu_share']:.0%} of that task's time {kind}"
    out["text"] = text
    return out


def sub_profile(profile: Profile, rank: str | None = None, task: str | None = None) -> Profile:
    """Only the rows of one rank and/or one task prefix (for its icicle); the time-ordered samples
    of those rows are kept, renumbered."""
    st = profile.stacks
    mask = np.ones(len(st), dtype=bool)
    if rank is not None:
        mask &= (st[PROCESS] == rank).to_numpy()
    if task is not None:
        mask &= (st[TASK] == task).to_numpy() if TASK in st else False
    return profile.subset(mask, drop_threads=True).with_meta(subset={"rank": rank, "task": task})

"""Merging recordings of one run: wall beside cpu (py-spy with and without --idle, two runs), and the
threads only a second recorder saw."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..model import Profile, StackBuilder


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
        mode="both", cpu_only_seconds=cpu_only,
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

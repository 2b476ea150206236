"""Await attribution: a top-level-await cell's event-loop idle time given to the coroutines that awaited."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..awaits import AWAIT
from ..model import KINDS, Profile, make_frames
from .cell import Cell, cell_thread
from .ops import _by_label


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

"""Findings about profiles in plain numbers and words: verdicts, "differs most" and the comparison tables.

Knows the model and pandas; knows no plotly and no IPython, so a script or a test can ask for a
finding without drawing anything.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from . import flatstacks
from .boilerplate import FOLDED_FILE
from .cluster.tasks import missing, straggler
from .model import MEMORY_METRICS, METRIC_LABELS, Profile, unique_ints
from .multi import PROCESS, by_process, processes


def fmt(metric: str, v: float) -> str:
    """A weight in its unit: samples and allocations as integers, bytes in B/KiB/MiB/GiB, times in s/ms."""
    if v != v:
        return "unknown"
    if metric in ("samples", "allocations"):
        return f"{v:,.0f} {metric}"
    if metric in MEMORY_METRICS:
        return fmt_bytes(v)
    if abs(v) >= 1 or v == 0:
        return f"{v:.3f} s"
    return f"{v * 1e3:.3g} ms"


def fmt_bytes(v: float) -> str:
    """Bytes in binary units, as memray prints them (1 MiB = 1,048,576 bytes)."""
    for unit in ("B", "KiB", "MiB"):
        if abs(v) < 1024:
            return f"{v:,.0f} B" if unit == "B" else f"{v:.4g} {unit}"
        v /= 1024
    return f"{v:.4g} GiB"


def hover_unit(metric: str) -> str:
    """The unit suffix after a number in a hover: " B" for bytes, nothing for counts, else " s"."""
    return {"bytes": " B", "allocated": " B", "samples": "", "allocations": ""}.get(metric, " s")


def metric_label(metric: str) -> str:
    return METRIC_LABELS.get(metric, metric)


# -- off-CPU verdict ---------------------------------------------------------------------------------
def off_cpu_verdict(p: Profile) -> str:
    """One line: the share of wall time spent off-CPU and where most of it waits (the leaf function
    and the nearest Python caller above it)."""
    wall = p.total("wall")
    if "cpu" not in p.metrics:
        backend = p.meta.get("backend", "this backend")
        return (f"off-CPU time unknown: {backend} measured only wall time "
                f"({wall:.3g} s); record with --mode both to split it")
    if not wall or wall != wall:
        return "no wall time recorded"
    w = p.weights("off_cpu").fillna(0.0).to_numpy()
    off = float(w.sum())
    head = f"{100.0 * off / wall:.0f}% of wall time off-CPU"
    if off <= 0:
        return head
    leaf, caller = _waits(p, w)
    y = max(leaf, key=lambda k: leaf[k][0])
    names = p.frames["name"]
    weight, leaf_frame = leaf[y]
    part = f"{100.0 * weight / off:.0f}% of it"
    callers = {x: v for (yy, x), v in caller.items() if yy == y}
    if callers:
        x = max(callers, key=lambda k: callers[k][0])
        return f"{head}, mostly in {names[callers[x][1]]} waiting in {names[leaf_frame]} ({part})"
    return f"{head}, mostly waiting in {names[leaf_frame]} ({part})"


def _waits(p: Profile, off: np.ndarray) -> tuple[dict, dict]:
    """Off-CPU weight by leaf function, and by (leaf function, caller function): each with the
    first frame seen for it. The caller is the nearest Python frame above the leaf, else the
    nearest frame of another function (never a folded boilerplate frame)."""
    fn = p.function_ids()
    kinds = p.frames["kind"].astype(str)
    folded = set(p.frames.index[(p.frames["file"] == FOLDED_FILE).to_numpy()].tolist())
    leaf: dict[int, list] = {}
    caller: dict[tuple[int, int], list] = {}
    for stack, x in zip(p.stacks["stack"], off):
        if x <= 0 or not stack:
            continue
        y = int(fn[stack[-1]])
        leaf.setdefault(y, [0.0, stack[-1]])[0] += x
        above = [f for f in reversed(stack[:-1]) if int(fn[f]) != y and f not in folded]
        py = [f for f in above if kinds[f] == "python"]
        pick = py[0] if py else (above[0] if above else None)
        if pick is not None:
            caller.setdefault((y, int(fn[pick])), [0.0, pick])[0] += x
    return {k: tuple(v) for k, v in leaf.items()}, {k: tuple(v) for k, v in caller.items()}


# -- processes ---------------------------------------------------------------------------------------
def process_profile(profile: Profile, label: str) -> Profile:
    """Only the rows of process ``label`` (its time-ordered samples are not carried)."""
    st = profile.stacks
    mask = (st[PROCESS] == label).to_numpy() if PROCESS in st else np.ones(len(st), dtype=bool)
    info = (profile.meta.get("processes") or {}).get(label) or {}
    meta = {"process": label, **{k: info[k] for k in ("backend", "rate") if info.get(k) is not None}}
    if info.get("ended"):
        meta["duration"] = None
    sub = profile.subset(mask, drop_threads=True)
    return sub.replace(samples=None, meta=sub.meta.replace(**meta))


def shares(profile: Profile, metric: str | None = None, top: int = 15,
           column: str = "total") -> tuple[pd.DataFrame, pd.DataFrame]:
    """(share, value): functions × processes; share = function ``column`` (total or self) / process
    total. The ``top`` functions by their largest share in any process."""
    metric = metric or profile.metric
    cols, vals = {}, {}
    gone = missing(profile)
    for p in [q for q in processes(profile) if q not in gone] or ["(one process)"]:
        sub = process_profile(profile, p)
        total = sub.total(metric)
        f = sub.functions(metric)
        key = f["name"].astype(str) + "  " + f["file"].astype(str)
        v = pd.Series(f[column].to_numpy(dtype=np.float64), index=key).groupby(level=0).sum()
        vals[p] = v
        cols[p] = v / total if total and total == total else v * np.nan
    share = pd.DataFrame(cols).fillna(0.0)
    value = pd.DataFrame(vals).reindex(share.index).fillna(0.0)
    order = share.max(axis=1).sort_values(ascending=False).index[:top]
    return share.loc[order], value.loc[order]


def differs_most(profile: Profile, metric: str | None = None) -> str:
    """One line: the process whose self-time shares (a distribution over functions) are furthest,
    in total variation distance, from the median of the others'; and the function whose total
    share differs most. Where all processes spend their time alike (or tie, as two always do),
    the one whose total is furthest from the others' median. Compares the children only when
    there are at least two (the parent runs different code by design). In a cluster profile: the
    straggler (cluster.tasks.straggler); ranks without samples are left out."""
    metric = metric or profile.metric
    if profile.meta.get("cluster"):
        s = straggler(profile)
        if s["worker"] is not None:
            return s["text"]
    gone = missing(profile)
    procs = [p for p in processes(profile) if p not in gone]
    info = profile.meta.get("processes") or {}
    peers = [p for p in procs if (info.get(p) or {}).get("role") not in ("parent", "driver")]
    if len(peers) < 2:
        peers = procs
    if len(peers) < 2:
        return "one process: nothing to compare"
    own, _ = shares(profile, metric, top=10 ** 9, column="self")
    own = own[peers]
    dist = {p: 0.5 * float((own[p] - own.drop(columns=[p]).median(axis=1)).abs().sum()) for p in peers}
    totals = by_process(profile)
    m = metric if metric in totals else "samples"
    gap = {p: _total_gap(totals[m], peers, p) for p in peers}
    top = max(dist.values())
    if top < 0.05:  # same code in the same proportions (or two peers, a symmetric distance): by total
        worst = max(peers, key=gap.get)
    else:  # ties (two peers are always tied) broken by the total
        worst = max(peers, key=lambda p: (round(dist[p], 2), gap[p]))
    med_total = float(totals.loc[[p for p in peers if p != worst], m].median())
    mine = fmt(m, float(totals.at[worst, m]))
    if top < 0.05:
        return (f"{worst} differs most, in {metric_label(m)}: {mine} vs a median {fmt(m, med_total)} in the "
                f"others; the processes spend their time alike (function shares within {top:.2f} of 1)")
    share, _ = shares(profile, metric, top=10 ** 9)
    share = share[peers]
    others = share.drop(columns=[worst]).median(axis=1)
    fn = (share[worst] - others).abs().idxmax()
    return (f"{worst} differs most (distance {dist[worst]:.2f} of 1 from the others' median): "
            f"{fn.split('  ')[0]} takes {share.at[fn, worst]:.0%} of it vs {others[fn]:.0%} in the others; "
            f"its {metric_label(m)} {mine} vs a median {fmt(m, med_total)}")


def _total_gap(totals: pd.Series, peers: list, p) -> float:
    """How far process ``p``'s total is from the median of the other peers', relative."""
    med = float(totals.loc[[q for q in peers if q != p]].median())
    v = float(totals.at[p])
    return abs(v - med) / med if med and med == med and v == v else 0.0


# -- tables of the comparison views -------------------------------------------------------------------
CELL_FILE = re.compile(r"In\[\d+\]")


def match_key(name: str, file) -> tuple:
    """The key that matches a function across profiles: (name, file), except that the top level of
    every notebook cell (``<module>`` in ``In[N]``) is one function, so the same code recorded in
    two cells compares line for line."""
    if name == "<module>" and CELL_FILE.fullmatch(str(file or "")):
        return (name, "In[·]")
    return (name, file)


def _functions(p: Profile, w: np.ndarray) -> pd.DataFrame:
    """``p.functions()`` over the weights ``w`` (one per stack row) instead of a metric column, with
    files as ``match_key`` gives them."""
    f = p.replace(stacks=p.stacks.assign(wall=w), metric="wall").functions("wall")
    f = f[["name", "file", "self", "total"]]
    return f.assign(file=[match_key(n, x)[1] for n, x in zip(f["name"], f["file"])])


def deltas(before: Profile, after: Profile, w_before: np.ndarray, w_after: np.ndarray,
           labels: tuple[str, str] = ("before", "after")) -> pd.DataFrame:
    """Per function (name, file): total and self before and after, their change, and the side it
    is found on; the largest change of self time first (then of total). A function absent on one
    side counts 0 there."""
    m = _functions(before, w_before).merge(_functions(after, w_after), on=["name", "file"], how="outer",
                                           suffixes=("_before", "_after"), indicator=True)
    m["side"] = m["_merge"].map({"both": "both", "left_only": f"only {labels[0]}",
                                 "right_only": f"only {labels[1]}"}).astype(object)
    for c in ("self_before", "self_after", "total_before", "total_after"):
        m[c] = m[c].fillna(0.0).astype(np.float64)  # absent on one side: measured, and zero
    m["delta_total"] = m["total_after"] - m["total_before"]
    m["delta_self"] = m["self_after"] - m["self_before"]
    with np.errstate(divide="ignore", invalid="ignore"):
        m["change_pct"] = np.where(m["total_before"] > 0, 100.0 * m["delta_total"] / m["total_before"], np.nan)
    m = m.drop(columns="_merge")
    m = m.assign(_self=m["delta_self"].abs(), _total=m["delta_total"].abs()).sort_values(
        ["_self", "_total", "total_after"], ascending=False, kind="stable").drop(columns=["_self", "_total"])
    cols = ["name", "file", "total_before", "total_after", "delta_total", "change_pct",
            "self_before", "self_after", "delta_self", "side"]
    return m[cols].reset_index(drop=True)


def cpu_wall_table(p: Profile) -> pd.DataFrame:
    """Per function: CPU, off-CPU and wall time and the on-CPU share, most off-CPU first. CPU and
    off-CPU are NaN (unknown) when the profile has no CPU time."""
    wall = p.functions("wall")
    out = pd.DataFrame({"function": wall["name"], "file": wall["file"]}, index=wall.index)
    if "cpu" in p.metrics:
        cpu = p.functions("cpu")["total"].reindex(wall.index).fillna(0.0)
        off = p.functions("off_cpu")["total"].reindex(wall.index).fillna(0.0)
    else:
        cpu = off = pd.Series(np.nan, index=wall.index)
    out["cpu s"] = cpu.astype(np.float64)
    out["off-CPU s"] = off.astype(np.float64)
    out["wall s"] = wall["total"].astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out["on-CPU %"] = np.where(out["wall s"] > 0, 100.0 * out["cpu s"] / out["wall s"], np.nan)
    out = out.sort_values(["off-CPU s", "wall s"], ascending=False, kind="stable", na_position="last")
    return out.reset_index(drop=True)


# -- time per source line ----------------------------------------------------------------------------
def line_table(profile: Profile, file: str, thread: str | None = None,
               function: int | None = None) -> pd.DataFrame:
    """Per line of ``file`` (the lines frames of that file were executing): ``samples`` and, for
    each measured clock (wall, cpu, off_cpu) and memory metric, the line's total (every stack
    through a frame at that line, once per stack) and self (stacks whose leaf is at that line, as
    ``self_<metric>``). ``function``: only frames of that function id. Hottest line first."""
    fr = profile.frames
    f = flatstacks.frame_ids(profile)
    nfr = int(fr.index.max()) + 1 if len(fr) else 0
    line_of = np.full(nfr, -1, np.int64)
    line_of[fr.index.to_numpy()] = fr["line"].fillna(-1).to_numpy(dtype=np.int64)
    want = np.zeros(nfr, bool)   # per frame id: of the file (and function), at a line
    want[fr.index.to_numpy()] = (fr["file"].astype(str) == str(file)).to_numpy()
    if function is not None:
        want &= flatstacks.function_ids(profile) == function
    want &= line_of >= 0
    if thread is not None:
        keep = np.zeros(len(profile.stacks), bool)
        keep[(profile.stacks["thread"] == thread).to_numpy()] = True
    else:
        keep = np.ones(len(profile.stacks), bool)
    at = np.flatnonzero(want[f.fn])
    r = np.searchsorted(f.starts + f.lengths, at, side="right")   # the stack row of each such frame
    k = keep[r]
    at, r = at[k], r[k]
    ln = line_of[f.fn[at]]
    span = int(ln.max()) + 1 if len(ln) else 1
    pair = unique_ints(r * span + ln)               # one entry per (stack row, line)
    prow, pline = pair // span, pair % span
    leaf_rows, leaf = f.leaves
    leaf_hit = want[leaf] & keep[leaf_rows]
    lines = unique_ints(pline)
    out = pd.DataFrame(index=pd.Index(lines, name="line"))

    def per_line(w: np.ndarray, r_: np.ndarray, l_: np.ndarray) -> np.ndarray:
        return np.bincount(l_, weights=w[r_], minlength=span)[lines]
    counts = profile.stacks["samples"].to_numpy(dtype=np.float64)
    out["samples"] = per_line(counts, prow, pline)
    for m in [x for x in profile.metrics if x != "samples"]:
        w = np.nan_to_num(profile.weights(m).to_numpy(dtype=np.float64))
        out[m] = per_line(w, prow, pline)
        out["self_" + m] = per_line(w, leaf_rows[leaf_hit], line_of[leaf[leaf_hit]])
    key = profile.metric if profile.metric in out else "samples"
    return out.sort_values(key, ascending=False, kind="stable")


def cell_file(profile: Profile) -> str | None:
    """The file name the profile's cell has in its frames (``In[N]`` once renamed), or None."""
    renamed = profile.meta.get("renamed_files") or {}
    real = profile.meta.get("trimmed_to")
    if real:
        return renamed.get(real, real)
    return None

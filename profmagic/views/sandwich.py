"""Sandwich: functions by total and self; for one function, its callers above and callees below.

Totals cover every instance of the function, counting a recursive one once per stack.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from ..model import MEMORY_METRICS, Profile
from . import esc, fmt, metric_label, title
from . import icicle
from . import tree as T


def table(profile: Profile, metric: str | None = None, thread: str | None = None,
          pattern: str | None = None, sort: str = "total") -> pd.DataFrame:
    """Functions with name, file, self, total and their shares of the view, filtered by a regex
    on name or file, sorted by ``sort`` (total, self or name)."""
    metric = metric or profile.metric
    T.metric_weights(profile, metric)  # raises if the profile cannot know the metric
    p = profile if thread is None else profile.subset(T.thread_rows(profile, thread))
    df = p.functions(metric)
    grand = float(np.nansum(p.weights(metric).to_numpy(dtype=np.float64))) or 1.0
    df = df.assign(total_pct=100 * df["total"] / grand, self_pct=100 * df["self"] / grand)
    if pattern:
        rx = re.compile(pattern)
        df = df[[bool(rx.search(str(n)) or rx.search(str(f))) for n, f in zip(df["name"], df["file"])]]
    if sort == "name":
        return df.sort_values("name", kind="stable")
    if sort not in ("total", "self"):
        raise ValueError(f"sort must be total, self or name, not {sort!r}")
    other = "self" if sort == "total" else "total"
    return df.sort_values([sort, other], ascending=False, kind="stable")


def trees(profile: Profile, function, metric: str | None = None, thread: str | None = None,
          min_share: float = 0.0, max_nodes: int = T.MAX_NODES // 2):
    """(callers, callees, function ids) for ``function`` (id, exact name, or regex), pruned."""
    metric = metric or profile.metric
    fns = T.function_set(profile, function)
    callers, callees = T.sandwich(profile, fns, metric, thread)
    return (T.prune(callers, min_share, max_nodes), T.prune(callees, min_share, max_nodes), fns)


def figure(profile: Profile, function=None, metric: str | None = None, thread: str | None = None, *,
           min_share: float = 0.0, top: int = 200, colour: str = "kind") -> go.Figure:
    """Without ``function``: the function table. With it: callers (inverted icicle, left) and
    callees (icicle, right) of every instance of the function."""
    metric = metric or profile.metric
    if function is None:
        df = table(profile, metric, thread).head(top)
        unit = metric_label(metric)
        num = (lambda v: fmt(metric, v)) if metric in MEMORY_METRICS else (lambda v: f"{v:.4g}")
        fig = go.Figure(go.Table(
            columnwidth=[4, 1, 1, 3],
            header=dict(values=["function", f"total ({esc(unit)})", f"self ({esc(unit)})", "file"],
                        align="left"),
            cells=dict(values=[[esc(n) for n in df["name"]],
                               [f"{num(v)} ({p:.1f}%)" for v, p in zip(df["total"], df["total_pct"])],
                               [f"{num(v)} ({p:.1f}%)" for v, p in zip(df["self"], df["self_pct"])],
                               [esc(f, 200) for f in df["file"]]],
                       align="left")))
        fig.update_layout(title=dict(text=title(profile, metric, "Sandwich: functions", thread), x=0.01,
                                     font=dict(size=13)),
                          margin=dict(l=8, r=8, t=80, b=8), height=min(900, 140 + 24 * len(df)))
        return fig
    callers, callees, fns = trees(profile, function, metric, thread, min_share)
    ft = T.function_table(profile)
    name = str(ft.loc[int(fns[0]), "name"])
    also = f" (+{len(fns) - 1} more matching)" if len(fns) > 1 else ""
    total = float(callees.total[0])
    view = float(np.nansum(T.metric_weights(profile, metric)[0][T.thread_rows(profile, thread)])) or 1.0
    fig = go.Figure([
        icicle.trace(profile, callers, metric, name, colour, ft, flip=True, domain=dict(x=[0, 0.49])),
        icicle.trace(profile, callees, metric, name, colour, ft, domain=dict(x=[0.51, 1])),
    ])
    note = (f"{name}{also}: total {fmt(metric, total)} ({100 * total / view:.1f}% of the view), "
            f"self {fmt(metric, _self(profile, fns, metric, thread))} over all instances")
    fig.update_layout(
        title=dict(text=title(profile, metric, "Sandwich: callers (left) · callees (right)", thread, note),
                   x=0.01, font=dict(size=13)),
        margin=dict(l=8, r=8, t=95, b=8),
        height=int(min(900, max(360, 130 + 22 * (max(callers.depth.max(), callees.depth.max()) + 1)))),
        uniformtext=dict(minsize=9, mode="hide"),
    )
    return fig


def _self(profile: Profile, fns, metric: str, thread: str | None) -> float:
    p = profile if thread is None else profile.subset(T.thread_rows(profile, thread))
    f = p.functions(metric)
    return float(f.loc[f.index.isin(fns), "self"].sum())

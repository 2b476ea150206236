"""Sandwich: functions by total and self; for one function, its callers above and callees below.

Totals cover every instance of the function, counting a recursive one once per stack. The list
is sorted by self time: where the time is spent, not what it passes through.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from .. import boilerplate as B
from ..model import MEMORY_METRICS, Profile
from . import esc, fmt, metric_label, title
from . import icicle
from . import tree as T
from .memo import functions


PAGE = 500   # functions listed at once (a large profile gets totals for these only)


def table(profile: Profile, metric: str | None = None, thread: str | None = None,
          pattern: str | None = None, sort: str = "self", boilerplate: bool = True,
          limit: int | None = None, totals: bool = True) -> pd.DataFrame:
    """Functions with name, file, self, total and their shares of the view, filtered by a regex
    on name or file, sorted by ``sort`` (self, total or name). With ``boilerplate`` (the default),
    functions found only in folded boilerplate are left out (``profmagic.boilerplate``). A profile
    of more than ``tree.LARGE`` frames lists a page: the ``limit`` (default ``PAGE``) heaviest by
    self time (``totals=False``: no totals, NaN)."""
    metric = metric or profile.metric
    T.metric_weights(profile, metric)  # raises if the profile cannot know the metric
    if boilerplate:
        profile = B.fold(profile)
    rx = re.compile(pattern) if pattern else None
    if T.large(profile):
        df = _page(profile, metric, thread, rx, limit or PAGE, totals)
    else:
        df = functions(profile, metric, None if thread is None else T.thread_rows(profile, thread), thread)
        if rx is not None:
            df = df[[bool(rx.search(str(n)) or rx.search(str(f))) for n, f in zip(df["name"], df["file"])]]
    df = df[df["file"] != B.FOLDED_FILE]
    w = T.metric_weights(profile, metric)[0]
    grand = float(w.sum() if thread is None else w[T.thread_rows(profile, thread)].sum()) or 1.0
    df = df.assign(total_pct=100 * df["total"] / grand, self_pct=100 * df["self"] / grand)
    if sort == "name":
        return df.sort_values("name", kind="stable")
    if sort not in ("total", "self"):
        raise ValueError(f"sort must be total, self or name, not {sort!r}")
    other = "self" if sort == "total" else "total"
    return df.sort_values([sort, other], ascending=False, kind="stable")


def _page(profile: Profile, metric: str, thread: str | None, rx, limit: int, totals: bool = True) -> pd.DataFrame:
    """``functions()``-shaped rows for the ``limit`` functions heaviest by self time (of those whose
    name or file matches ``rx``)."""
    ft = T.function_table(profile)
    clocks = tuple(m for m in ("wall", "cpu", "off_cpu") if m != metric) if icicle.clocks(profile, metric) else ()
    sums = T.function_sums(profile, (metric,) + clocks, thread, totals=totals)
    ids = ft.index.to_numpy()
    if rx is not None:
        ids = ids[[bool(rx.search(str(n)) or rx.search(str(f))) for n, f in zip(ft["name"], ft["file"])]]
    ids = ids[np.argsort(-sums["self_" + metric].to_numpy()[ids], kind="stable")][:limit]
    page = sums.loc[ids]
    if not totals:
        page = page.assign(**{"total_" + m: np.nan for m in (metric,) + clocks})
    out = pd.DataFrame({"id": ids, "name": ft.loc[ids, "name"].to_numpy(), "file": ft.loc[ids, "file"].to_numpy(),
                        "self": page["self_" + metric].to_numpy(), "total": page["total_" + metric].to_numpy()})
    for m in clocks + ((metric,) if clocks else ()):
        out[m] = page["total_" + m].to_numpy()
        out["self_" + m] = page["self_" + m].to_numpy()
    return out


def trees(profile: Profile, function, metric: str | None = None, thread: str | None = None,
          min_share: float = 0.0, max_nodes: int = T.MAX_NODES // 2):
    """(callers, callees, function ids) for ``function`` (id, exact name, or regex), pruned."""
    metric = metric or profile.metric
    fns = T.function_set(profile, function)
    callers, callees = T.sandwich(profile, fns, metric, thread, min_share=min_share, max_nodes=max_nodes)
    return callers, callees, fns


def figure(profile: Profile, function=None, metric: str | None = None, thread: str | None = None, *,
           min_share: float = 0.0, top: int = 200, colour: str = "function",
           boilerplate: bool = True) -> go.Figure:
    """Without ``function``: the function table, by self time. With it: callers (inverted icicle,
    left) and callees (icicle, right) of every instance of the function."""
    metric = metric or profile.metric
    if function is None:
        df = table(profile, metric, thread, boilerplate=boilerplate).head(top)
        unit = metric_label(metric)
        num = (lambda v: fmt(metric, v)) if metric in MEMORY_METRICS else (lambda v: f"{v:.4g}")
        ranged = "total_lo" in df and bool((df["total_hi"] > df["total_lo"]).any())   # 95% (profmagic.uncertainty)
        fig = go.Figure(go.Table(
            columnwidth=[4, 1, 1, 3] if not ranged else [4, 1, 1, 1, 3],
            header=dict(values=["function", f"total ({esc(unit)})", f"self ({esc(unit)})"]
                        + (["total, 95% interval"] if ranged else []) + ["file"], align="left"),
            cells=dict(values=[[esc(n) for n in df["name"]],
                               [f"{num(v)} ({p:.1f}%)" for v, p in zip(df["total"], df["total_pct"])],
                               [f"{num(v)} ({p:.1f}%)" for v, p in zip(df["self"], df["self_pct"])]]
                       + ([[f"{num(a)}–{num(b)}" for a, b in zip(df["total_lo"], df["total_hi"])]] if ranged else [])
                       + [[esc(f, 200) for f in df["file"]]],
                       align="left")))
        fig.update_layout(title=dict(text=title(profile, metric, "Sandwich: functions", thread), x=0.01,
                                     font=dict(size=13)),
                          margin=dict(l=8, r=8, t=80, b=8), height=min(900, 140 + 24 * len(df)))
        return fig
    if boilerplate:
        profile = B.fold(profile)
    callers, callees, fns = trees(profile, function, metric, thread, min_share)
    paint = icicle.Paint.of(profile, metric, thread, colour)
    name = str(paint.ft.loc[int(fns[0]), "name"])
    also = f" (+{len(fns) - 1} more matching)" if len(fns) > 1 else ""
    total = float(callees.total[0])
    view = float(np.nansum(T.metric_weights(profile, metric)[0][T.thread_rows(profile, thread)])) or 1.0
    fig = go.Figure([icicle.trace(paint, callers, name, flip=True, domain=dict(x=[0, 0.49])),
                     icicle.trace(paint, callees, name, domain=dict(x=[0.51, 1]))])
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
    sums = T.function_sums(profile, (metric,), thread, totals=False)["self_" + metric]
    return float(sums.to_numpy()[np.asarray(fns)].sum())

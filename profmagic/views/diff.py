"""Before/after (``profmagic.compare``): the differential icicle and the per-function delta table.

The shape comes from ``after``, coloured by the change per call path (red slower, blue faster, as
FlameGraph's difffolded); paths found in ``before`` only keep their ``before`` width, so nothing is
dropped. Nodes merge by function (name, file); threads are merged. Unknown (NaN) weights are
counted and said, never drawn as zeros.
"""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from ..analysis import deltas
from ..model import Profile
from ..multi import common_metric
from . import esc, metric_label
from . import tree as T
from .display import ComparisonView, svg, svg_row, table_html


class Comparison(ComparisonView):
    """The result of ``compare``: ``table`` (per-function deltas), ``figure`` (differential icicle)."""

    def __init__(self, before: Profile, after: Profile, metric: str, normalize: bool,
                 labels: tuple[str, str], min_share: float, max_nodes: int):
        self.before, self.after = before, after
        self.metric, self.normalize, self.labels = metric, normalize, labels
        wa, self.unknown_before = T.metric_weights(before, metric)
        wb, self.unknown_after = T.metric_weights(after, metric)
        self.total_before, self.total_after = float(wa.sum()), float(wb.sum())
        if normalize:
            wa = wa / self.total_before if self.total_before else wa
            wb = wb / self.total_after if self.total_after else wb
        self._wa, self._wb = wa, wb
        self.unit = "share of total" if normalize else ("samples" if metric == "samples" else "s")
        self.table = deltas(before, after, wa, wb, labels)
        self._min_share, self._max_nodes = min_share, max_nodes
        self._figure = None

    def _make_figure(self) -> go.Figure:
        u = T.Union([self.before, self.after], [self._wa, self._wb])
        width, n_gone = _widths(u)
        sel = T.select(u.parent, u.depth, width, self._min_share, self._max_nodes)
        A, B, W = (sel.take(x) for x in (u.trees[0].total, u.trees[1].total, width))
        D = B - A
        kept = sel.kept.tolist()
        labels = [esc(u.name(n, "all threads")) for n in kept] + \
                 [f"(other: {c} smaller)" for c in sel.folded_counts()]
        where = [esc(u.where(n), 80) for n in kept] + [""] * len(sel.holders)
        status = np.where(A <= 0, f"only in {self.labels[1]}",
                          np.where(B <= 0, f"only in {self.labels[0]}", "in both"))
        lim = float(np.max(np.abs(D))) if len(D) and np.max(np.abs(D)) > 0 else 1.0
        custom = np.empty((len(W), 5), dtype=object)
        custom[:, 0] = where
        custom[:, 1] = A.tolist()
        custom[:, 2] = B.tolist()
        custom[:, 3] = D.tolist()
        custom[:, 4] = [esc(s) for s in status]
        parents = sel.parents(u.parent)
        fig = go.Figure(go.Icicle(
            ids=list(range(len(W))), parents=[""] + parents[1:].tolist(), values=W.tolist(),
            branchvalues="total", labels=labels, customdata=custom, hovertemplate=self._hover(),
            sort=True, textinfo="label",
            marker=dict(colors=D.tolist(), colorscale="RdBu_r", cmid=0, cmin=-lim, cmax=lim,
                        showscale=True, colorbar=dict(title=dict(text="change"), thickness=12)),
            tiling=dict(orientation="v", flip="x", pad=0)))
        note = (f"width from {self.labels[1]}; {n_gone} subtree(s) found only in {self.labels[0]} "
                f"keep their {self.labels[0]} width" if n_gone else f"width from {self.labels[1]}")
        if len(sel.kept) < len(u.parent):
            note += f"; {len(u.parent) - len(sel.kept):,} small nodes folded into (other)"
        fig.update_layout(
            title=dict(text=f"<b>{esc(self.title())}</b><br><span style='font-size:11px'>"
                            f"{esc(note)}<br>{esc(self.labels[0])}: {esc(self.before.describe())}<br>"
                            f"{esc(self.labels[1])}: {esc(self.after.describe())}</span>",
                       x=0.01, font=dict(size=13)),
            margin=dict(l=8, r=8, t=110, b=8),
            height=int(min(900, max(380, 140 + 22 * (int(u.depth.max()) + 1 if len(u.depth) else 1)))),
            uniformtext=dict(minsize=9, mode="hide"))
        return fig

    def _hover(self) -> str:
        fmt = ".2%" if self.normalize else ".4~g"
        unit = "" if self.normalize or self.metric == "samples" else " s"
        return ("<b>%{label}</b><br>%{customdata[0]}<br>"
                f"{esc(self.labels[0])}: %{{customdata[1]:{fmt}}}{unit}<br>"
                f"{esc(self.labels[1])}: %{{customdata[2]:{fmt}}}{unit}<br>"
                f"change: %{{customdata[3]:+{fmt}}}{unit} · %{{customdata[4]}}<extra></extra>")

    # -- display ----------------------------------------------------------------------------------
    def title(self) -> str:
        what = "normalised to each total" if self.normalize else metric_label(self.metric)
        return (f"Differential icicle: {self.labels[1]} vs {self.labels[0]} · {what} · "
                "red slower, blue faster")

    def summary(self) -> str:
        a, b = self.total_before, self.total_after
        unit = "samples" if self.metric == "samples" else "s"
        pct = f" ({100 * (b - a) / a:+.1f}%)" if a else ""
        s = (f"{metric_label(self.metric)}: {self.labels[0]} {a:.4g} {unit}, "
             f"{self.labels[1]} {b:.4g} {unit}{pct}")
        for lab, n in ((self.labels[0], self.unknown_before), (self.labels[1], self.unknown_after)):
            if n:
                s += f"; {lab}: {n} stacks with unknown {self.metric} left out"
        return s

    def __repr__(self) -> str:
        return f"<Comparison {self.summary()}; {len(self.table)} functions>"

    def _parts(self) -> tuple[str, str, str]:
        t = self.table.head(30)
        head = f"<div class='profmagic-compare'><p>{esc(self.summary(), 1000)}</p></div>"
        pic = svg_row([(f"{esc(self.labels[0])} ({esc(metric_label(self.metric))})",
                        svg(self.before, self.metric, 560)),
                       (f"{esc(self.labels[1])} ({esc(metric_label(self.metric))}; the colours of "
                        "change are in the live view)", svg(self.after, self.metric, 560))])
        table = (f"<div class='profmagic-compare-table'><p>Per-function change ({esc(self.unit)}), "
                 f"largest first</p>{table_html(t)}</div>")
        return head, pic, table

    def _text(self) -> str:
        return repr(self) + "\n" + self.table.head(30).to_string()


def _widths(u: T.Union) -> tuple[np.ndarray, int]:
    """Drawn width per union node: the after weight, plus the before weight of subtrees that
    vanished (drawn too); and how many such subtrees there are."""
    ta, tb = u.trees[0].total, u.trees[1].total
    parent, depth = u.parent, u.depth
    gone = (tb <= 0) & (ta > 0)
    gone[0] = False
    gone_root = gone.copy()
    gone_root[1:] &= ~gone[parent[1:]]
    width = np.where(gone, ta, tb + T.subtree_sum(parent, depth, np.where(gone_root, ta, 0.0)))
    return width, int(gone_root.sum())


def compare(a: Profile, b: Profile, normalize: bool = False, metric: str | None = None, *,
            labels: tuple[str, str] = ("before", "after"), min_share: float = 0.0,
            max_nodes: int = T.MAX_NODES) -> Comparison:
    """Compare ``a`` (before) with ``b`` (after). ``normalize`` divides each by its own total, so
    the deltas are changes of share. ``metric`` defaults to one both profiles know
    (``multi.common_metric``)."""
    if metric is None:
        metric = common_metric([a, b])
    for name, p in zip(labels, (a, b)):
        if metric not in p.metrics:
            raise ValueError(f"{name} has no {metric_label(metric)}; it has {', '.join(p.metrics)}")
    return Comparison(a, b, metric, normalize, tuple(labels), min_share, max_nodes)

"""Before/after (``profmagic.compare``): both icicles at one scale, the differential icicle and the
per-function change table.

- The before and after icicles are drawn at the same seconds per pixel (a "normalised" switch
  gives each its own width), one colour per function in both.
- The differential icicle takes its shape from ``after`` and colours each call path by its change
  (FlameGraph's difffolded convention: red slower, blue faster); paths found in ``before`` only keep
  their ``before`` width, so nothing is dropped. It is in the live figure and in the static twin.
- The table sorts by the change of self time; functions with no self time on either side (callers
  that only pass time through) are left out of the display, never out of ``table``.
- A change is coloured only when it lies outside the two runs' combined 95% uncertainty
  (``profmagic.uncertainty``, docs/uncertainty.md); one within it is grey and says "within noise".
  The table's ``noise`` is that combined half-width and ``significant`` says which side of it the
  change of total lies.

Nodes merge by function (name, file); threads are merged; boilerplate is folded. Unknown (NaN)
weights are counted and said, never drawn as zeros.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

from .. import boilerplate as B
from .. import uncertainty as U
from ..analysis import deltas, match_key
from ..model import MEMORY_METRICS, Profile
from ..multi import common_metric
from . import colours as C
from . import esc, fmt, hover_unit, metric_label
from . import icicle as I
from . import tree as T
from .display import ComparisonView, svg, svg_row, table_html, table_trace

UNITS = {"samples": "samples", "bytes": "bytes", "allocated": "bytes", "allocations": "allocations"}
PANEL = 0.49
PANELS_Y = [0.72, 0.95]
DIFF_Y = [0.36, 0.66]
TABLE_Y = [0.0, 0.31]


@dataclass
class DiffTree:
    """The differential icicle's nodes: parent, label, file, before (A), after (B), drawn width (W)."""
    parent: np.ndarray
    depth: np.ndarray
    labels: list
    where: list
    A: np.ndarray
    B: np.ndarray
    W: np.ndarray
    gone: int        # subtrees found in before only
    folded: int      # nodes folded into (other)
    HA: np.ndarray = None   # 95% half-widths of A and B (profmagic.uncertainty)
    HB: np.ndarray = None

    @property
    def change(self) -> np.ndarray:
        return self.B - self.A

    @property
    def significant(self) -> np.ndarray:
        """Changes outside the two runs' combined uncertainty."""
        if self.HA is None:
            return np.ones(len(self.A), bool)
        return U.significant(self.change, -self.HA, self.HA, -self.HB, self.HB)

    def scaled(self, a: float, b: float) -> "DiffTree":
        """Before divided by ``a`` and after by ``b`` (normalised to each total)."""
        A, B_ = self.A / (a or 1.0), self.B / (b or 1.0)
        HA = None if self.HA is None else self.HA / (a or 1.0)
        HB = None if self.HB is None else self.HB / (b or 1.0)
        return DiffTree(self.parent, self.depth, self.labels, self.where, A, B_,
                        _widths(self.parent, self.depth, A, B_)[0], self.gone, self.folded, HA, HB)

    def colours(self, lim: float) -> list[str]:
        """A change colour where the change is significant, grey where it is within noise."""
        sig = self.significant
        return [C.change_colour(x, lim) if s else C.GREY for x, s in zip(self.change.tolist(), sig.tolist())]


class Comparison(ComparisonView):
    """The result of ``compare``: ``table`` (per-function changes), ``figure`` (both icicles at one
    scale, the differential icicle and the table, with a normalise switch)."""

    def __init__(self, before: Profile, after: Profile, metric: str, normalize: bool,
                 labels: tuple[str, str], min_share: float, max_nodes: int, boilerplate: bool = True):
        self.before, self.after = (B.fold(before), B.fold(after)) if boilerplate else (before, after)
        self.metric, self.normalize, self.labels = metric, normalize, labels
        wa, self.unknown_before = T.metric_weights(self.before, metric)
        wb, self.unknown_after = T.metric_weights(self.after, metric)
        self.total_before, self.total_after = float(wa.sum()), float(wb.sum())
        self._w = (wa, wb)
        self.warnings = U.not_comparable(self.before, self.after)
        self._half = [self._function_halves(p) for p in (self.before, self.after)]
        self.unit = "share of total" if normalize else UNITS.get(metric, "s")
        self.table = self._table(normalize)
        self._min_share, self._max_nodes = min_share, max_nodes
        self._figure = None

    def _table(self, normalize: bool):
        wa, wb = self._w
        if normalize:
            wa = wa / self.total_before if self.total_before else wa
            wb = wb / self.total_after if self.total_after else wb
        t = deltas(self.before, self.after, wa, wb, self.labels)
        t = t[(t["file"] != B.FOLDED_FILE)].reset_index(drop=True)
        keys = [match_key(n, f) for n, f in zip(t["name"], t["file"])]
        h = [np.array([half.get(k, 0.0) for k in keys], np.float64) for half in self._half]
        if normalize:
            h = [h[0] / (self.total_before or 1.0), h[1] / (self.total_after or 1.0)]
        t["noise"] = np.sqrt(h[0] ** 2 + h[1] ** 2)
        t["significant"] = U.significant(t["delta_total"], -h[0], h[0], -h[1], h[1])
        return t

    def _function_halves(self, p: Profile) -> dict:
        """Per function key (``analysis.match_key``), the 95% half-width of its total."""
        if self.metric not in ("wall", "cpu", "off_cpu", "samples") + MEMORY_METRICS:
            return {}
        f = p.functions(self.metric)
        half = ((f["total_hi"] - f["total_lo"]) / 2).to_numpy(np.float64)
        out: dict = {}
        for n, fl, v in zip(f["name"], f["file"], half):
            k = match_key(n, fl)
            out[k] = float(np.hypot(out.get(k, 0.0), v))
        return out

    def _node_halves(self, u, i: int, p: Profile) -> np.ndarray:
        """The 95% half-width of every node of the union tree ``u`` in profile ``i``."""
        index = {match_key(n, f): j for j, (n, f) in enumerate(zip(u.names, u.files))}
        ft = T.function_table(p)
        local = np.full(int(ft.index.max()) + 1 if len(ft) else 0, -1, np.int64)
        for fid, n, f in zip(ft.index, ft["name"], ft["file"]):
            local[fid] = index[match_key(n, f)]
        fl = T.flat(p)
        total = u.trees[i].total
        lo, hi = U.node_intervals(p, self.metric, local[fl.fn], fl.starts, fl.lengths, u.parent, u.key, u.depth,
                                  total)
        return (hi - lo) / 2

    def shown_table(self, normalize: bool | None = None):
        """The table as displayed: functions with self time on some side (pass-through callers
        folded away)."""
        t = self.table if normalize in (None, self.normalize) else self._table(normalize)
        return t[(t["self_before"] != 0) | (t["self_after"] != 0)].reset_index(drop=True)

    # -- the differential tree ---------------------------------------------------------------------
    def diff_tree(self) -> DiffTree:
        u = T.Union([self.before, self.after], list(self._w))
        width, n_gone = _widths(u.parent, u.depth, u.trees[0].total, u.trees[1].total)
        sel = T.select(u.parent, u.depth, width, self._min_share, self._max_nodes)
        kept = sel.kept.tolist()
        labels = [u.name(n, "all threads") for n in kept] + [f"(other: {c} smaller)" for c in sel.folded_counts()]
        where = [u.where(n) for n in kept] + [""] * len(sel.holders)
        parent = sel.parents(u.parent)
        depth = np.concatenate([u.depth[sel.kept], u.depth[sel.holders] + 1])
        ha, hb = (self._node_halves(u, i, p) for i, p in enumerate((self.before, self.after)))
        return DiffTree(parent, depth, labels, where, sel.take(u.trees[0].total), sel.take(u.trees[1].total),
                        sel.take(width), n_gone, len(u.parent) - len(sel.kept), sel.take(ha), sel.take(hb))

    def _diff_trace(self, d: DiffTree, normalize: bool, visible: bool) -> go.Icicle:
        if normalize:
            d = d.scaled(self.total_before, self.total_after)
        D = d.change
        lim = float(np.max(np.abs(D))) if len(D) and np.max(np.abs(D)) > 0 else 1.0
        status = np.where(d.A <= 0, f"only in {self.labels[1]}", np.where(d.B <= 0, f"only in {self.labels[0]}",
                                                                          "in both"))
        status = np.char.add(status.astype(str), np.where(d.significant, " · significant", " · within noise"))
        custom = np.empty((len(D), 5), dtype=object)
        custom[:, 0] = [esc(w, 80) for w in d.where]
        custom[:, 1] = d.A.tolist()
        custom[:, 2] = d.B.tolist()
        custom[:, 3] = D.tolist()
        custom[:, 4] = [esc(s) for s in status]
        return go.Icicle(
            ids=list(range(len(D))), parents=[""] + d.parent[1:].tolist(), values=d.W.tolist(),
            branchvalues="total", labels=[esc(x) for x in d.labels], customdata=custom,
            hovertemplate=self._hover(normalize), sort=True, textinfo="label", visible=visible,
            domain={"x": [0, 1], "y": DIFF_Y},
            marker=dict(colors=d.colours(lim)),
            tiling=dict(orientation="v", pad=0))

    def _hover(self, normalize: bool) -> str:
        spec = ".2%" if normalize else ".4~g"
        unit = "" if normalize else hover_unit(self.metric)
        return ("<b>%{label}</b><br>%{customdata[0]}<br>"
                f"{esc(self.labels[0])}: %{{customdata[1]:{spec}}}{unit}<br>"
                f"{esc(self.labels[1])}: %{{customdata[2]:{spec}}}{unit}<br>"
                f"change: %{{customdata[3]:+{spec}}}{unit} · %{{customdata[4]}}<extra></extra>")

    # -- the figure --------------------------------------------------------------------------------
    def scales(self) -> tuple[float, float]:
        """The before and after icicles' widths as shares of the wider one (one scale)."""
        top = max(self.total_before, self.total_after) or 1.0
        return self.total_before / top, self.total_after / top

    def _panel_x(self, normalize: bool) -> list[list[float]]:
        sb, sa = (1.0, 1.0) if normalize else self.scales()
        return [[0.0, PANEL * sb], [1.0 - PANEL, 1.0 - PANEL + PANEL * sa]]

    def _make_figure(self) -> go.Figure:
        fig = go.Figure()
        for p, xs, lab in zip((self.before, self.after), self._panel_x(self.normalize), self.labels):
            t, _ = I.tree(p, self.metric, None, min_share=self._min_share, max_nodes=self._max_nodes // 2)
            fig.add_trace(I.trace(I.Paint.of(p, self.metric), t, lab, domain={"x": xs, "y": PANELS_Y}))
        for x0, lab, tot in ((0.0, self.labels[0], self.total_before), (1.0 - PANEL, self.labels[1], self.total_after)):
            fig.add_annotation(text=f"<b>{esc(lab)}</b>: {esc(fmt(self.metric, tot))}",
                               x=x0, y=PANELS_Y[1], xref="paper", yref="paper", xanchor="left", yanchor="bottom",
                               showarrow=False)
        d = self.diff_tree()
        for norm in (False, True):
            fig.add_trace(self._diff_trace(d, norm, visible=norm == self.normalize))
        for norm in (False, True):
            fig.add_trace(table_trace(_in_words(self.shown_table(norm)), {"x": [0, 1], "y": TABLE_Y},
                                      "{:.3%}" if norm else "{:.4g}", visible=norm == self.normalize))
        fig.update_layout(
            title=dict(text=f"<b>{esc(self.title())}</b><br><span style='font-size:11px'>"
                            f"{esc(self.note(d))}<br>{esc(self.labels[0])}: {esc(self.before.describe())}<br>"
                            f"{esc(self.labels[1])}: {esc(self.after.describe())}</span>", x=0.01, font=dict(size=13)),
            margin=dict(l=8, r=8, t=120, b=8), height=1150, uniformtext=dict(minsize=9, mode="hide"),
            updatemenus=[dict(type="buttons", direction="right", x=1.0, xanchor="right", y=1.0, yanchor="bottom",
                              active=1 if self.normalize else 0, showactive=True,
                              buttons=[self._button(False), self._button(True)])])
        return fig

    def _button(self, normalize: bool) -> dict:
        x = self._panel_x(normalize)
        return dict(label="normalised" if normalize else "same scale", method="restyle",
                    args=[{"domain.x": [x[0], x[1], [0, 1], [0, 1], [0, 1], [0, 1]],
                           "visible": [True, True, not normalize, normalize, not normalize, normalize]}])

    def note(self, d: DiffTree) -> str:
        out = (f"differential icicle: width from {self.labels[1]}; {d.gone} subtree(s) found only in "
               f"{self.labels[0]} keep their {self.labels[0]} width" if d.gone else
               f"differential icicle: width from {self.labels[1]}")
        if d.folded:
            out += f"; {d.folded:,} small nodes folded into (other)"
        return out

    # -- display ----------------------------------------------------------------------------------
    def title(self) -> str:
        what = "normalised to each total" if self.normalize else metric_label(self.metric)
        more = "red more, blue less" if self.metric in MEMORY_METRICS else "red slower, blue faster"
        more += ", grey within noise"
        return f"Differential icicle: {self.labels[1]} vs {self.labels[0]} · {what} · {more}"

    def summary(self) -> str:
        a, b = self.total_before, self.total_after
        pct = f" ({100 * (b - a) / a:+.1f}%)" if a else ""
        s = (f"{metric_label(self.metric)}: {self.labels[0]} {fmt(self.metric, a)}, "
             f"{self.labels[1]} {fmt(self.metric, b)}{pct}")
        for lab, n in ((self.labels[0], self.unknown_before), (self.labels[1], self.unknown_after)):
            if n:
                s += f"; {lab}: {n} stacks with unknown {self.metric} left out"
        sig = self.table.loc[self.table["significant"], "name"].tolist()
        s += (f"; significant (outside both runs' 95% noise): {', '.join(map(str, sig[:8]))}"
              + (f" and {len(sig) - 8} more" if len(sig) > 8 else "") if sig else
              "; no function changed by more than both runs' 95% noise")
        for w in self.warnings:
            s += f"; not comparable: {w}"
        return s

    def __repr__(self) -> str:
        return f"<Comparison {self.summary()}; {len(self.table)} functions>"

    def diff_svg(self, width: int = 1120) -> str:
        """The differential icicle as static SVG: each box filled by its change, red slower and
        blue faster (``colours.change_colour``)."""
        d = self.diff_tree()
        if self.normalize:
            d = d.scaled(self.total_before, self.total_after)
        D = d.change
        lim = float(np.max(np.abs(D))) if len(D) and np.max(np.abs(D)) > 0 else 1.0
        t = T.Tree(d.parent, np.zeros(len(D), np.int64), d.depth, d.W, np.zeros(len(D)), np.zeros(len(D)),
                   np.zeros(len(D), np.int64))
        unit = hover_unit(self.metric)
        spec = "{:+.2%}" if self.normalize else "{:+.4g}" + unit
        tips = [f"{lab}\n{w}\n{self.labels[0]}: {a:.4g} · {self.labels[1]}: {b:.4g} · change {spec.format(x)}"
                f" · {'significant' if s else 'within noise'}"
                for lab, w, a, b, x, s in zip(d.labels, d.where, d.A, d.B, D, d.significant)]
        return I.draw(t, d.labels, tips, d.colours(lim), width=width,
                      css="profmagic-icicle profmagic-diff")

    def _parts(self) -> tuple[str, str, str]:
        sb, sa = (1.0, 1.0) if self.normalize else self.scales()
        head = f"<div class='profmagic-compare'><p><b>{esc(self.summary(), 1000)}</b></p></div>"
        pic = svg_row([(f"{esc(self.labels[0])}: {esc(fmt(self.metric, self.total_before))}",
                        svg(self.before, self.metric, 560, scale=sb)),
                       (f"{esc(self.labels[1])}: {esc(fmt(self.metric, self.total_after))}",
                        svg(self.after, self.metric, 560, scale=sa))])
        pic += (f"<div style='font:12px sans-serif;margin:6px 0 2px'><b>{esc(self.title())}</b><br>"
                f"{esc(self.note(self.diff_tree()))}</div>" + self.diff_svg())
        t = _in_words(self.shown_table().head(30))
        table = (f"<div class='profmagic-compare-table'><p>Per-function change ({esc(self.unit)}), largest change "
                 f"of self time first; callers with no self time on either side left out</p>{table_html(t)}</div>")
        return head, pic, table

    def _text(self) -> str:
        return repr(self) + "\n" + _in_words(self.shown_table().head(30)).to_string()


def _in_words(t):
    """The table as shown: ``significant`` says "significant" or "within noise"."""
    return t.assign(significant=np.where(t["significant"], "significant", "within noise"))


def _widths(parent: np.ndarray, depth: np.ndarray, ta: np.ndarray, tb: np.ndarray) -> tuple[np.ndarray, int]:
    """Drawn width per node: the after weight ``tb``, plus the before weight ``ta`` of subtrees
    that vanished (drawn too); and how many such subtrees there are."""
    gone = (tb <= 0) & (ta > 0)
    gone[0] = False
    gone_root = gone.copy()
    gone_root[1:] &= ~gone[parent[1:]]
    width = np.where(gone, ta, tb + T.subtree_sum(parent, depth, np.where(gone_root, ta, 0.0)))
    return width, int(gone_root.sum())


def compare(a: Profile, b: Profile, normalize: bool = False, metric: str | None = None, *,
            labels: tuple[str, str] = ("before", "after"), min_share: float = 0.0,
            max_nodes: int = T.MAX_NODES, boilerplate: bool = True) -> Comparison:
    """Compare ``a`` (before) with ``b`` (after). ``normalize`` divides each by its own total, so
    the deltas are changes of share. ``metric`` defaults to one both profiles know
    (``multi.common_metric``)."""
    if metric is None:
        metric = common_metric([a, b])
    for name, p in zip(labels, (a, b)):
        if metric not in p.metrics:
            raise ValueError(f"{name} has no {metric_label(metric)}; it has {', '.join(p.metrics)}")
    ra, rb = a.meta.get("rate"), b.meta.get("rate")
    if metric == "samples" and ra and rb and abs(ra - rb) > 0.1 * max(ra, rb):
        raise ValueError(f"sample counts at different rates are not comparable ({float(ra):.4g} Hz against "
                         f"{float(rb):.4g} Hz); compare a time metric instead")
    c = Comparison(a, b, metric, normalize, tuple(labels), min_share, max_nodes, boilerplate)
    for w in c.warnings:
        warnings.warn(f"{labels[0]} and {labels[1]} are not comparable: {w}", stacklevel=2)
    return c

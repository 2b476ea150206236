"""Icicle (speedscope's Left Heavy): root on top, children heaviest first, click to zoom.

One colour per function (``views.colours``), off-CPU time hatched, and a hover that gives the box's
numbers and its function's over all its calls, in wall, CPU and off-CPU time where measured.
Boilerplate above the first frame of user code is folded (``profmagic.boilerplate``) unless
``boilerplate=False``. Integer ids keep the payload small (path-string ids cost ~27x more); small
nodes fold into one "(other)" child per parent so a figure stays under ``tree.MAX_NODES`` nodes.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from .. import boilerplate as B
from .. import uncertainty as U
from ..model import MEMORY_METRICS, Profile
from . import colours as C
from . import esc, fmt, hover_unit, title
from . import tree as T
from .memo import functions, memo

RANGED_NODES = T.MAX_NODES // 2   # up to this many boxes, the live hover gives each box's 95% interval
CLOCK_LABELS = {"wall": "wall", "cpu": "CPU", "off_cpu": "off-CPU"}
HATCH_MIN = 0.05   # boxes at least this share off-CPU are hatched


def clocks(profile: Profile, metric: str) -> tuple[str, ...]:
    """The clocks a hover shows beside ``metric``: the other two of wall, CPU and off-CPU time,
    where the profile measured both wall and CPU."""
    if {"wall", "cpu"} <= set(profile.metrics) and metric in CLOCK_LABELS:
        return tuple(m for m in CLOCK_LABELS if m != metric)
    return ()


@dataclass
class Paint:
    """What the traces of one figure share: the profile, the metric, the function table, a colour
    per function id, and per function id its total and self over the view in ``metric`` and in
    each of ``clocks`` (``fn[m] = (total, self)``)."""
    profile: Profile
    metric: str
    ft: pd.DataFrame
    colours: np.ndarray
    clocks: tuple
    fn: dict
    thread: str | None = None

    @property
    def calls(self) -> bool:
        """Whether the hover gives a function's numbers over all its calls (not for a profile over
        ``tree.LARGE`` frames: the Sandwich tab has them)."""
        return bool(self.fn)

    @classmethod
    def of(cls, profile: Profile, metric: str, thread: str | None = None, colour: str = "function",
           colours: np.ndarray | None = None) -> "Paint":
        ft = T.function_table(profile)
        cl = clocks(profile, metric)
        fn = {}
        if not T.large(profile):
            f = functions(profile, metric, None if thread is None else T.thread_rows(profile, thread), thread)
            ids = f["id"].to_numpy()
            size = int(ft.index.max()) + 1 if len(ft) else 0
            for m in (metric,) + cl:
                tot, slf = (f["total"], f["self"]) if m == metric else (f[m], f["self_" + m])
                fn[m] = (_by_id(size, ids, tot), _by_id(size, ids, slf))
        return cls(profile, metric, ft, C.by_scheme(ft, colour) if colours is None else colours, cl, fn, thread)


def _by_id(size: int, ids: np.ndarray, values) -> np.ndarray:
    out = np.full(size, np.nan)
    out[ids] = np.asarray(values, dtype=np.float64)
    return out


def tree(profile: Profile, metric: str, thread: str | None, *, min_share: float = 0.0,
         max_nodes: int = T.MAX_NODES) -> tuple[T.Tree, list[str]]:
    """The pruned call tree of the view, with the hover's clocks on its nodes, and the notes its
    title must carry (nodes folded into (other), stacks of unknown weight)."""
    t, n_full, unknown = T.pruned(profile, metric, thread, clocks(profile, metric), min_share=min_share,
                                  max_nodes=max_nodes)
    notes = []
    if n_full is None:
        notes.append(f"call tree shown as {len(t) - 1:,} nodes: smaller ones folded into (other)")
    elif len(t) < n_full:
        notes.append(f"{n_full - 1:,} call-tree nodes shown as {len(t) - 1:,}: smaller ones folded into (other)")
    if unknown:
        notes.append(f"{unknown} stacks have no {metric} weight (the source could not measure it)")
    return t, notes


def ticks(t: T.Tree, metric: str) -> np.ndarray:
    """Node totals as integers (samples, bytes, allocations, or microseconds), summed from the leaves
    up so that no parent is smaller than its children's sum: plotly refuses a "total" tree that is,
    and float sums in another order could be, by an ulp."""
    scale = 1e6 if hover_unit(metric) == " s" else 1
    return T.subtree_sum(t.parent, t.depth, np.rint(t.self * scale).astype(np.int64))


def names(paint: Paint, t: T.Tree, root_label: str) -> tuple[list[str], list[str]]:
    """(label, file:line) per node, unescaped."""
    ft = paint.ft
    nm = ft["name"].to_dict()
    files = {i: "boilerplate (profmagic.boilerplate.RULES)" if f == B.FOLDED_FILE else T.short_file(f, ln)
             for i, f, ln in zip(ft.index, ft["file"], ft["line"])}
    labels, where = [], []
    for k, folded in zip(t.key.tolist(), t.folded.tolist()):
        if k >= 0:
            labels.append(str(nm[k]))
            where.append(files[k])
        else:
            labels.append(f"(other: {folded} smaller)" if k == T.OTHER else str(root_label))
            where.append("")
    return labels, where


def fills(paint: Paint, t: T.Tree) -> list[str]:
    real = t.key >= 0
    out = np.full(len(t), C.GREY, dtype=object)
    out[real] = paint.colours[t.key[real]]
    below = intervals(paint, t)[2]
    out[below] = [_faded(c) for c in out[below]]   # smaller than its own uncertainty
    return out.tolist()


def intervals(paint: Paint, t: T.Tree) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per node, the 95% interval of its total (``profmagic.uncertainty``) and whether the box is
    below the resolution (smaller than its own uncertainty)."""
    p, m, th = paint.profile, paint.metric, paint.thread
    if len(t) and t.key[0] != T.ROOT:   # a Sandwich's callers or callees: not call paths from the root
        return t.total, t.total, np.zeros(len(t), bool)
    f = T.flat(p)
    rows = None if th is None else T.thread_rows(p, th)
    halves = memo(p, ("path_halves", m, th), lambda: U.path_halves(p, m, f.fn, f.starts, f.lengths, rows))
    lo, hi = U.node_intervals(p, m, f.fn, f.starts, f.lengths, t.parent, t.key, t.depth, t.total, rows,
                              **({} if halves is None else {"halves": halves}))
    return lo, hi, U.below(t.total, lo, hi)


def _faded(colour: str) -> str:
    if not (isinstance(colour, str) and len(colour) == 7 and colour[0] == "#"):
        return colour
    return "#" + "".join(f"{int(colour[i:i + 2], 16) + (255 - int(colour[i:i + 2], 16)) * 2 // 3:02x}" for i in (1, 3, 5))


def interval_text(paint: Paint, lo: float, hi: float, below: bool) -> str:
    """" · 95%: lo–hi unit", and " · below resolution" where it is; nothing where the figure is exact."""
    if not hi > lo:
        return ""
    if paint.metric in MEMORY_METRICS:
        text = f"{fmt(paint.metric, lo)}–{fmt(paint.metric, hi)}"
    else:
        text = f"{lo:.3g}–{hi:.3g}{hover_unit(paint.metric)}"
    return "this call path, 95%: " + text + (" · below resolution" if below else "")


def off_share(paint: Paint, t: T.Tree) -> np.ndarray | None:
    """Per node, the share of its wall time spent off-CPU (None unless the view is in wall time
    and CPU time was measured)."""
    if paint.metric != "wall" or "off_cpu" not in t.extra:
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(t.total > 0, t.extra["off_cpu"][0] / t.total, 0.0)


def function_numbers(paint: Paint, t: T.Tree, m: str) -> tuple[np.ndarray, np.ndarray]:
    """Per node, the total and self of its function over all its calls in the view (``m``); the
    node's own numbers for the root and (other) nodes."""
    inst_total, inst_self = (t.total, t.self) if m == paint.metric else t.extra[m]
    tot, slf = inst_total.copy(), inst_self.copy()
    if not paint.calls:
        return tot, slf
    real = t.key >= 0
    ftot, fself = paint.fn[m]
    tot[real] = ftot[t.key[real]]
    slf[real] = fself[t.key[real]]
    return tot, slf


def trace(paint: Paint, t: T.Tree, root_label: str, flip: bool = False,
          domain: dict | None = None) -> go.Icicle:
    """A go.Icicle over a (pruned) tree. Labels, hovers and files are escaped."""
    labels, where = names(paint, t, root_label)
    unit = hover_unit(paint.metric)
    lo, hi, below = intervals(paint, t)
    shown = [c for c in paint.clocks if c in t.extra]
    # Numbers only, so plotly sends them as one typed array (4 bytes a number, no list per node):
    # 0 function id (the report's "show in Sandwich" on click; <0 root/(other)), 1 total, 2 self,
    # 3 samples, 4-5 total and self of the function over all its calls, then per clock shown
    # its total for this box and for all calls of the function.
    # The box's 95% interval (profmagic.uncertainty) as two more numbers, where the figure stays near
    # its 1 MB budget (tree.MAX_NODES); a larger tree's hover sends readers to the Table tab's intervals.
    ranged = U.kind(paint.profile, paint.metric) != U.EXACT and len(t) <= RANGED_NODES and bool((hi > lo).any())
    custom = np.empty((len(t), 6 + 2 * len(shown) + 2 * ranged), dtype=np.float32)
    custom[:, 0] = t.key
    custom[:, 1] = t.total
    custom[:, 2] = t.self
    custom[:, 3] = t.samples
    custom[:, 4], custom[:, 5] = function_numbers(paint, t, paint.metric)
    for i, c in enumerate(shown):
        custom[:, 6 + 2 * i] = t.extra[c][0]
        custom[:, 7 + 2 * i] = function_numbers(paint, t, c)[0]
    if ranged:
        custom[:, -2], custom[:, -1] = lo, hi
    marker = dict(colors=fills(paint, t), line=dict(width=0.5, color="#fff"))
    share = off_share(paint, t)
    if share is not None:
        # Four densities: each distinct pattern is an SVG definition the browser draws.
        marker["pattern"] = dict(shape=np.where(share >= HATCH_MIN, "/", "").tolist(),
                                 solidity=0.15 + 0.5 * np.ceil(np.clip(share, 0, 1) * 4) / 4, fillmode="overlay",
                                 fgcolor=C.HATCH, size=8)
    return go.Icicle(
        ids=np.arange(len(t)),
        parents=[""] + t.parent[1:].tolist(),
        values=ticks(t, paint.metric),
        branchvalues="total",
        labels=[esc(x) for x in labels],
        hovertext=[esc(w, 80) + (" · below resolution" if b else "") for w, b in zip(where, below.tolist())],
        customdata=custom,
        hovertemplate=_hover(paint.profile.label(paint.metric), paint.metric, unit, shown, paint.calls, ranged),
        marker=marker,
        tiling=dict(orientation="v", pad=0, **({"flip": "y"} if flip else {})),
        sort=True,
        textinfo="label",
        maxdepth=-1,
        **({"domain": domain} if domain else {}),
        _validate=False,   # built from checked arrays; plotly's check costs ~1 s on 8,000 nodes
    )


def _hover(label: str, metric: str, unit: str, shown: list[str], calls: bool = True, ranged: bool = False) -> str:
    def clock_line(first: int) -> str:
        parts = [f"{CLOCK_LABELS[c]} %{{customdata[{first + 2 * i}]:.4~g}} s" for i, c in enumerate(shown)]
        return ("&nbsp;&nbsp;" + " · ".join(parts) + "<br>") if parts else ""
    all_calls = (f"all its calls: %{{customdata[4]:.4~g}}{unit}, self %{{customdata[5]:.4~g}}{unit}<br>"
                 + clock_line(7)) if calls else "all its calls: see Sandwich (a profile this large)<br>"
    return ("<b>%{label}</b><br>%{hovertext}<br>"
            f"this call path: %{{customdata[1]:.4~g}}{unit} (%{{percentRoot:.1%}} of the view), "
            f"self %{{customdata[2]:.4~g}}{unit}<br>"
            + (f"&nbsp;&nbsp;95%: %{{customdata[{6 + 2 * len(shown)}]:.3~g}}–%{{customdata[{7 + 2 * len(shown)}]:.3~g}}"
               f"{unit}<br>" if ranged else "")
            + clock_line(6) + all_calls +
            ("" if metric in MEMORY_METRICS else "%{customdata[3]:,} samples · ")   # memory weighs no samples
            + f"{esc(label)}<extra></extra>")


def legend(paint: Paint, colour: str) -> str:
    """The line under the icicle: colour families (or kinds) and what hatching means."""
    if colour == "kind":
        kinds = [k for k in C.KIND_COLOURS if (paint.ft["kind"].astype(str) == k).any()]
        out = " ".join(f"<span style='color:{C.KIND_COLOURS[k]}'>■</span> {k}" for k in kinds)
    elif colour == "function":
        out = "one colour per function · " + C.families_legend(paint.ft)
    else:
        out = "colour: module"
    if paint.metric == "wall" and "off_cpu" in paint.clocks:
        out += " · hatched: off-CPU (denser = more of the box waiting)"
    return out


def figure(profile: Profile, metric: str | None = None, thread: str | None = None, *,
           min_share: float = 0.0, max_nodes: int = T.MAX_NODES, colour: str = "function",
           height: int | None = None, boilerplate: bool = True) -> go.Figure:
    """The icicle of ``thread`` (None: all threads merged) in ``metric``.

    Nodes under ``min_share`` of the view's total (0.01 = 1 %), and as many more as needed to stay
    within ``max_nodes``, fold into one "(other)" node per parent; totals stay exact.
    """
    metric = metric or profile.metric
    p = B.fold(profile) if boilerplate else profile
    t, notes = tree(p, metric, thread, min_share=min_share, max_nodes=max_nodes)
    if boilerplate and B.folded_frames(profile):
        notes.append(f"{B.folded_frames(profile):,} boilerplate frames folded (boilerplate=False shows them)")
    paint = Paint.of(p, metric, thread, colour)
    fig = go.Figure(trace(paint, t, "all threads" if thread is None else str(thread)))
    depth = int(t.depth.max()) + 1 if len(t) else 1
    fig.update_layout(
        title=dict(text=title(profile, metric, "Icicle", thread, " · ".join(notes)), x=0.01,
                   font=dict(size=13)),
        margin=dict(l=8, r=8, t=80, b=24),
        height=height or int(min(900, max(360, 110 + 22 * depth))),
        uniformtext=dict(minsize=9, mode="hide"),
    )
    fig.add_annotation(text=legend(paint, colour), x=0, y=0, xref="paper", yref="paper", yanchor="top",
                       showarrow=False, font=dict(size=11), yshift=-4)
    if t.total[0] == 0:
        fig.add_annotation(text=f"no {esc(profile.label(metric))} in this view", showarrow=False,
                           x=0.5, y=0.5, xref="paper", yref="paper")
    return fig


def layout(t: T.Tree) -> tuple[np.ndarray, np.ndarray]:
    """(x, width) of every node as shares of the root, children heaviest first from the left."""
    root = float(t.total[0]) or 1.0
    x = np.zeros(len(t))
    width = t.total / root
    order = np.lexsort((-t.total, t.parent))  # by parent, then heaviest first
    par = t.parent[order]
    w = width[order]
    csum = np.cumsum(w)
    first = np.r_[True, par[1:] != par[:-1]]
    start = np.maximum.accumulate(np.where(first, np.arange(len(w)), 0))
    offset = csum - w - (csum[start] - w[start])  # width of earlier siblings
    off = np.zeros(len(t))
    off[order] = offset
    for lvl in T.levels(t.depth)[1:]:
        x[lvl] = x[t.parent[lvl]] + off[lvl]
    return x, width


_HATCH_DEF = ("<defs><pattern id='profmagic-hatch' width='6' height='6' patternUnits='userSpaceOnUse' "
              "patternTransform='rotate(45)'><rect width='6' height='6' fill='rgba(255,255,255,0.35)'/>"
              "<line x1='0' y1='0' x2='0' y2='6' stroke='rgba(20,20,20,0.6)' stroke-width='2.5'/>"
              "</pattern></defs>")


def draw(t: T.Tree, labels: list[str], tips: list[str], colours: list[str], *, width: int = 960,
         row: int = 18, scale: float = 1.0, hatch: np.ndarray | None = None, rest: str | None = None,
         css: str = "profmagic-icicle") -> str:
    """A static, self-contained SVG of a tree: one rect per node (``colours``), its label where it
    fits and ``tips`` as hover titles; the root spans ``scale`` of ``width``, and ``rest`` labels
    the dashed box over the remainder. ``hatch``: per node, the share of the box drawn hatched from
    its right end (off-CPU time). Every string escaped."""
    x, w = layout(t)
    height = (int(t.depth.max()) + 1) * row + 2 if len(t) else row
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="{css}" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">']
    if hatch is not None:
        out.append(_HATCH_DEF)
    span = width * scale
    if rest and width - span >= 1:
        out.append(f'<g class="profmagic-rest"><title>{esc(rest, 300)}</title><rect x="{span + 1:.1f}" y="0" '
                   f'width="{width - span - 1.5:.1f}" height="{height - 2}" fill="#f4f4f4" stroke="#999" '
                   f'stroke-dasharray="4 3"/><text x="{span + 5:.1f}" y="{row - 5}" fill="#444">'
                   f'{esc(rest[:max(int((width - span - 8) / 6.5), 0)], None)}</text></g>')
    for i in np.argsort(t.depth, kind="stable").tolist():
        px, pw = x[i] * span, w[i] * span
        if pw < 0.5:
            continue
        y = int(t.depth[i]) * row
        fill = colours[i]
        out.append(f'<g><title>{esc(tips[i], 800)}</title><rect x="{px:.1f}" y="{y}" '
                   f'width="{max(pw - 0.5, 0.5):.1f}" height="{row - 1}" fill="{fill}" rx="1"/>')
        if hatch is not None and hatch[i] >= HATCH_MIN:
            hw = max(pw - 0.5, 0.5) * min(float(hatch[i]), 1.0)
            out.append(f'<rect class="profmagic-offcpu" x="{px + max(pw - 0.5, 0.5) - hw:.1f}" y="{y}" '
                       f'width="{hw:.1f}" height="{row - 1}" fill="url(#profmagic-hatch)"/>')
        chars = int((pw - 4) / 6.5)
        if chars >= 3:
            name = labels[i]
            label = name if len(name) <= chars else name[:chars - 1] + "…"
            out.append(f'<text x="{px + 2:.1f}" y="{y + row - 5}" fill="{C.text_colour(fill)}">'
                       f'{esc(label, None)}</text>')
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)


def svg(profile: Profile, metric: str | None = None, thread: str | None = None, *, width: int = 960,
        row: int = 18, min_share: float = 0.002, max_nodes: int = 1500, colour: str = "function",
        scale: float = 1.0, rest: str | None = None, boilerplate: bool = True) -> str:
    """A static, self-contained SVG icicle (no script): hover titles, every string escaped, off-CPU
    hatched. ``scale`` < 1 draws the root narrower than ``width`` (one scale for two panels), with
    ``rest`` labelling the remainder. For outputs seen without a live kernel (nbconvert, GitHub)."""
    metric = metric or profile.metric
    p = B.fold(profile) if boilerplate else profile
    # From the live figure's tree (built once): pruning a pruned tree further gives the same nodes.
    t = T.prune(tree(p, metric, thread)[0], min_share=min_share, max_nodes=max_nodes)
    paint = Paint.of(p, metric, thread, colour)
    labels, where = names(paint, t, "all threads" if thread is None else str(thread))
    return draw(t, labels, tips(paint, t, labels, where), fills(paint, t), width=width, row=row, scale=scale,
                hatch=off_share(paint, t), rest=rest) + cut_note(p, metric, thread, t)


def cut_note(profile: Profile, metric: str, thread: str | None, t: T.Tree) -> str:
    """A line under a static icicle saying how many call-tree nodes were folded into (other), or
    nothing when none was."""
    n_full = T.pruned(profile, metric, thread, clocks(profile, metric))[1]   # the live figure's, built once
    if n_full is None and (t.key == T.OTHER).any():
        text = f"call tree shown as {len(t) - 1:,} nodes: smaller ones folded into (other)"
    elif n_full is not None and len(t) < n_full:
        text = f"{n_full - 1:,} call-tree nodes shown as {len(t) - 1:,}: smaller ones folded into (other)"
    else:
        return ""
    return f"<div class='profmagic-cut' style='font:11px sans-serif;color:#555'>{esc(text)}</div>"


def tips(paint: Paint, t: T.Tree, labels: list[str], where: list[str]) -> list[str]:
    """The static icicle's hover text per node: the same numbers as the live hover."""
    root = float(t.total[0]) or 1.0
    unit = paint.profile.label(paint.metric)
    counted = paint.metric not in MEMORY_METRICS  # memory weights are not sample counts
    num = (lambda v: f"{v:.4g}") if counted else (lambda v: fmt(paint.metric, v))
    shown = [c for c in paint.clocks if c in t.extra]
    ftot, fself = function_numbers(paint, t, paint.metric)
    clock_inst = {c: t.extra[c][0] for c in shown}
    clock_fn = {c: function_numbers(paint, t, c)[0] for c in shown}
    lo, hi, below = intervals(paint, t)
    out = []
    for i in range(len(t)):
        lines = [labels[i], where[i],
                 f"this call path: {num(t.total[i])} ({100 * t.total[i] / root:.1f}%), self {num(t.self[i])}"]
        if shown:
            lines.append("  " + " · ".join(f"{CLOCK_LABELS[c]} {clock_inst[c][i]:.4g} s" for c in shown))
        lines.append(f"all its calls: {num(ftot[i])}, self {num(fself[i])}" if paint.calls else
                     "all its calls: see Sandwich (a profile this large)")
        if shown and paint.calls:
            lines.append("  " + " · ".join(f"{CLOCK_LABELS[c]} {clock_fn[c][i]:.4g} s" for c in shown))
        lines.append(interval_text(paint, lo[i], hi[i], below[i]))
        lines.append((f"{int(t.samples[i]):,} samples · " if counted else "") + unit)
        out.append("\n".join(x for x in lines if x))
    return out

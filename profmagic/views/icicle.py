"""Icicle (speedscope's Left Heavy): root on top, children heaviest first, click to zoom.

Integer ids keep the payload small (path-string ids cost ~27x more); small nodes fold into one
"(other)" child per parent so a figure stays under ``tree.MAX_NODES`` nodes.
"""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from ..model import MEMORY_METRICS, Profile
from . import GREY, KIND_COLOURS, PALETTE, esc, fmt, hover_unit, metric_label, title
from . import tree as T

KINDS = list(KIND_COLOURS)


def _colours(t: T.Tree, ft, colour: str):
    """Numeric colour codes plus a stepped colourscale: 1-2 bytes a node instead of a hex string."""
    if colour == "module":
        mods = ft["module"].astype(str)
        order = mods.value_counts().index.tolist()
        code_of = {m: i % len(PALETTE) for i, m in enumerate(order)}
        fcode = np.array([code_of[m] for m in mods], np.int64)
        palette = PALETTE
    elif colour == "kind":
        fcode = np.array([KINDS.index(str(k)) if str(k) in KINDS else 3 for k in ft["kind"]], np.int64)
        palette = list(KIND_COLOURS.values())
    else:
        raise ValueError(f"colour must be 'kind' or 'module', not {colour!r}")
    grey = len(palette)
    pos = np.full(int(ft.index.max()) + 1 if len(ft) else 0, grey, np.int64)
    pos[ft.index.to_numpy()] = fcode
    real = t.key >= 0
    codes = np.full(len(t), grey, np.int64)
    codes[real] = pos[t.key[real]]
    colours = palette + [GREY]
    n = len(colours)
    scale = []
    for i, c in enumerate(colours):
        scale += [[i / n, c], [(i + 1) / n, c]]
    return codes, scale, n, palette


def _round(a: np.ndarray, digits: int = 4) -> list:
    """Shorter JSON: values rounded to ``digits`` significant digits."""
    a = np.asarray(a, dtype=np.float64)
    if np.all(a == np.round(a)):
        return a.astype(np.int64).tolist()
    return [float(f"{x:.{digits}g}") for x in a.tolist()]


def ticks(t: T.Tree, metric: str) -> list[int]:
    """Node totals as integers (samples, bytes, allocations, or microseconds), summed from the leaves
    up so that no parent is smaller than its children's sum: plotly refuses a "total" tree that is,
    and float sums in another order could be, by an ulp."""
    scale = 1e6 if hover_unit(metric) == " s" else 1
    v = np.rint(t.self * scale).astype(np.int64)
    for d in range(int(t.depth.max()) if len(t) > 1 else 0, 0, -1):
        lvl = np.flatnonzero(t.depth == d)
        np.add.at(v, t.parent[lvl], v[lvl])
    return v.tolist()


def trace(profile: Profile, t: T.Tree, metric: str, root_label: str, colour: str = "kind",
          ft=None, flip: bool = False, domain: dict | None = None) -> go.Icicle:
    """A go.Icicle over a (pruned) tree. Labels, hovers and files are escaped."""
    ft = T.function_table(profile) if ft is None else ft
    names = ft["name"].to_dict()
    files = {i: T.short_file(f, l) for i, f, l in zip(ft.index, ft["file"], ft["line"])}
    labels, where = [], []
    for k, folded in zip(t.key.tolist(), t.folded.tolist()):
        if k >= 0:
            labels.append(esc(names[k]))
            where.append(esc(files[k], 80))
        elif k == T.OTHER:
            labels.append(f"(other: {folded} smaller)")
            where.append("")
        else:
            labels.append(esc(root_label))
            where.append("")
    root = float(t.total[0]) or 1.0
    codes, scale, n, _ = _colours(t, ft, colour)
    unit = hover_unit(metric)
    counted = "" if metric in MEMORY_METRICS else "%{customdata[4]:,} samples · "
    custom = np.empty((len(t), 6), dtype=object)
    custom[:, 0] = where
    custom[:, 1] = _round(t.total)
    custom[:, 2] = _round(t.self)
    custom[:, 3] = _round(t.self / root, 3)
    custom[:, 4] = _round(t.samples)
    custom[:, 5] = t.key.tolist()  # function id (report: "show in Sandwich" on click); <0 root/(other)
    hover = ("<b>%{label}</b><br>%{customdata[0]}<br>"
             f"total %{{customdata[1]:.4~g}}{unit} (%{{percentRoot:.1%}} of the view)<br>"
             f"self %{{customdata[2]:.4~g}}{unit} (%{{customdata[3]:.1%}})<br>"
             f"{counted}{esc(profile.label(metric))}<extra></extra>")
    kw = {}
    if domain:
        kw["domain"] = domain
    return go.Icicle(
        ids=list(range(len(t))),
        parents=[""] + t.parent[1:].tolist(),
        values=ticks(t, metric),
        branchvalues="total",
        labels=labels,
        customdata=custom,
        hovertemplate=hover,
        marker=dict(colors=codes.tolist(), colorscale=scale, cmin=0, cmax=n, showscale=False),
        tiling=dict(orientation="v", flip="y" if flip else "x", pad=0),
        sort=True,
        textinfo="label",
        maxdepth=-1,
        **kw,
    )


def figure(profile: Profile, metric: str | None = None, thread: str | None = None, *,
           min_share: float = 0.0, max_nodes: int = T.MAX_NODES, colour: str = "kind",
           height: int | None = None) -> go.Figure:
    """The icicle of ``thread`` (None: all threads merged) in ``metric``.

    Nodes under ``min_share`` of the view's total (0.01 = 1 %), and as many more as needed to stay
    within ``max_nodes``, fold into one "(other)" node per parent; totals stay exact.
    """
    metric = metric or profile.metric
    full, unknown = T.from_profile(profile, metric, thread)
    t = T.prune(full, min_share=min_share, max_nodes=max_nodes)
    notes = []
    if len(t) < len(full):
        notes.append(f"{len(full) - 1:,} call-tree nodes shown as {len(t) - 1:,}: "
                     "smaller ones folded into (other)")
    if unknown:
        notes.append(f"{unknown} stacks have no {metric} weight (the source could not measure it)")
    ft = T.function_table(profile)
    root_label = "all threads" if thread is None else str(thread)
    fig = go.Figure(trace(profile, t, metric, root_label, colour, ft))
    kinds = [k for k in KINDS if (ft["kind"].astype(str) == k).any()] if colour == "kind" else []
    legend = " ".join(f"<span style='color:{KIND_COLOURS[k]}'>■</span> {k}" for k in kinds)
    depth = int(t.depth.max()) + 1 if len(t) else 1
    fig.update_layout(
        title=dict(text=title(profile, metric, "Icicle", thread, " · ".join(notes)), x=0.01,
                   font=dict(size=13)),
        margin=dict(l=8, r=8, t=80, b=24 if legend else 8),
        height=height or int(min(900, max(360, 110 + 22 * depth))),
        uniformtext=dict(minsize=9, mode="hide"),
    )
    if legend:
        fig.add_annotation(text=legend, x=0, y=0, xref="paper", yref="paper", yanchor="top",
                           showarrow=False, font=dict(size=11), yshift=-4)
    if t.total[0] == 0:
        fig.add_annotation(text=f"no {esc(metric_label(metric))} in this view", showarrow=False,
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
    for d in range(1, int(t.depth.max()) + 1 if len(t) > 1 else 1):
        lvl = np.flatnonzero(t.depth == d)
        x[lvl] = x[t.parent[lvl]] + off[lvl]
    return x, width


def svg(profile: Profile, metric: str | None = None, thread: str | None = None, *, width: int = 960,
        row: int = 18, min_share: float = 0.002, max_nodes: int = 1500, colour: str = "kind") -> str:
    """A static, self-contained SVG icicle (no script): hover titles, every string escaped.
    For outputs seen without a live kernel (nbconvert, GitHub, nbviewer)."""
    metric = metric or profile.metric
    full, _ = T.from_profile(profile, metric, thread)
    t = T.prune(full, min_share=min_share, max_nodes=max_nodes)
    ft = T.function_table(profile)
    codes, _, _, palette = _colours(t, ft, colour)
    colours = palette + [GREY]
    x, w = layout(t)
    names = ft["name"].to_dict()
    files = {i: T.short_file(f, l) for i, f, l in zip(ft.index, ft["file"], ft["line"])}
    root = float(t.total[0]) or 1.0
    unit = profile.label(metric)
    counted = metric not in MEMORY_METRICS  # memory weights are not sample counts
    num = (lambda v: f"{v:.4g}") if counted else (lambda v: fmt(metric, v))
    height = (int(t.depth.max()) + 1) * row + 2
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="profmagic-icicle" width="{width}" '
           f'height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">']
    for i in np.argsort(t.depth, kind="stable").tolist():
        k = int(t.key[i])
        if k >= 0:
            name, where = str(names[k]), files[k]
        elif k == T.OTHER:
            name, where = f"(other: {int(t.folded[i])} smaller)", ""
        else:
            name, where = ("all threads" if thread is None else str(thread)), ""
        px, pw = x[i] * width, w[i] * width
        if pw < 0.5:
            continue
        tip = (f"{name}\n{where}\ntotal {num(t.total[i])} ({100 * t.total[i] / root:.1f}%) · "
               f"self {num(t.self[i])} ({100 * t.self[i] / root:.1f}%) · "
               + (f"{int(t.samples[i]):,} samples · " if counted else "") + unit)
        y = int(t.depth[i]) * row
        out.append(f'<g><title>{esc(tip, 600)}</title><rect x="{px:.1f}" y="{y}" width="{max(pw - 0.5, 0.5):.1f}" '
                   f'height="{row - 1}" fill="{colours[codes[i]]}" rx="1"/>')
        chars = int((pw - 4) / 6.5)
        if chars >= 3:
            label = name if len(name) <= chars else name[:chars - 1] + "…"
            out.append(f'<text x="{px + 2:.1f}" y="{y + row - 5}" fill="#fff">{esc(label, None)}</text>')
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)

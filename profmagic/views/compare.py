"""Profiles side by side: before/after (differential icicle), CPU vs wall of one run, and backends.

- ``compare(before, after)``: the shape from ``after``, coloured by the change per frame (red slower,
  blue faster, as FlameGraph's difffolded); frames found in ``before`` only keep their ``before``
  width, so nothing is dropped. A per-function delta table beside it.
- ``cpu_wall(profile)``: CPU and wall icicles side by side, one colour per function in both, a table
  sorted by off-CPU time, and a one-line verdict.
- ``side_by_side({backend: profile})``: one icicle per backend and a table of top functions.

Trees come from ``views.tree``. Nodes merge by function (name, file); threads are merged.
Unknown (NaN) weights are counted and said, never drawn as zeros.
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from ..model import MEMORY_METRICS, Profile
from . import GREY, PALETTE, esc, fmt, hover_unit, metric_label
from . import icicle as I
from . import tree as T

# Figures go out as plotly's own mime type, drawn by the renderer the front end already has (no
# plotly.js in the output, no network); each carries a static SVG twin as text/html for viewers
# without it (nbconvert, GitHub), as report.py does.
PLOTLY_MIME = "application/vnd.plotly.v1+json"
UNITS = {"samples": "samples", "bytes": "bytes", "allocated": "bytes", "allocations": "allocations"}


# ----------------------------------------------------------------------------------------------
# shared helpers
# ----------------------------------------------------------------------------------------------
def _svg_row(panels: list[tuple[str, str]]) -> str:
    """Static icicles side by side: (escaped caption, svg or escaped message) each; no script."""
    cells = "".join(f"<div style='flex:1 1 0;min-width:0;overflow-x:auto'><div style='font:12px sans-serif;"
                    f"margin:2px 0'><b>{cap}</b></div>{body}</div>" for cap, body in panels)
    return f"<div class='profmagic-svg-row' style='display:flex;gap:8px'>{cells}</div>"


def _svg(p: Profile, metric: str, width: int) -> str:
    try:
        return I.svg(p, metric, width=width)
    except Exception as e:  # the table and verdict still help; say what failed
        return f"<p>(icicle unavailable: {esc(e, 300)})</p>"


def _display(parts: list[dict]) -> None:
    """Each part as its own output: HTML pieces, and figures as plotly mime + static twin."""
    from IPython.display import display
    for bundle in parts:
        display(bundle, raw=True)


def _figure_bundle(fig: go.Figure, static_html: str) -> dict:
    return {PLOTLY_MIME: json.loads(fig.to_json()), "text/html": static_html, "text/plain": "<plotly figure>"}


def _table_html(df: pd.DataFrame, floatfmt: str = "{:.4g}") -> str:
    # pandas escapes cell text (escape=True); NaN means "unknown", never zero.
    return df.to_html(index=False, na_rep="unknown", escape=True, border=0,
                      float_format=lambda v: floatfmt.format(v), classes="profmagic-table")


def _common_metric(profiles, metric: str | None) -> str:
    if metric is not None:
        for name, p in profiles:
            if metric not in p.metrics:
                raise ValueError(f"{name} has no {metric_label(metric)}; it has {', '.join(p.metrics)}")
        return metric
    first = profiles[0][1]
    for m in [first.metric, "wall", "cpu", "samples"]:
        if all(m in p.metrics for _, p in profiles):
            return m
    return "samples"


class _Display:
    """Shared display of the comparison views: header, figure (plotly mime + static SVG twin) and
    table as separate outputs; ``_parts()`` gives their HTML, ``_text()`` the plain-text form."""

    _figure = None

    @property
    def figure(self) -> go.Figure:
        """The plotly figure, built on first use by the subclass's ``_make_figure()``."""
        if self._figure is None:
            self._figure = self._make_figure()
        return self._figure

    def outputs(self) -> list[dict]:
        head, pic, table = self._parts()
        return ([{"text/html": head}] if head else []) + [_figure_bundle(self.figure, pic), {"text/html": table}]

    def _ipython_display_(self):
        _display(self.outputs())

    def _repr_mimebundle_(self, include=None, exclude=None):
        head, pic, table = self._parts()
        return {"text/plain": self._text(), "text/html": head + pic + table}


class Union:
    """Call trees of several profiles over one node set: function keys are (name, file)."""

    def __init__(self, profiles: list[Profile], weights: list[np.ndarray]):
        keymap: dict[tuple, int] = {}
        self.names: list[str] = []
        self.files: list[str] = []
        self.lines: list = []
        rows, keys, depths, offs = [], [], [], 0
        for p in profiles:
            ft = T.function_table(p)
            local = np.full(int(ft.index.max()) + 1 if len(ft) else 0, -1, np.int64)
            for fid, name, file, line in zip(ft.index, ft["name"], ft["file"], ft["line"]):
                k = (name, file)
                if k not in keymap:
                    keymap[k] = len(self.names)
                    self.names.append(name)
                    self.files.append(file)
                    self.lines.append(line)
                local[fid] = keymap[k]
            r, fn, d = T.entries(p)
            rows.append(r + offs)
            keys.append(local[fn])
            depths.append(d)
            offs += len(p.stacks)
        self.offsets = np.cumsum([0] + [len(p.stacks) for p in profiles])
        rows_a, keys_a, depth_a = (np.concatenate(x) if x else np.zeros(0, np.int64)
                                   for x in (rows, keys, depths))
        self.trees: list[T.Tree] = []
        for i, (p, w) in enumerate(zip(profiles, weights)):
            full = np.zeros(offs)
            cnt = np.zeros(offs)
            full[self.offsets[i]:self.offsets[i + 1]] = w
            cnt[self.offsets[i]:self.offsets[i + 1]] = p.stacks["samples"].to_numpy(dtype=np.float64)
            # The node numbering depends only on (rows, keys, depth): every tree shares it.
            self.trees.append(T.build(rows_a, keys_a, depth_a, full, cnt))
        t = self.trees[0]
        self.parent, self.key, self.depth = t.parent, t.key, t.depth

    def label(self, node: int, root: str) -> str:
        k = int(self.key[node])
        return esc(root) if k < 0 else esc(self.names[k])

    def where(self, node: int) -> str:
        k = int(self.key[node])
        return "" if k < 0 else esc(T.short_file(self.files[k], self.lines[k]), 80)


def _subtree_sum(parent: np.ndarray, depth: np.ndarray, values: np.ndarray) -> np.ndarray:
    acc = values.astype(np.float64).copy()
    for d in range(int(depth.max()) if len(depth) else 0, 0, -1):
        lvl = np.flatnonzero(depth == d)
        np.add.at(acc, parent[lvl], acc[lvl])
    return acc


def _keep(parent, depth, width, thr, max_nodes):
    """Nodes kept: width >= thr, closed upwards, and at most ``max_nodes`` (the widest)."""
    keep = (width >= thr) & (width > 0)
    keep[0] = True
    if keep.sum() > max_nodes:
        cut = np.sort(width[keep])[::-1][max_nodes - 1]
        keep &= width >= cut
        keep[0] = True
    for d in range(1, int(depth.max()) + 1 if len(depth) > 1 else 1):
        lvl = depth == d
        keep[lvl] &= keep[parent[lvl]]
    return keep


# ----------------------------------------------------------------------------------------------
# compare(before, after)
# ----------------------------------------------------------------------------------------------
class Comparison(_Display):
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
        self.unit = "share of total" if normalize else UNITS.get(metric, "s")
        self.table = self._table()
        self._min_share, self._max_nodes = min_share, max_nodes
        self._figure = None

    # -- table ------------------------------------------------------------------------------------
    def _functions(self, p: Profile, w: np.ndarray) -> pd.DataFrame:
        # functions() reads a named metric column: the (maybe normalised) weights go in a copy.
        f = p.replace(stacks=p.stacks.assign(wall=w), metric="wall").functions("wall")
        return f[["name", "file", "self", "total"]]

    def _table(self) -> pd.DataFrame:
        a = self._functions(self.before, self._wa)
        b = self._functions(self.after, self._wb)
        m = a.merge(b, on=["name", "file"], how="outer", suffixes=("_before", "_after"), indicator=True)
        m["side"] = m["_merge"].map({"both": "both", "left_only": f"only {self.labels[0]}",
                                     "right_only": f"only {self.labels[1]}"}).astype(object)
        for c in ("self_before", "self_after", "total_before", "total_after"):
            m[c] = m[c].fillna(0.0).astype(np.float64)  # absent on one side: measured, and zero
        m["delta_total"] = m["total_after"] - m["total_before"]
        m["delta_self"] = m["self_after"] - m["self_before"]
        with np.errstate(divide="ignore", invalid="ignore"):
            m["change_pct"] = np.where(m["total_before"] > 0,
                                       100.0 * m["delta_total"] / m["total_before"], np.nan)
        m = m.drop(columns="_merge")
        m = m.assign(_abs=m["delta_total"].abs()).sort_values(
            ["_abs", "total_after"], ascending=False, kind="stable").drop(columns="_abs")
        cols = ["name", "file", "total_before", "total_after", "delta_total", "change_pct",
                "self_before", "self_after", "delta_self", "side"]
        return m[cols].reset_index(drop=True)

    def _make_figure(self) -> go.Figure:
        u = Union([self.before, self.after], [self._wa, self._wb])
        ta, tb = u.trees[0].total, u.trees[1].total
        parent, depth = u.parent, u.depth
        gone = (tb <= 0) & (ta > 0)
        gone[0] = False
        gone_root = gone.copy()
        gone_root[1:] &= ~gone[parent[1:]]
        # Width: the after weight, plus the before weight of subtrees that vanished (drawn too).
        width = np.where(gone, ta, tb + _subtree_sum(parent, depth, np.where(gone_root, ta, 0.0)))
        keep = _keep(parent, depth, width, self._min_share * width[0], self._max_nodes)
        old = np.flatnonzero(keep)
        new_id = np.full(len(keep), -1, np.int64)
        new_id[old] = np.arange(len(old))
        dropped = np.flatnonzero(~keep & (width > 0))
        dropped = dropped[keep[parent[dropped]]]  # top of each folded subtree
        ops, inv = np.unique(parent[dropped], return_inverse=True)
        o_w = np.bincount(inv, weights=width[dropped], minlength=len(ops))
        o_a = np.bincount(inv, weights=ta[dropped], minlength=len(ops))
        o_b = np.bincount(inv, weights=tb[dropped], minlength=len(ops))
        n_old = len(old)
        parents = [""] + [int(new_id[p]) for p in parent[old[1:]]] + [int(new_id[p]) for p in ops]
        labels = [u.label(int(n), "all threads") for n in old] + \
                 [f"(other: {c} smaller)" for c in np.bincount(inv, minlength=len(ops))]
        where = [u.where(int(n)) for n in old] + [""] * len(ops)
        A = np.concatenate([ta[old], o_a])
        B = np.concatenate([tb[old], o_b])
        W = np.concatenate([width[old], o_w])
        D = B - A
        status = np.where(A <= 0, f"only in {self.labels[1]}",
                          np.where(B <= 0, f"only in {self.labels[0]}", "in both"))
        status = [esc(s) for s in status]
        lim = float(np.max(np.abs(D))) if len(D) and np.max(np.abs(D)) > 0 else 1.0
        fmt = ".2%" if self.normalize else ".4~g"
        unit = "" if self.normalize else hover_unit(self.metric)
        custom = np.empty((len(W), 5), dtype=object)
        custom[:, 0] = where
        custom[:, 1] = A.tolist()
        custom[:, 2] = B.tolist()
        custom[:, 3] = D.tolist()
        custom[:, 4] = status
        hover = ("<b>%{label}</b><br>%{customdata[0]}<br>"
                 f"{esc(self.labels[0])}: %{{customdata[1]:{fmt}}}{unit}<br>"
                 f"{esc(self.labels[1])}: %{{customdata[2]:{fmt}}}{unit}<br>"
                 f"change: %{{customdata[3]:+{fmt}}}{unit} · %{{customdata[4]}}<extra></extra>")
        fig = go.Figure(go.Icicle(
            ids=list(range(len(W))), parents=parents, values=W.tolist(), branchvalues="total",
            labels=labels, customdata=custom, hovertemplate=hover, sort=True, textinfo="label",
            marker=dict(colors=D.tolist(), colorscale="RdBu_r", cmid=0, cmin=-lim, cmax=lim,
                        showscale=True, colorbar=dict(title=dict(text="change"), thickness=12)),
            tiling=dict(orientation="v", flip="x", pad=0)))
        n_gone = int(gone_root.sum())
        note = (f"width from {self.labels[1]}; {n_gone} subtree(s) found only in {self.labels[0]} "
                f"keep their {self.labels[0]} width" if n_gone else f"width from {self.labels[1]}")
        if n_old < len(keep):
            note += f"; {len(keep) - n_old:,} small nodes folded into (other)"
        fig.update_layout(
            title=dict(text=f"<b>{esc(self.title())}</b><br><span style='font-size:11px'>"
                            f"{esc(note)}<br>{esc(self.labels[0])}: {esc(self.before.describe())}<br>"
                            f"{esc(self.labels[1])}: {esc(self.after.describe())}</span>",
                       x=0.01, font=dict(size=13)),
            margin=dict(l=8, r=8, t=110, b=8),
            height=int(min(900, max(380, 140 + 22 * (int(depth.max()) + 1 if len(depth) else 1)))),
            uniformtext=dict(minsize=9, mode="hide"))
        return fig

    # -- display ----------------------------------------------------------------------------------
    def title(self) -> str:
        what = "normalised to each total" if self.normalize else metric_label(self.metric)
        more = "red more, blue less" if self.metric in MEMORY_METRICS else "red slower, blue faster"
        return f"Differential icicle: {self.labels[1]} vs {self.labels[0]} · {what} · {more}"

    def summary(self) -> str:
        a, b = self.total_before, self.total_after
        pct = f" ({100 * (b - a) / a:+.1f}%)" if a else ""
        s = (f"{metric_label(self.metric)}: {self.labels[0]} {fmt(self.metric, a)}, "
             f"{self.labels[1]} {fmt(self.metric, b)}{pct}")
        for lab, n in ((self.labels[0], self.unknown_before), (self.labels[1], self.unknown_after)):
            if n:
                s += f"; {lab}: {n} stacks with unknown {self.metric} left out"
        return s

    def __repr__(self) -> str:
        return f"<Comparison {self.summary()}; {len(self.table)} functions>"

    def _parts(self) -> tuple[str, str, str]:
        t = self.table.head(30)
        head = f"<div class='profmagic-compare'><p>{esc(self.summary(), 1000)}</p></div>"
        pic = _svg_row([(f"{esc(self.labels[0])} ({esc(metric_label(self.metric))})",
                         _svg(self.before, self.metric, 560)),
                        (f"{esc(self.labels[1])} ({esc(metric_label(self.metric))}; the colours of "
                         "change are in the live view)", _svg(self.after, self.metric, 560))])
        table = (f"<div class='profmagic-compare-table'><p>Per-function change ({esc(self.unit)}), "
                 f"largest first</p>{_table_html(t)}</div>")
        return head, pic, table

    def _text(self) -> str:
        return repr(self) + "\n" + self.table.head(30).to_string()


def compare(a: Profile, b: Profile, normalize: bool = False, metric: str | None = None, *,
            labels: tuple[str, str] = ("before", "after"), min_share: float = 0.0,
            max_nodes: int = T.MAX_NODES) -> Comparison:
    """Compare ``a`` (before) with ``b`` (after). ``normalize`` divides each by its own total, so
    the deltas are changes of share. ``metric`` defaults to one both profiles know."""
    metric = _common_metric([(labels[0], a), (labels[1], b)], metric)
    return Comparison(a, b, metric, normalize, tuple(labels), min_share, max_nodes)


# ----------------------------------------------------------------------------------------------
# CPU vs wall, one profile
# ----------------------------------------------------------------------------------------------
def _function_colours(ft: pd.DataFrame, order: list) -> tuple[np.ndarray, list, int]:
    """Colour code per function id (heaviest first through the palette) and a stepped scale."""
    size = int(ft.index.max()) + 1 if len(ft) else 0
    code = np.full(size, len(PALETTE), np.int64)
    for i, fid in enumerate(order):
        code[int(fid)] = i % len(PALETTE)
    colours = PALETTE + [GREY]
    n = len(colours)
    scale = []
    for i, c in enumerate(colours):
        scale += [[i / n, c], [(i + 1) / n, c]]
    return code, scale, n


def _recolour(tr: go.Icicle, t: T.Tree, code: np.ndarray, scale: list, n: int) -> None:
    real = t.key >= 0
    c = np.full(len(t), n - 1, np.int64)
    c[real] = code[t.key[real]]
    tr.marker = dict(colors=c.tolist(), colorscale=scale, cmin=0, cmax=n, showscale=False)


class CpuWall(_Display):
    """One profile with wall and cpu: ``table``, ``verdict``, ``figure`` (two icicles)."""

    def __init__(self, profile: Profile, thread: str | None = None, min_share: float = 0.0,
                 max_nodes: int = T.MAX_NODES // 2):
        self.profile, self.thread = profile, thread
        self._min_share, self._max_nodes = min_share, max_nodes
        if "wall" not in profile.metrics:
            raise ValueError(f"the CPU vs wall view needs wall time; this profile has "
                             f"{', '.join(profile.metrics)}")
        self.cpu_known = "cpu" in profile.metrics
        self.table = self._table()
        self.verdict = self._verdict()
        self._figure = None

    def _sub(self) -> Profile:
        p = self.profile
        if self.thread is None:
            return p
        return p.subset(p.stacks["thread"] == self.thread)

    def _table(self) -> pd.DataFrame:
        p = self._sub()
        wall = p.functions("wall")
        out = pd.DataFrame({"function": wall["name"], "file": wall["file"]}, index=wall.index)
        if self.cpu_known:
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

    def _verdict(self) -> str:
        p = self._sub()
        wall = p.total("wall")
        if not self.cpu_known:
            backend = p.meta.get("backend", "this backend")
            return (f"off-CPU time unknown: {backend} measured only wall time "
                    f"({wall:.3g} s); record with --mode both to split it")
        if not wall or wall != wall:
            return "no wall time recorded"
        w = p.weights("off_cpu").fillna(0.0).to_numpy()
        off = float(w.sum())
        share = 100.0 * off / wall
        head = f"{share:.0f}% of wall time off-CPU"
        if off <= 0:
            return head
        fn = p.function_ids()
        kinds = p.frames["kind"].astype(str)
        names = p.frames["name"]
        leaf_w: dict[int, float] = {}
        caller_w: dict[tuple[int, int], float] = {}
        leaf_frame: dict[int, int] = {}
        caller_frame: dict[int, int] = {}
        for stack, x in zip(p.stacks["stack"], w):
            if x <= 0 or not stack:
                continue
            y = int(fn[stack[-1]])
            leaf_w[y] = leaf_w.get(y, 0.0) + x
            leaf_frame.setdefault(y, stack[-1])
            above = [f for f in reversed(stack[:-1]) if int(fn[f]) != y]
            py = [f for f in above if kinds[f] == "python"]
            pick = py[0] if py else (above[0] if above else None)
            if pick is not None:
                k = (y, int(fn[pick]))
                caller_w[k] = caller_w.get(k, 0.0) + x
                caller_frame.setdefault(int(fn[pick]), pick)
        y = max(leaf_w, key=leaf_w.get)
        ys = f"{names[leaf_frame[y]]}"
        part = 100.0 * leaf_w[y] / off
        callers = {x: v for (yy, x), v in caller_w.items() if yy == y}
        if callers:
            x = max(callers, key=callers.get)
            return f"{head}, mostly in {names[caller_frame[x]]} waiting in {ys} ({part:.0f}% of it)"
        return f"{head}, mostly waiting in {ys} ({part:.0f}% of it)"

    def _make_figure(self) -> go.Figure:
        p = self.profile
        ft = T.function_table(p)
        order = p.functions("wall").index.tolist()  # function ids, heaviest wall first
        code, scale, n = _function_colours(ft, order)
        fig = go.Figure()
        panels = [("cpu", {"x": [0.0, 0.49]}), ("wall", {"x": [0.51, 1.0]})]
        notes = []
        for metric, dom in panels:
            if metric == "cpu" and not self.cpu_known:
                notes.append(dict(text=f"CPU time unknown for backend {esc(p.meta.get('backend', '?'))}",
                                  x=0.245, y=0.5))
                continue
            full, unknown = T.from_profile(p, metric, self.thread)
            t = T.prune(full, min_share=self._min_share, max_nodes=self._max_nodes)
            tr = I.trace(p, t, metric, f"{metric_label(metric)}", "kind", ft, domain=dom)
            _recolour(tr, t, code, scale, n)
            fig.add_trace(tr)
            if unknown:
                notes.append(dict(text=f"{unknown} stacks without {metric}", x=sum(dom["x"]) / 2, y=-0.02))
        for (metric, dom) in panels:
            fig.add_annotation(text=f"<b>{esc(metric_label(metric))}</b>", x=sum(dom["x"]) / 2, y=1.0,
                               xref="paper", yref="paper", yanchor="bottom", showarrow=False)
        for a in notes:
            fig.add_annotation(xref="paper", yref="paper", showarrow=False, **a)
        th = "all threads" if self.thread is None else f"thread {self.thread}"
        fig.update_layout(
            title=dict(text=f"<b>CPU vs wall · {esc(th)}</b><br><span style='font-size:11px'>"
                            f"{esc(p.describe())}<br>{esc(self.verdict, 400)}</span>",
                       x=0.01, font=dict(size=13)),
            margin=dict(l=8, r=8, t=110, b=8), height=520, uniformtext=dict(minsize=9, mode="hide"))
        return fig

    def __repr__(self) -> str:
        return f"<CpuWall {self.verdict}>"

    def _parts(self) -> tuple[str, str, str]:
        p = self.profile
        head = (f"<div class='profmagic-cpuwall'><p><b>{esc(self.verdict, 1000)}</b><br>"
                f"<span style='font-size:12px'>{esc(p.describe(), 400)}</span></p></div>")
        cpu = (_svg(p, "cpu", 560) if self.cpu_known else
               f"<p>CPU time unknown for backend {esc(p.meta.get('backend', '?'))}</p>")
        pic = _svg_row([(esc(metric_label("cpu")), cpu), (esc(metric_label("wall")), _svg(p, "wall", 560))])
        table = (f"<div class='profmagic-cpuwall-table'><p>Functions by off-CPU time</p>"
                 f"{_table_html(self.table.head(30))}</div>")
        return head, pic, table

    def _text(self) -> str:
        return self.verdict + "\n" + self.table.head(30).to_string(na_rep="unknown")


def cpu_wall(profile: Profile, thread: str | None = None, **kw) -> CpuWall:
    """The CPU vs wall display of one profile that has both metrics (``--compare``)."""
    return CpuWall(profile, thread=thread, **kw)


# ----------------------------------------------------------------------------------------------
# Backends side by side
# ----------------------------------------------------------------------------------------------
class SideBySide(_Display):
    """One icicle per backend, and ``table``: the top functions of each (share of its total)."""

    def __init__(self, profiles: dict, metric: str | None = None, top: int = 10,
                 max_nodes: int = 3000):
        if not profiles:
            raise ValueError("side_by_side needs at least one profile")
        self.profiles = dict(profiles)
        self.metric = metric
        self.top = top
        self._max_nodes = max_nodes
        self.metrics = {name: self._metric(p) for name, p in self.profiles.items()}
        self.table = self._table()
        self._figure = None

    def _metric(self, p: Profile) -> str:
        if self.metric is not None:
            return self.metric if self.metric in p.metrics else "unknown"
        for m in ("wall", "cpu", "samples"):
            if m in p.metrics:
                return m
        return "samples"

    def _table(self) -> pd.DataFrame:
        rows = []
        for name, p in self.profiles.items():
            m = self.metrics[name]
            if m == "unknown":
                rows.append({"backend": name, "metric": self.metric, "rank": np.nan, "function": "",
                             "total": np.nan, "share %": np.nan})
                continue
            f = p.functions(m).head(self.top)
            tot = p.total(m)
            for i, (fn, v) in enumerate(zip(f["name"], f["total"]), 1):
                rows.append({"backend": name, "metric": m, "rank": i, "function": fn,
                             "total": float(v), "share %": 100.0 * float(v) / tot if tot else np.nan})
        return pd.DataFrame(rows, columns=["backend", "metric", "rank", "function", "total", "share %"])

    def wide(self) -> pd.DataFrame:
        """Function × backend share %: the disagreement at a glance (NaN: the backend could not
        measure the metric; 0: measured and not seen)."""
        names = list(dict.fromkeys(self.table["function"][self.table["function"] != ""]))
        out = pd.DataFrame({"function": names})
        for name, p in self.profiles.items():
            m = self.metrics[name]
            if m == "unknown":
                out[name] = np.nan
                continue
            f = p.functions(m)
            tot = p.total(m)
            by = (f.groupby("name")["total"].max() / tot * 100.0) if tot else pd.Series(dtype=float)
            out[f"{name} ({m}) %"] = [float(by.get(n, 0.0)) for n in names]
        return out

    def _make_figure(self) -> go.Figure:
        fig = go.Figure()
        k = len(self.profiles)
        gap = 0.02
        wdt = (1.0 - gap * (k - 1)) / k
        for i, (name, p) in enumerate(self.profiles.items()):
            dom = {"x": [i * (wdt + gap), i * (wdt + gap) + wdt]}
            m = self.metrics[name]
            head = f"<b>{esc(name)}</b><br><span style='font-size:10px'>{esc(p.replace(metric=m).describe() if m != 'unknown' else p.describe(), 200)}</span>"
            fig.add_annotation(text=head, x=sum(dom["x"]) / 2, y=1.0, xref="paper", yref="paper",
                               yanchor="bottom", showarrow=False)
            if m == "unknown":
                fig.add_annotation(text=f"{esc(metric_label(self.metric))} unknown for this backend",
                                   x=sum(dom["x"]) / 2, y=0.5, xref="paper", yref="paper", showarrow=False)
                continue
            full, _ = T.from_profile(p, m, None)
            t = T.prune(full, max_nodes=self._max_nodes)
            fig.add_trace(I.trace(p, t, m, f"{name}: {metric_label(m)}", "kind", domain=dom))
        fig.update_layout(title=dict(text=f"<b>{k} backends, one cell</b>", x=0.01, font=dict(size=13)),
                          margin=dict(l=8, r=8, t=100, b=8), height=520,
                          uniformtext=dict(minsize=8, mode="hide"))
        return fig

    def __repr__(self) -> str:
        return f"<SideBySide {', '.join(f'{n} ({m})' for n, m in self.metrics.items())}>"

    def _parts(self) -> tuple[str, str, str]:
        panels = []
        width = max(280, 1100 // max(1, len(self.profiles)))
        for name, p in self.profiles.items():
            m = self.metrics[name]
            cap = f"{esc(name)}<br><span style='font-weight:normal'>{esc(p.describe(), 200)}</span>"
            if m == "unknown":
                panels.append((cap, f"<p>{esc(metric_label(self.metric))} unknown for this backend</p>"))
            else:
                panels.append((cap, _svg(p, m, width)))
        table = (f"<div class='profmagic-backends'><p>Top functions per backend, share of each backend's "
                 f"total</p>{_table_html(self.wide(), '{:.1f}')}</div>")
        return "", _svg_row(panels), table

    def _text(self) -> str:
        return repr(self) + "\n" + self.wide().to_string(na_rep="unknown")


def side_by_side(profiles: dict, metric: str | None = None, top: int = 10, **kw) -> SideBySide:
    """``--backends a,b,c``: ``profiles`` maps a backend label to its Profile of the same cell."""
    return SideBySide(profiles, metric=metric, top=top, **kw)

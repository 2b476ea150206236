"""The ranks view: processes side by side (a multi-process Profile: ``stacks["process"]``).

- ``bars``: one bar per process, CPU and off-CPU time (or the profile's metric where CPU is unknown);
- ``heat``: the top functions by process, each cell the function's share of that process;
- ``analysis.differs_most`` (above them): one line naming the process that differs most (in a
  cluster profile: the straggler, ``cluster.tasks.straggler``);
- ``widget``: all three, and a button per process that shows its icicle (views/icicle.py).
"""
from __future__ import annotations

import weakref

import plotly.graph_objects as go

from ..analysis import differs_most, process_profile, shares
from ..cluster.tasks import missing
from ..model import Profile
from ..multi import by_process, processes
from . import esc, fmt, metric_label, title
from . import icicle
from .colours import CPU_COLOUR, OFF_COLOUR
from .mime import figure_output



def _ended_note(row) -> str:
    if not row.ended:
        return ""
    at = row.ended_at
    return f" (ended at +{at:.2f} s)" if at is not None and at == at else " (ended)"


def bars(profile: Profile, metric: str | None = None) -> go.Figure:
    """One horizontal bar per process: CPU + off-CPU where both are known, else ``metric``; ranks
    without samples (``cluster.tasks.missing``) are listed with what happened to them."""
    metric = metric or profile.metric
    t = by_process(profile)
    names = [esc(p, 70) + esc(_ended_note(r)) for p, r in t.iterrows()]
    fig = go.Figure()
    split = t["cpu"].notna() & t["wall"].notna()
    if split.any():
        n = t["samples"].to_numpy()
        fig.add_bar(y=names, x=t["cpu"].where(split), orientation="h", name="CPU time (s)", customdata=n,
                    marker_color=CPU_COLOUR, hovertemplate="%{y}<br>CPU %{x:.3f} s · %{customdata} samples<extra></extra>")
        fig.add_bar(y=names, x=t["off_cpu"].where(split), orientation="h", name="off-CPU time (s) = wall − cpu",
                    marker_color=OFF_COLOUR, customdata=n,
                    hovertemplate="%{y}<br>off-CPU %{x:.3f} s · %{customdata} samples<extra></extra>")
    if (~split).any():
        m = metric if metric in ("wall", "cpu") else "samples"
        vals = t[m].where(~split) if m in t else t["samples"].where(~split)
        fig.add_bar(y=names, x=vals, orientation="h", name=f"{metric_label(m)} (CPU/off-CPU split unknown)",
                    marker_color="#9d9d9d", hovertemplate="%{y}<br>%{x:.4g}<extra></extra>")
    gone = missing(profile)
    if gone:
        fig.add_bar(y=[esc(p, 70) + " (no samples)" for p in gone], x=[0] * len(gone), orientation="h",
                    name="no samples", marker_color="#9d9d9d", customdata=[esc(w, 300) for w in gone.values()],
                    hovertemplate="%{y}<br>%{customdata}<extra></extra>")
    note = "bars: CPU + off-CPU = wall where the backend measured both"
    fig.update_layout(barmode="stack", title=dict(text=title(profile, metric, "Processes", None, note),
                                                  x=0.01, font=dict(size=13)),
                      height=int(min(900, 140 + 28 * (len(t) + len(gone)))), margin=dict(l=8, r=8, t=80, b=8),
                      yaxis=dict(autorange="reversed"), xaxis_title="seconds",
                      legend=dict(orientation="h", y=-0.15))
    return fig


def heat(profile: Profile, metric: str | None = None, top: int = 15) -> go.Figure:
    metric = metric or profile.metric
    share, value = shares(profile, metric, top)
    fns = [esc(i.split("  ")[0], 60) for i in share.index]
    procs = [esc(p, 40) for p in share.columns]
    text = [[f"{s:.0%}" for s in row] for row in share.to_numpy()]
    hover = [[f"{fns[i]}<br>{procs[j]}<br>{fmt(metric, value.iat[i, j])} · {share.iat[i, j]:.1%} of the process"
              for j in range(share.shape[1])] for i in range(share.shape[0])]
    fig = go.Figure(go.Heatmap(z=share.to_numpy(), x=procs, y=fns, text=text, texttemplate="%{text}",
                               customdata=hover, hovertemplate="%{customdata}<extra></extra>",
                               colorscale="Blues", zmin=0, zmax=1, colorbar=dict(title="share")))
    fig.update_layout(title=dict(text=title(profile, metric, f"Top {len(fns)} functions by process", None,
                                            "cell = the function's total as a share of that process's total"),
                                 x=0.01, font=dict(size=13)),
                      height=int(min(900, 160 + 24 * len(fns))), margin=dict(l=8, r=8, t=80, b=8),
                      yaxis=dict(autorange="reversed"))
    return fig


def _bars_html(profile: Profile, metric: str) -> str:
    """The bars as a script-free HTML table: CSS widths, every name escaped."""
    t = by_process(profile)
    split = t["cpu"].notna() & t["wall"].notna()
    m = metric if metric in ("wall", "cpu") and metric in t else "samples"
    full = [float(r.wall) if s else float(r[m]) for (_, r), s in zip(t.iterrows(), split)]
    top = max([v for v in full if v == v] or [0.0]) or 1.0
    rows = []
    for (p, r), s, v in zip(t.iterrows(), split, full):
        if s:
            cpu, off = float(r.cpu), float(r.off_cpu)
            bar = (f"<span style='display:inline-block;height:12px;background:{CPU_COLOUR};"
                   f"width:{300 * cpu / top:.1f}px'></span><span style='display:inline-block;height:12px;"
                   f"background:{OFF_COLOUR};width:{300 * off / top:.1f}px'></span>")
            val = f"CPU {fmt('cpu', cpu)} + off-CPU {fmt('wall', off)} · {int(r.samples):,} samples"
        else:
            bar = (f"<span style='display:inline-block;height:12px;background:#9d9d9d;"
                   f"width:{300 * (v if v == v else 0) / top:.1f}px'></span>")
            val = f"{fmt(m, v)} ({esc(metric_label(m))}; CPU/off-CPU split unknown)"
        rows.append(f"<tr class='profmagic-rank-bar'><td>{esc(p, 70)}{esc(_ended_note(r))}</td>"
                    f"<td style='white-space:nowrap'>{bar}</td><td>{val}</td></tr>")
    rows += [f"<tr class='profmagic-rank-bar profmagic-rank-absent'><td>{esc(p, 70)} (no samples)</td><td></td>"
             f"<td>{esc(why, 300)}</td></tr>" for p, why in missing(profile).items()]
    return (f"<div style='font:12px sans-serif'>{title(profile, metric, 'Processes', None, '')}<br>"
            f"<span style='color:{CPU_COLOUR}'>■</span> CPU time · <span style='color:{OFF_COLOUR}'>■</span> "
            "off-CPU time = wall − cpu</div><table class='profmagic-ranks-bars' style='font:12px sans-serif'>"
            + "".join(rows) + "</table>")


def _heat_html(profile: Profile, metric: str, top: int = 15) -> str:
    share, value = shares(profile, metric, top)
    head = "".join(f"<th>{esc(p, 40)}</th>" for p in share.columns)
    body = []
    for i, fn in enumerate(share.index):
        cells = []
        for j in range(share.shape[1]):
            s = float(share.iat[i, j])
            ink = "#fff" if s > 0.5 else "#000"
            cells.append(f"<td title='{fmt(metric, float(value.iat[i, j]))}' style='text-align:right;"
                         f"background:rgba(8,81,156,{s:.3f});color:{ink}'>{s:.0%}</td>")
        body.append(f"<tr><td>{esc(fn.split('  ')[0], 60)}</td>{''.join(cells)}</tr>")
    return (f"<div style='font:12px sans-serif;margin-top:6px'>"
            f"{title(profile, metric, f'Top {len(share)} functions by process', None, 'cell = the function total as a share of that process total')}"
            f"</div><table class='profmagic-ranks-heat' style='font:12px sans-serif'><tr><th>function</th>{head}</tr>"
            + "".join(body) + "</table>")


def html(profile: Profile, metric: str | None = None, include_plotlyjs: bool = False) -> str:
    """Static HTML that works offline: the one line, the bars and the heat table.

    ``include_plotlyjs=False`` (the default): plain HTML tables, no script at all (nbconvert,
    GitHub). ``True``: the plotly figures with plotly.js inlined (about 4.8 MB). Never a CDN.
    """
    if include_plotlyjs not in (True, False):
        raise ValueError("include_plotlyjs must be True (inline plotly.js) or False (no script); "
                         "a CDN would not work offline")
    metric = metric or profile.metric
    line = f"<p class='profmagic-differs'><b>{esc(differs_most(profile, metric), 600)}</b></p>"
    if not include_plotlyjs:
        return "<div class='profmagic-ranks-static'>" + line + _bars_html(profile, metric) + \
            _heat_html(profile, metric) + "</div>"
    b = bars(profile, metric).to_html(full_html=False, include_plotlyjs=True)
    h = heat(profile, metric).to_html(full_html=False, include_plotlyjs=False)
    return line + b + h


def widget(profile, metric: str | None = None):
    """ipywidgets: the one line, bars, heat table; a button per process shows its icicle.
    ``profile``: a Profile, or a weak reference to one (the report's, which ``del`` may free)."""
    get = profile if isinstance(profile, weakref.ref) else (lambda: profile)
    return _Ranks(get, metric or get().metric).box


class _Ranks:
    """The widget of ``widget()``: ``box.show_process(i)`` does what a click on process i does."""

    def __init__(self, get, metric: str):
        import ipywidgets as W
        self.get, self.metric, self.W = get, metric, W
        profile = get()
        self.procs = processes(profile)
        line = W.HTML(f"<b>{esc(differs_most(profile, metric), 600)}</b>")
        pick = W.ToggleButtons(options=[(str(p)[:40], i) for i, p in enumerate(self.procs)], value=None,
                               description="icicle of", tooltips=[str(p) for p in self.procs])
        pick.add_class("profmagic-ranks-pick")
        pick.observe(self._show, names="value")
        self.icicles = W.VBox()
        self.box = W.VBox([line, self._out(bars(profile, metric)), self._out(heat(profile, metric)), pick,
                           self.icicles])
        self.box.add_class("profmagic-ranks")
        self.box.show_process = lambda i: setattr(pick, "value", i)   # for tests and scripts
        self.box.icicle_box = self.icicles

    def _out(self, fig):
        o = self.W.Output()
        o.outputs = (figure_output(fig),)
        return o

    def _show(self, change):
        if change["new"] is None:
            return
        profile = self.get()
        if profile is None:
            self.icicles.children = [self.W.HTML("this profile was deleted from the kernel (del)")]
            return
        sub = process_profile(profile, self.procs[change["new"]])
        self.icicles.children = [self._out(icicle.figure(sub, metric=self.metric))]

"""The ranks view: processes side by side (a multi-process Profile: ``stacks["process"]``).

- ``bars``: one bar per process, CPU and off-CPU time (or the profile's metric where CPU is unknown);
- ``heat``: the top functions by process, each cell the function's share of that process;
- ``differs_most``: one line naming the process whose function shares are furthest from the others'
  (in a cluster profile: the straggler, ``cluster.tasks.straggler``);
- ``widget``: all three, and a button per process that shows its icicle (views/icicle.py).
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from ..cluster.tasks import missing, straggler
from ..multi import PROCESS, by_process, processes
from ..model import Profile
from . import esc, fmt, metric_label, title
from . import icicle

CPU_COLOUR, OFF_COLOUR = "#4c78a8", "#f58518"


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


def differs_most(profile: Profile, metric: str | None = None) -> str:
    """One line: the process whose self-time shares (a distribution over functions) are furthest,
    in total variation distance, from the median of the others'; and the function whose total
    share differs most. Where all processes spend their time alike (or tie, as two always do),
    the one whose total is furthest from the others' median. Compares the children only when
    there are at least two (the parent runs different code by design)."""
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
    dist = {}
    for p in peers:
        others = own.drop(columns=[p]).median(axis=1)
        dist[p] = 0.5 * float((own[p] - others).abs().sum())
    totals = by_process(profile)
    m = metric if metric in totals else "samples"

    def total_gap(p):  # how far p's total is from the others' median, relative
        med = float(totals.loc[[q for q in peers if q != p], m].median())
        v = float(totals.at[p, m])
        return abs(v - med) / med if med and med == med and v == v else 0.0
    top = max(dist.values())
    if top < 0.05:  # same code in the same proportions (or two peers, a symmetric distance): by total
        worst = max(peers, key=total_gap)
    else:  # ties (two peers are always tied) broken by the total
        worst = max(peers, key=lambda p: (round(dist[p], 2), total_gap(p)))
    med_total = float(totals.loc[[p for p in peers if p != worst], m].median())
    if top < 0.05:
        return (f"{worst} differs most, in {metric_label(m)}: {fmt(m, float(totals.at[worst, m]))} vs a median "
                f"{fmt(m, med_total)} in the others; the processes spend their time alike "
                f"(function shares within {top:.2f} of 1)")
    share, _ = shares(profile, metric, top=10 ** 9)
    share = share[peers]
    others = share.drop(columns=[worst]).median(axis=1)
    diff = share[worst] - others
    fn = diff.abs().idxmax()
    return (f"{worst} differs most (distance {dist[worst]:.2f} of 1 from the others' median): "
            f"{fn.split('  ')[0]} takes {share.at[fn, worst]:.0%} of it vs {others[fn]:.0%} in the others; "
            f"its {metric_label(m)} {fmt(m, float(totals.at[worst, m]))} vs a median {fmt(m, med_total)}")


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


def widget(profile: Profile, metric: str | None = None):
    """ipywidgets: the one line, bars, heat table; a button per process shows its icicle."""
    import json

    import ipywidgets as W
    mime = "application/vnd.plotly.v1+json"

    def out(fig):
        o = W.Output()
        o.outputs = ({"output_type": "display_data", "metadata": {},
                      "data": {mime: json.loads(fig.to_json()), "text/plain": "<plotly figure>"}},)
        return o

    metric = metric or profile.metric
    procs = processes(profile)
    line = W.HTML(f"<b>{esc(differs_most(profile, metric), 600)}</b>")
    pick = W.ToggleButtons(options=[(str(p)[:40], i) for i, p in enumerate(procs)], value=None,
                           description="icicle of", tooltips=[str(p) for p in procs])
    pick.add_class("profmagic-ranks-pick")
    ice = W.VBox()

    def show(change):
        if change["new"] is None:
            return
        sub = process_profile(profile, procs[change["new"]])
        ice.children = [out(icicle.figure(sub, metric=metric))]

    pick.observe(show, names="value")
    box = W.VBox([line, out(bars(profile, metric)), out(heat(profile, metric)), pick, ice])
    box.add_class("profmagic-ranks")
    box.show_process = lambda i: setattr(pick, "value", i)   # what a click does, for tests and scripts
    box.icicle_box = ice
    return box

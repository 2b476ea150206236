"""The Waits tab: why each thread was off-CPU and who ended its waits (profmagic/waits.py).

* Reason bars: each thread's wall split into CPU and each off-CPU reason (``reasons.split``),
  one colour and one hatching per reason; their legend is the icicle's too.
* The off-wake icicle, as Brendan Gregg's off-wake flame graphs: the stack a thread waited in
  (root first), a separator frame naming the waker (or how the wait ended), then the waker's stack
  at the wakeup, leaf first. Each box has the colour and hatching of the reason that holds most of
  its seconds (plotly's icicle marker patterns).
* The chain (``waits.chain``) as a short list.

Backends that record no wakers (all but perf ``--mode both``) get the bars, an icicle of the waits
alone, and a line saying what wakers need. ``html`` is the static twin's block: tables, no script.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .. import reasons
from .. import waits as W
from .header import escape

available = W.has_reasons   # the tab and the static block show for profiles with reasons

COLOURS = {reasons.CPU: "#4c78a8", reasons.CORE: "#f58518", reasons.GIL: "#e45756", reasons.LOCK: "#72b7b2",
           reasons.SLEEP: "#54a24b", reasons.IO: "#eeca3b", reasons.DISK: "#b279a2", reasons.CHILD: "#ff9da6",
           reasons.FAULT: "#9d755d", reasons.UNKNOWN: "#bab0ac"}
PATTERNS = {reasons.CPU: "", reasons.CORE: ".", reasons.GIL: "x", reasons.LOCK: "/", reasons.SLEEP: "-",
            reasons.IO: "\\", reasons.DISK: "|", reasons.CHILD: "+", reasons.FAULT: "+", reasons.UNKNOWN: ""}
# plotly has 7 hatchings: child and page fault share one (their colours differ); cpu and unknown are plain.
MAX_NODES = 3000      # icicle boxes kept (the heaviest); the rest go to their parent
MAX_DEPTH = 40        # frames of each side kept next to the separator
SEPARATOR = "── {} ──"


def split(p) -> pd.DataFrame:
    """Seconds per thread (rows) and reason (columns: CPU first, then each reason with any time)."""
    s = reasons.split(p)
    keep = [r for r in reasons.REASONS if r in s and (r == reasons.CPU or s[r].sum() > 0)]
    return s[keep]


def bars(p):
    import plotly.graph_objects as go
    s = split(p)
    fig = go.Figure()
    for r in s.columns:
        fig.add_bar(y=[str(t) for t in s.index], x=s[r].to_numpy(), name=reasons.LABELS.get(r, r), orientation="h",
                    marker=dict(color=COLOURS.get(r, "#999"), pattern=dict(shape=PATTERNS.get(r, ""))),
                    hovertemplate="%{y}: %{x:.4g} s " + escape(reasons.LABELS.get(r, r)) + "<extra></extra>")
    fig.update_layout(barmode="stack", height=120 + 28 * len(s), margin=dict(l=10, r=10, t=30, b=30),
                      title=dict(text="Wall time by reason (s); the legend's hatching is the icicle's",
                                 font=dict(size=13)), legend=dict(orientation="h"))
    fig.update_yaxes(autorange="reversed")
    return fig


def paths(p):
    """(path of names root to top, seconds, reason) per off-CPU sample: the waiting stack, the
    separator, the waker's stack leaf first."""
    sm = p.samples
    if sm is None or not len(sm) or "wall" not in sm or "cpu" not in sm:
        return []
    off = (sm["wall"] - sm["cpu"]).to_numpy(dtype=np.float64)
    r = sm["reason"].astype(str).to_numpy() if "reason" in sm else np.full(len(sm), reasons.UNKNOWN)
    rows = np.flatnonzero((off > 0) & (r != reasons.CPU))
    names = p.frames["name"].astype(str).to_numpy()
    stacks = p.stacks["stack"].to_numpy()
    threads = sm["thread"].astype(str).to_numpy()
    sid = sm["stack"].to_numpy()
    col = (lambda c: sm[c].to_numpy() if c in sm else np.full(len(sm), None, dtype=object))
    woken, ended, wstack = col("woken_by"), col("ended"), col("waker_stack")
    out = []
    for i in rows:
        frames = [names[f] for f in stacks[sid[i]]][-MAX_DEPTH:]
        path = [threads[i], *frames]
        e = ended[i] if isinstance(ended[i], str) else None
        if isinstance(woken[i], str) and woken[i]:
            path.append(SEPARATOR.format(f"woken by {woken[i]}"))
            if isinstance(wstack[i], tuple):
                path += [n for n in reversed(wstack[i]) if n][:MAX_DEPTH]
        elif e:
            path.append(SEPARATOR.format(f"ended by {e}"))
        out.append((path, float(off[i]), str(r[i])))
    return out


def _tree(p):
    """ids, labels, parents, values, reasons of the off-wake icicle's boxes, heaviest MAX_NODES."""
    node: dict[tuple, list] = {}
    for path, secs, r in paths(p):
        for d in range(1, len(path) + 1):
            key = tuple(path[:d])
            n = node.get(key)
            if n is None:
                n = node[key] = [0.0, {}]
            n[0] += secs
            n[1][r] = n[1].get(r, 0.0) + secs
    keys = sorted(node, key=lambda k: -node[k][0])[:MAX_NODES]
    kept = set(keys)
    keys = [k for k in keys if len(k) == 1 or k[:-1] in kept]
    ids = {k: str(i) for i, k in enumerate(keys)}
    return ([ids[k] for k in keys], [k[-1] for k in keys], [ids.get(k[:-1], "") for k in keys],
            [node[k][0] for k in keys], [max(node[k][1], key=node[k][1].get) for k in keys])


def icicle(p):
    import plotly.graph_objects as go
    ids, labels, parents, values, why = _tree(p)
    fig = go.Figure(go.Icicle(
        ids=ids, labels=labels, parents=parents, values=values, branchvalues="total",
        marker=dict(colors=[COLOURS.get(r, "#999") for r in why],
                    pattern=dict(shape=[PATTERNS.get(r, "") for r in why], solidity=0.3)),
        customdata=[reasons.LABELS.get(r, r) for r in why], tiling=dict(orientation="v", flip="y"),
        hovertemplate="%{label}<br>%{value:.4g} s off-CPU (%{percentRoot:.1%}); mostly %{customdata}<extra></extra>",
        maxdepth=24))
    fig.update_layout(height=560, margin=dict(l=10, r=10, t=30, b=10),
                      title=dict(text="Off-wake icicle: the waiting stack, then ── the waker ──, then the waker's "
                                      "stack (leaf first)", font=dict(size=13)))
    return fig


def chain_html(p) -> str:
    c = W.chain(p)
    items = []
    for h in c.itertuples():
        share = "" if h.share != h.share else f"{100 * h.share:.0f}% · "
        if h.doing == "wait":
            end = (f"ended by {h.ended}" if h.ended in ("timeout", "signal", "interrupt") else
                   f"woken by <b>{escape(h.waker)}</b>" + (f" in <code>{escape(h.waker_function)}</code>"
                                                          if h.waker_function else "")
                   if h.waker else "no waker recorded")
            items.append(f"<li>{share}<b>{escape(h.thread)}</b> waits on {escape(reasons.LABELS.get(h.reason, h.reason))}"
                         f" in <code>{escape(h.function)}</code>, {end}</li>")
        elif h.doing == "cpu":
            items.append(f"<li>{share}<b>{escape(h.thread)}</b> on CPU"
                         + (f" in <code>{escape(h.function)}</code>" if h.function else "") + "</li>")
        else:
            items.append(f"<li><b>{escape(h.thread)}</b>: another process</li>")
    note = "" if W.has_wakers(p) else f"<p>{escape(W.NO_WAKERS)}.</p>"
    body = f"<ol class='profmagic-chain'>{''.join(items)}</ol>" if items else "<p>No off-CPU time.</p>"
    return f"<div style='font:13px sans-serif'><b>The wait chain</b> (<code>p.chain()</code>){body}{note}</div>"


def html(p, top: int = 15) -> str:
    """The static twin's block: the chain, seconds by reason per thread, the largest waits."""
    s = split(p).rename(columns=lambda r: reasons.LABELS.get(r, r))
    w = W.waits(p).head(top)
    w = w.assign(share=[f"{100 * x:.1f}%" if x == x else "" for x in w["share"]], seconds=w["seconds"].round(4))
    return (chain_html(p)
            + "<div style='font:12px sans-serif;margin:6px 0 2px'>Wall time by reason (s)</div>"
            + s.round(4).to_html(escape=True, border=0, classes="profmagic-reasons")
            + f"<div style='font:12px sans-serif;margin:6px 0 2px'>Largest waits (<code>profmagic.waits(p)</code>)</div>"
            + w.to_html(index=False, escape=True, border=0, classes="profmagic-waits"))


def widgets(p, W_):
    """The live tab's widgets (``W_``: ipywidgets)."""
    from .mime import figure_output, widget as output_widget
    out = [W_.HTML(chain_html(p)), output_widget(figure_output(bars(p)))]
    if paths(p):
        out.append(output_widget(figure_output(icicle(p))))
    return out



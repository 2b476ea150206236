"""Time order: one lane per thread, one mark per sample at its time and stack depth, coloured by
its leaf function (the function's own colour, as in every view). Only for sources that keep the
order of their samples (Profile.samples)."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..model import Profile
from . import esc, title
from .colours import GREY, PALETTE, by_function
from . import tree as T

MAX_POINTS = 50_000
TOP_LEAVES = len(PALETTE)


def available(profile: Profile) -> tuple[bool, str]:
    if profile.samples is None or not len(profile.samples):
        src = profile.meta.get("backend") or profile.meta.get("format") or "this source"
        return False, f"{src} keeps no time order (its stacks are aggregated), so there is no time-order view"
    return True, ""


def figure(profile: Profile, thread: str | None = None, metric: str | None = None,
           max_points: int = MAX_POINTS) -> go.Figure:
    """Samples over time, one lane per thread (or only ``thread``). ``metric`` only names the title."""
    ok, why = available(profile)
    if not ok:
        raise ValueError(why)
    metric = metric or profile.metric
    s = profile.samples
    if thread is not None:
        T.thread_rows(profile, thread)  # raises for an unknown thread
        s = s[s["thread"] == thread]
    note = ""
    if len(s) > max_points:
        step = -(-len(s) // max_points)
        s = s.iloc[::step]
        note = f"showing every {step}th sample ({len(s):,} of {len(profile.samples):,})"
    rows = s["stack"].to_numpy()
    stacks = profile.stacks["stack"].to_numpy()
    lengths = np.fromiter((len(x) for x in stacks), np.int64, len(stacks))
    fn_of_frame = profile.function_ids()
    leaf_frame = np.array([x[-1] if len(x) else -1 for x in stacks], np.int64)
    leaf_fn = np.where(leaf_frame >= 0, fn_of_frame[np.maximum(leaf_frame, 0)], -1)
    depth, leaf = lengths[rows], leaf_fn[rows]
    t = s["time"].to_numpy(dtype=np.float64)
    t0 = float(profile.samples["time"].min())
    t = t - t0
    threads = [th for th in profile.threads if (s["thread"] == th).any()] or [thread or "(none)"]
    ft = T.function_table(profile)
    vals, counts = np.unique(leaf[leaf >= 0], return_counts=True)
    top = vals[np.argsort(-counts, kind="stable")][:TOP_LEAVES].tolist()
    fig = make_subplots(rows=len(threads), cols=1, shared_xaxes=True, vertical_spacing=0.03,
                        subplot_titles=[esc(th, 80) for th in threads])
    thr = s["thread"].to_numpy()
    colour = by_function(ft)
    groups = [(f, colour[f], esc(ft.loc[f, "name"], 60)) for f in top] + [(None, GREY, "(other)")]
    for lane, th in enumerate(threads, start=1):
        in_lane = thr == th
        for f, colour, name in groups:
            m = in_lane & (np.isin(leaf, top, invert=True) if f is None else leaf == f)
            if not m.any():
                continue
            fig.add_trace(go.Scattergl(
                x=np.round(t[m], 6), y=depth[m], mode="markers", name=name, legendgroup=name,
                showlegend=lane == 1 or not any(tr.name == name for tr in fig.data),
                marker=dict(color=colour, size=5, symbol="line-ns-open"),
                hovertemplate=f"<b>{name}</b><br>t = %{{x:.3f}} s<br>depth %{{y}}<extra>{esc(th, 60)}</extra>",
            ), row=lane, col=1)
        fig.update_yaxes(title_text="depth", row=lane, col=1, rangemode="tozero")
    fig.update_xaxes(title_text="time since the first sample (s)", row=len(threads), col=1)
    fig.update_layout(
        title=dict(text=title(profile, metric, "Time order (colour: leaf function)", thread, note),
                   x=0.01, font=dict(size=13)),
        margin=dict(l=8, r=8, t=90, b=8), height=min(1200, 150 + 170 * len(threads)),
        legend=dict(title="leaf function"),
    )
    return fig

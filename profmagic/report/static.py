"""Static HTML of a Profile: header, SVG icicle, function table, tables and downloads; no script.

For outputs seen without a kernel (nbconvert, GitHub, nbviewer), and as pieces of the live widget.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .. import multi
from ..model import MEMORY_METRICS, METRIC_LABELS, Profile
from ..views import fmt
from ..views.header import downloads_html, escape, header_html, notes

__all__ = ["downloads_html", "escape", "functions_html", "header_html", "notes", "static_html", "table_html"]
TOP_FUNCTIONS = 25


def functions_html(profile: Profile, metric: str, top: int = TOP_FUNCTIONS, thread: str | None = None,
                   boilerplate: bool = True, totals: bool | None = None) -> str:
    """The ``top`` functions by self time: self and total in ``metric`` with their shares, and
    total wall, CPU and off-CPU time where both clocks were measured. ``totals=None``: not for a
    profile over ``tree.LARGE`` frames (seconds to count; the live Sandwich and Table tabs have them)."""
    from ..views import sandwich
    from ..views import tree as T
    if totals is None:
        totals = not T.large(profile)
    df = sandwich.table(profile, metric, thread, boilerplate=boilerplate, limit=top, totals=totals).head(top)
    unit = profile.label(metric)
    num = (lambda v: "—" if v != v else fmt(metric, v)) if metric in MEMORY_METRICS else \
        (lambda v: _num(v, "{:.4g}"))
    show = pd.DataFrame({
        "function": df["name"].astype(str),
        f"self ({unit})": [num(v) for v in df["self"]],
        "self %": [_num(v, "{:.1f}") for v in df["self_pct"]],
        f"total ({unit})": [num(v) for v in df["total"]],
        "total %": [_num(v, "{:.1f}") for v in df["total_pct"]],
    })
    if "total_lo" in df and (df["total_hi"] > df["total_lo"]).any():   # 95% (profmagic.uncertainty)
        show["total 95%"] = [f"{num(a)}–{num(b)}" for a, b in zip(df["total_lo"], df["total_hi"])]
    for m in ("wall", "cpu", "off_cpu"):
        if m in df and m != metric:
            show[f"total {METRIC_LABELS[m].split(' =')[0]}"] = [_num(v, "{:.4g}") for v in df[m]]
    show["file"] = df["file"].astype(str).to_numpy()
    return show.to_html(index=False, escape=True, border=0, classes="profmagic-functions")


def _num(v, pattern: str) -> str:
    """A number, or "—" where it was not computed (NaN)."""
    return "—" if v != v else pattern.format(v)


# -- memory (views/memory.py): the strip under the icicle, time beside memory per function ---------------
def _memory_static(profile: Profile) -> str:
    from ..views import memory
    if not memory.available(profile)[0]:
        return ""
    try:
        out = memory.strip_html(profile)
        if memory.has_time_and_memory(profile):
            out += ("<div style='font:12px sans-serif;margin:6px 0 2px'>Time beside memory (totals per function)"
                    "</div>" + memory.side_by_side_html(profile))
        return out
    except Exception as e:  # the rest of the report still helps; say what failed
        return f"<p>(memory over time unavailable: {escape(type(e).__name__)}: {escape(e)})</p>"


def _section(title: str, build) -> str:
    """A titled part of the static HTML; if building it fails, a line saying what failed (the
    other parts still help)."""
    try:
        body = build()
    except Exception as e:
        body = f"<p>({escape(title)} unavailable: {escape(type(e).__name__)}: {escape(e)})</p>"
    if body is None:
        return ""
    return f"<div style='font:12px sans-serif;margin:8px 0 2px'><b>{escape(title)}</b></div>" + body


def static_html(profile: Profile, uid: str = "", downloads: str | None = None) -> str:
    """Self-contained HTML, no script and no network: header, SVG icicle, the cell's source with
    its time per line, processes side by side, the function table and the downloads (``downloads``:
    their HTML; default the notebook's, ``downloads_html``). A live widget with the same ``uid``
    hides it (see ``Report``)."""
    from ..views import icicle, ranks, source, tasks, waits
    metric = profile.metric
    multi_process = len(multi.processes(profile)) > 1
    return (f"<div class='profmagic-report profmagic-static profmagic-static-{uid}' "
            "style='max-width:100%;overflow-x:auto'>"
            + header_html(profile)
            + _section(f"Icicle · {profile.describe()} · all threads; hover a box for its numbers",
                       lambda: icicle.svg(profile, metric))
            + _memory_static(profile)
            + _section("Source", lambda: source.cell_html(profile))
            + _section("Processes side by side",
                       lambda: ranks.html(profile, metric, include_plotlyjs=False) if multi_process else None)
            + _section("Tasks (wall and CPU by task prefix, summed and per worker)",
                       lambda: tasks.html(profile) if tasks.has_tasks(profile) else None)
            + _section("Waits (why threads were off-CPU, and who ended the waits)",
                       lambda: waits.html(profile) if waits.available(profile) else None)
            # not a section: if the function table fails, the whole display falls back (display.fallback)
            + f"<div style='font:12px sans-serif;margin:8px 0 2px'><b>Top {TOP_FUNCTIONS} functions by self "
              f"time</b></div>" + functions_html(profile, metric)
            + _section("Downloads", lambda: downloads_html(profile) if downloads is None else downloads)
            + "</div>")


def table_html(profile: Profile, metric: str, thread: str | None, boilerplate: bool = True) -> str:
    """The pandas frames behind the views: functions, per-thread totals, heaviest stacks."""
    from ..views import tree as T
    parts = ["<div style='font:12px sans-serif'>", "<b>Functions</b> (<code>p.functions()</code>)",
             functions_html(profile, metric, top=100, thread=thread, boilerplate=boilerplate, totals=True)]
    from ..views import memory
    if memory.has_time_and_memory(profile):
        parts += ["<b>Time beside memory</b> (wall, CPU and bytes at the high-water mark per function, all threads)",
                  memory.side_by_side_html(profile, top=100)]
    st = profile.stacks
    per = st.groupby("thread", sort=False)[[c for c in ("samples", "wall", "cpu") + MEMORY_METRICS
                                            if c in st]].sum(min_count=1)
    parts += ["<b>Threads</b>", per.to_html(escape=True, border=0, na_rep="n/a (not measured)")]
    w, _ = T.metric_weights(profile, metric)
    rows = T.thread_rows(profile, thread)
    top = rows[np.argsort(-w[rows], kind="stable")][:30]
    names = profile.frames["name"]
    heavy = pd.DataFrame({"thread": st["thread"].to_numpy()[top],
                          metric: w[top],
                          "stack (root;…;leaf)": [";".join(str(names.get(f, f)) for f in st.at[i, "stack"])[-400:]
                                                  for i in top]})
    parts += ["<b>Heaviest stacks</b> (<code>p.stacks</code>)", heavy.to_html(index=False, escape=True, border=0)]
    if profile.samples is not None:
        parts.append(f"<code>p.samples</code>: {len(profile.samples):,} samples in time order")
    return "".join(parts) + "</div>"

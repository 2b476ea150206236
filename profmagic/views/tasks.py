"""The Tasks view of a cluster profile (``%%profile --cluster``, profmagic/cluster/): wall and CPU
time per task prefix, summed over the workers and per worker, and the straggler in one line.

- ``summed``: one bar per task prefix, CPU + off-CPU = wall, summed over every worker;
- ``per_worker``: one bar per worker, its wall time in each task prefix (CPU solid, off-CPU
  hatched); a worker that could not be reached or left no data is listed with what happened;
- ``html``: the line and both as script-free HTML tables (nbconvert, GitHub);
- ``widget``: the line, both figures, and pickers of a task and a worker that show the icicle of
  that task, that worker, or that task on that worker (``box.show_icicle(task=, worker=)``).

The numbers are ``profmagic.cluster.tasks``'s tables; task prefixes and worker names are escaped.
"""
from __future__ import annotations

import html as _html
import weakref

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from ..cluster import tasks as T
from ..model import Profile
from ..multi import PROCESS
from . import esc, fmt, title
from .colours import PALETTE
from .ranks import CPU_COLOUR, OFF_COLOUR

TOP = 8          # task prefixes drawn one by one per worker; the rest are summed into "(other tasks)"
OTHER = "(other tasks)"
LEGEND = dict(orientation="h", y=-0.3, yanchor="top")


def _note(profile: Profile) -> str:
    """What the bars are, and how many samples they hold (those of threads running a task)."""
    st = profile.stacks
    n = int(st.loc[st[T.TASK].notna(), "samples"].sum()) if T.TASK in st else 0
    return f"CPU + off-CPU = wall time spent in tasks ({n:,} task samples); the driver runs no task"


def _worker_rows(profile: Profile):
    """The workers' rows of ``cluster.tasks.ranks`` (no driver), in the profile's order."""
    r = T.ranks(profile)
    return r[r["role"] == "worker"]


def _worker_name(label: str, row) -> str:
    """A worker's label with what happened to it when it did not run to the end (escaped)."""
    if row["status"] == "ok":
        return esc(label, 70)
    return esc(label, 70) + esc(f" ({row['status_text']})")


def _why(row) -> str:
    """Why a worker has no task samples: the engine's error, or what happened to it."""
    if isinstance(row["error"], str) and row["error"]:   # NaN in the table where there is none
        return row["error"]
    return "ran no task during the recording" if row["status"] == "ok" else str(row["status_text"])


def _per_worker_table(profile: Profile) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(wall, cpu): workers × task prefixes (the TOP heaviest, then OTHER), 0 where none."""
    per = T.tasks(profile, by_worker=True)
    workers = list(_worker_rows(profile).index)
    if not len(per):
        empty = pd.DataFrame(index=workers, dtype=float)
        return empty, empty
    order = list(T.tasks(profile).index)
    keep, rest = order[:TOP], order[TOP:]
    out = []
    for col in ("wall", "cpu"):
        t = per[col].unstack(PROCESS).T.reindex(index=workers, columns=order).fillna(0.0)
        if rest:
            t[OTHER] = t[rest].sum(axis=1)
        out.append(t[keep + ([OTHER] if rest else [])])
    return out[0], out[1]


def _summed_title(profile: Profile) -> str:
    r = _worker_rows(profile)
    n, without = len(r), int((r["samples"] == 0).sum())
    return f"Tasks · summed over {n - without} workers" + (f" ({without} without data)" if without else "")


def summed(profile: Profile) -> go.Figure:
    """One horizontal bar per task prefix: CPU and off-CPU seconds summed over the workers."""
    t = T.tasks(profile)
    names = [esc(k, 70) for k in t.index]
    share = [f"{s:.0%}" if s == s else "?" for s in t["wall_share"]]
    custom = np.array([[f"{w:.3f}", n, s] for w, n, s in zip(t["wall"], t["samples"], share)], dtype=object) \
        if len(t) else None
    fig = go.Figure()
    tail = "<br>wall %{customdata[0]} s · %{customdata[2]} of the task time · %{customdata[1]} samples<extra></extra>"
    fig.add_bar(y=names, x=t["cpu"], orientation="h", name="CPU time (s)", marker_color=CPU_COLOUR,
                customdata=custom, hovertemplate="%{y}<br>CPU %{x:.3f} s" + tail)
    fig.add_bar(y=names, x=t["off_cpu"], orientation="h", name="off-CPU time (s) = wall − cpu",
                marker_color=OFF_COLOUR, customdata=custom, hovertemplate="%{y}<br>off-CPU %{x:.3f} s" + tail)
    fig.update_layout(barmode="stack", title=dict(text=title(profile, "wall", _summed_title(profile), None,
                                                             _note(profile)), x=0.01, font=dict(size=13)),
                      height=int(min(900, 220 + 28 * max(1, len(t)))), margin=dict(l=8, r=8, t=80, b=60),
                      yaxis=dict(autorange="reversed"), xaxis_title="seconds", legend=LEGEND)
    return fig


def per_worker(profile: Profile) -> go.Figure:
    """One horizontal bar per worker: its wall time in each task prefix, the CPU part solid and the
    off-CPU part hatched. Workers without data are listed with a zero bar and what happened."""
    rows = _worker_rows(profile)
    wall, cpu = _per_worker_table(profile)
    names = [_worker_name(lab, r) for lab, r in rows.iterrows()]
    fig = go.Figure()
    for i, task in enumerate(wall.columns):
        colour = PALETTE[i % len(PALETTE)]
        c = cpu[task].to_numpy()
        off = np.clip(wall[task].to_numpy() - c, 0, None)
        label = esc(task, 40)
        named = [label] * len(names)      # in customdata, not in the template: a name may hold %{...}
        fig.add_bar(y=names, x=c, orientation="h", name=f"{label} · CPU", marker_color=colour, legendgroup=label,
                    customdata=named, hovertemplate="%{y}<br>%{customdata}: CPU %{x:.3f} s<extra></extra>")
        fig.add_bar(y=names, x=off, orientation="h", name=f"{label} · off-CPU", legendgroup=label,
                    marker=dict(color="white", line=dict(color=colour, width=1),
                                pattern=dict(shape="/", fgcolor=colour)),
                    customdata=named, hovertemplate="%{y}<br>%{customdata}: off-CPU %{x:.3f} s<extra></extra>")
    missing = [n for n, (_, r) in zip(names, rows.iterrows()) if r["samples"] == 0]
    if missing:
        why = [esc(_why(r), 300) for _, r in rows.iterrows() if r["samples"] == 0]
        fig.add_bar(y=missing, x=[0] * len(missing), orientation="h", name="no data", marker_color="#9d9d9d",
                    customdata=why, hovertemplate="%{y}<br>%{customdata}<extra></extra>")
    fig.update_layout(barmode="stack", title=dict(text=title(profile, "wall", "Tasks · per worker", None,
                                                             _note(profile) + "; hatched = off-CPU"),
                                                  x=0.01, font=dict(size=13)),
                      height=int(min(900, 240 + 30 * max(1, len(rows)))), margin=dict(l=8, r=8, t=80, b=60),
                      yaxis=dict(autorange="reversed"), xaxis_title="seconds", legend=LEGEND)
    return fig


def _bar(parts: list[tuple[float, str, str]], top: float, width: int = 300) -> str:
    """CSS bar segments: (seconds, colour, title), the title escaped for an attribute."""
    return "".join(f"<span title='{_html.escape(t, quote=True)}' style='display:inline-block;height:12px;"
                   f"background:{c};width:{width * v / top:.1f}px'></span>" for v, c, t in parts if v > 0)


def _summed_html(profile: Profile) -> str:
    t = T.tasks(profile)
    top = float(t["wall"].max()) if len(t) else 1.0
    rows = []
    for k, r in t.iterrows():
        bar = _bar([(float(r.cpu), CPU_COLOUR, "CPU"), (float(r.off_cpu), OFF_COLOUR, "off-CPU")], top or 1.0)
        keys = "" if r["keys"] != r["keys"] else f"{int(r['keys']):,}"
        rows.append(f"<tr class='profmagic-task'><td>{esc(k, 70)}</td><td style='white-space:nowrap'>{bar}</td>"
                    f"<td>{fmt('wall', float(r.wall))}</td><td>{fmt('cpu', float(r.cpu))}</td>"
                    f"<td>{fmt('wall', float(r.off_cpu))}</td><td>{r.wall_share:.0%}</td>"
                    f"<td>{int(r.samples):,}</td><td>{keys}</td></tr>")
    return (f"<div style='font:12px sans-serif'>{title(profile, 'wall', _summed_title(profile), None, _note(profile))}"
            "</div><table class='profmagic-tasks-summed' style='font:12px sans-serif'><tr><th>task</th>"
            f"<th><span style='color:{CPU_COLOUR}'>■</span> CPU <span style='color:{OFF_COLOUR}'>■</span> off-CPU"
            "</th><th>wall</th><th>CPU</th><th>off-CPU</th><th>share of task wall</th><th>samples</th><th>keys</th>"
            "</tr>" + "".join(rows) + "</table>")


def _per_worker_html(profile: Profile) -> str:
    rows = _worker_rows(profile)
    wall, cpu = _per_worker_table(profile)
    tasks = list(wall.columns)
    top = float(wall.sum(axis=1).max()) if len(wall) and len(tasks) else 1.0
    head = "".join(f"<th>{esc(k, 40)}<br>wall (CPU)</th>" for k in tasks)
    body = []
    for lab, r in rows.iterrows():
        if r["samples"] == 0:
            why = esc(_why(r), 300)
            body.append(f"<tr class='profmagic-task-worker profmagic-rank-absent'><td>{_worker_name(lab, r)}</td>"
                        f"<td></td><td colspan='{len(tasks) + 1}'>no data: {why}</td></tr>")
            continue
        parts = []
        for i, k in enumerate(tasks):
            colour = PALETTE[i % len(PALETTE)]
            c, w = float(cpu.at[lab, k]), float(wall.at[lab, k])
            parts += [(c, colour, f"{k}: CPU"), (max(w - c, 0.0), colour + "66", f"{k}: off-CPU")]
        cells = "".join(f"<td>{fmt('wall', float(wall.at[lab, k]))} ({fmt('cpu', float(cpu.at[lab, k]))})</td>"
                        for k in tasks)
        body.append(f"<tr class='profmagic-task-worker'><td>{_worker_name(lab, r)}</td>"
                    f"<td style='white-space:nowrap'>{_bar(parts, top or 1.0)}</td>"
                    f"<td>{fmt('wall', float(wall.loc[lab].sum()))}</td>{cells}</tr>")
    return (f"<div style='font:12px sans-serif;margin-top:6px'>"
            f"{title(profile, 'wall', 'Tasks · per worker', None, _note(profile) + '; light = off-CPU')}</div>"
            "<table class='profmagic-tasks-per-worker' style='font:12px sans-serif'><tr><th>worker</th><th></th>"
            f"<th>in tasks</th>{head}</tr>" + "".join(body) + "</table>")


def line(profile: Profile) -> str:
    """The straggler in one line (cluster.tasks.straggler), escaped."""
    return esc(T.straggler(profile)["text"], 600)


def html(profile: Profile) -> str:
    """Static HTML, no script, no network: the straggler line and both tables."""
    return ("<div class='profmagic-tasks-static'>"
            f"<p class='profmagic-straggler'><b>{line(profile)}</b></p>"
            + _summed_html(profile) + _per_worker_html(profile) + "</div>")


def widget(profile, metric: str | None = None):
    """ipywidgets: the straggler line, both figures, and a task picker and a worker picker; the
    icicle below shows what is picked (a task on every worker, a worker's tasks, or both).
    ``profile``: a Profile, or a weak reference to one (a report's, which ``del`` may free)."""
    import ipywidgets as W

    from . import icicle
    from .mime import figure_output, widget
    get = profile if isinstance(profile, weakref.ref) else (lambda: profile)

    def out(fig):
        return widget(figure_output(fig))

    p = get()
    metric = metric or p.metric
    task_names = [str(k) for k in T.tasks(p).index]
    r = T.ranks(p)
    workers = [str(w) for w in r.index[(r["role"] == "worker") & (r["samples"] > 0)]]
    pick_task = W.ToggleButtons(options=[("every task", -1)] + [(k[:40], i) for i, k in enumerate(task_names)],
                                value=-1, description="task", tooltips=["every task"] + task_names)
    pick_worker = W.ToggleButtons(options=[("every worker", -1)] + [(w[:40], i) for i, w in enumerate(workers)],
                                  value=-1, description="worker", tooltips=["every worker"] + workers)
    pick_task.add_class("profmagic-tasks-pick")
    pick_worker.add_class("profmagic-tasks-pick-worker")
    ice = W.VBox()
    picking = [False]

    def show(_=None):
        if picking[0]:
            return
        task = None if pick_task.value == -1 else task_names[pick_task.value]
        worker = None if pick_worker.value == -1 else workers[pick_worker.value]
        whole = get()
        if task is None and worker is None or whole is None:
            ice.children = [] if whole is not None else [W.HTML("this profile was deleted from the kernel (del)")]
            return
        sub = T.sub_profile(whole, rank=worker, task=task)
        fig = icicle.figure(sub, metric=metric)
        what = " · ".join(x for x in (f"task {task}" if task else "", worker or "every worker") if x)
        fig.update_layout(title_text=title(sub, metric, f"Icicle · {what}", None))
        ice.children = [out(fig)]

    pick_task.observe(show, names="value")
    pick_worker.observe(show, names="value")
    box = W.VBox([W.HTML(f"<b>{line(p)}</b>"), out(summed(p)), out(per_worker(p)), pick_task, pick_worker, ice])
    box.add_class("profmagic-tasks")
    del p, r

    def pick(task: str | None = None, worker: str | None = None):   # what a click does, for tests and scripts
        picking[0] = True
        try:
            pick_task.value = -1 if task is None else task_names.index(task)
            pick_worker.value = -1 if worker is None else workers.index(worker)
        finally:
            picking[0] = False
        show()
    box.show_icicle = pick
    box.icicle_box = ice
    return box


def has_tasks(profile: Profile) -> bool:
    """Whether ``profile`` is a cluster profile with task rows (the report's Tasks tab shows then)."""
    return T.TASK in profile.stacks and bool(profile.stacks[T.TASK].notna().any())

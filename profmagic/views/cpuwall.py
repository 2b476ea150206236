"""CPU vs wall of one run (``--compare``): CPU and wall icicles at one scale, so the gap beside the
CPU icicle is the off-CPU time; one colour per function in both; a table sorted by off-CPU time,
and a one-line verdict."""
from __future__ import annotations

import plotly.graph_objects as go

from .. import boilerplate as B
from ..analysis import cpu_wall_table, off_cpu_verdict
from ..model import Profile
from . import esc, metric_label
from . import icicle as I
from . import tree as T
from .display import ComparisonView, svg, svg_row, table_html, table_trace
from .header import downloads_html, header_html

PANEL = 0.49          # each panel's share of the figure's width
ICICLES_Y = [0.42, 0.93]
TABLE_Y = [0.0, 0.36]


class CpuWall(ComparisonView):
    """One profile with wall and cpu: ``table``, ``verdict``, ``figure`` (two icicles, one scale)."""

    def __init__(self, profile: Profile, thread: str | None = None, min_share: float = 0.0,
                 max_nodes: int = T.MAX_NODES // 2, boilerplate: bool = True):
        if "wall" not in profile.metrics:
            raise ValueError(f"the CPU vs wall view needs wall time; this profile has "
                             f"{', '.join(profile.metrics)}")
        self.profile, self.thread = profile, thread
        self.view = B.fold(profile) if boilerplate else profile
        self._min_share, self._max_nodes = min_share, max_nodes
        self.cpu_known = "cpu" in profile.metrics
        sub = self.view if thread is None else self.view.subset(T.thread_rows(self.view, thread))
        self.wall, self.cpu = sub.total("wall"), sub.total("cpu") if self.cpu_known else float("nan")
        table = cpu_wall_table(sub)
        self.table = table[table["file"] != B.FOLDED_FILE].reset_index(drop=True)
        self.verdict = off_cpu_verdict(sub)
        self._figure = None

    @property
    def ratio(self) -> float:
        """CPU over wall time: the CPU icicle's width as a share of the wall icicle's."""
        return min(self.cpu / self.wall, 1.0) if self.cpu_known and self.wall > 0 else 0.0

    def gap(self) -> str:
        return f"off-CPU time = wall − CPU: {max(self.wall - self.cpu, 0.0):.4g} s"

    def _make_figure(self) -> go.Figure:
        p = self.view
        fig = go.Figure()
        wall_x = [1.0 - PANEL, 1.0]
        cpu_x = [0.0, PANEL * self.ratio]
        for metric, xs, total in (("cpu", cpu_x, self.cpu), ("wall", wall_x, self.wall)):
            fig.add_annotation(text=f"<b>{esc(metric_label(metric))}</b>: {total:.4g} s", x=xs[0], y=ICICLES_Y[1],
                               xref="paper", yref="paper", xanchor="left", yanchor="bottom", showarrow=False)
            if metric == "cpu" and not self.cpu_known:
                fig.add_annotation(text=f"CPU time unknown for backend {esc(p.meta.get('backend', '?'))}",
                                   x=PANEL / 2, y=sum(ICICLES_Y) / 2, xref="paper", yref="paper", showarrow=False)
                continue
            t, _ = I.tree(p, metric, self.thread, min_share=self._min_share, max_nodes=self._max_nodes)
            paint = I.Paint.of(p, metric, self.thread)
            fig.add_trace(I.trace(paint, t, metric_label(metric), domain={"x": xs, "y": ICICLES_Y}))
        if self.cpu_known and self.ratio < 1:
            fig.add_shape(type="rect", xref="paper", yref="paper", x0=cpu_x[1] + 0.002, x1=PANEL,
                          y0=ICICLES_Y[0], y1=ICICLES_Y[1], line=dict(color="#999", dash="dash", width=1),
                          fillcolor="rgba(200,200,200,0.15)")
            fig.add_annotation(text=esc(self.gap()), x=(cpu_x[1] + PANEL) / 2, y=ICICLES_Y[1] - 0.02,
                               xref="paper", yref="paper", yanchor="top", showarrow=False, font=dict(size=11))
        fig.add_trace(table_trace(self.table, {"x": [0, 1], "y": TABLE_Y}))
        th = "all threads" if self.thread is None else f"thread {self.thread}"
        fig.update_layout(
            title=dict(text=f"<b>CPU vs wall · {esc(th)}</b> (one scale: the CPU icicle is CPU/wall of the "
                            f"wall icicle's width)<br><span style='font-size:11px'>{esc(p.describe())}<br>"
                            f"{esc(self.verdict, 400)}</span>", x=0.01, font=dict(size=13)),
            margin=dict(l=8, r=8, t=110, b=8), height=860, uniformtext=dict(minsize=9, mode="hide"))
        return fig

    def __repr__(self) -> str:
        return f"<CpuWall {self.verdict}>"

    def _parts(self) -> tuple[str, str, str]:
        p = self.view
        head = (f"<div class='profmagic-cpuwall'><p><b>{esc(self.verdict, 1000)}</b></p>"
                f"{header_html(self.profile)}</div>")
        if self.cpu_known:
            cpu = svg(p, "cpu", 560, thread=self.thread, scale=self.ratio, rest=self.gap())
        else:
            cpu = f"<p>CPU time unknown for backend {esc(p.meta.get('backend', '?'))}</p>"
        pic = svg_row([(f"{esc(metric_label('cpu'))}: {self.cpu:.4g} s (drawn at the wall icicle's scale)", cpu),
                       (f"{esc(metric_label('wall'))}: {self.wall:.4g} s", svg(p, "wall", 560, thread=self.thread))])
        table = (f"<div class='profmagic-cpuwall-table'><p>Functions by off-CPU time</p>"
                 f"{table_html(self.table.head(30))}</div>" + downloads_html(self.profile))
        return head, pic, table

    def _text(self) -> str:
        return self.verdict + "\n" + self.table.head(30).to_string(na_rep="unknown")


def cpu_wall(profile: Profile, thread: str | None = None, **kw) -> CpuWall:
    """The CPU vs wall display of one profile that has both metrics (``--compare``)."""
    return CpuWall(profile, thread=thread, **kw)

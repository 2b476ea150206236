"""CPU vs wall of one run (``--compare``): the CPU and wall icicles side by side, one colour per
function in both, a table sorted by off-CPU time, and a one-line verdict."""
from __future__ import annotations

import plotly.graph_objects as go

from ..analysis import cpu_wall_table, off_cpu_verdict
from ..model import Profile
from . import esc, metric_label
from . import colours as C
from . import icicle as I
from . import tree as T
from .display import ComparisonView, svg, svg_row, table_html

PANELS = (("cpu", {"x": [0.0, 0.49]}), ("wall", {"x": [0.51, 1.0]}))


class CpuWall(ComparisonView):
    """One profile with wall and cpu: ``table``, ``verdict``, ``figure`` (two icicles)."""

    def __init__(self, profile: Profile, thread: str | None = None, min_share: float = 0.0,
                 max_nodes: int = T.MAX_NODES // 2):
        self.profile, self.thread = profile, thread
        self._min_share, self._max_nodes = min_share, max_nodes
        if "wall" not in profile.metrics:
            raise ValueError(f"the CPU vs wall view needs wall time; this profile has "
                             f"{', '.join(profile.metrics)}")
        self.cpu_known = "cpu" in profile.metrics
        sub = profile if thread is None else profile.subset(profile.stacks["thread"] == thread)
        self.table = cpu_wall_table(sub)
        self.verdict = off_cpu_verdict(sub)
        self._figure = None

    def _make_figure(self) -> go.Figure:
        p = self.profile
        ft = T.function_table(p)
        fcodes = C.function_codes(ft, "function", p.functions("wall")["id"])  # heaviest wall first
        fig = go.Figure()
        for metric, dom in PANELS:
            mid = sum(dom["x"]) / 2
            fig.add_annotation(text=f"<b>{esc(metric_label(metric))}</b>", x=mid, y=1.0, xref="paper",
                               yref="paper", yanchor="bottom", showarrow=False)
            if metric == "cpu" and not self.cpu_known:
                fig.add_annotation(text=f"CPU time unknown for backend {esc(p.meta.get('backend', '?'))}",
                                   x=mid, y=0.5, xref="paper", yref="paper", showarrow=False)
                continue
            full, unknown = T.from_profile(p, metric, self.thread)
            t = T.prune(full, min_share=self._min_share, max_nodes=self._max_nodes)
            fig.add_trace(I.trace(p, t, metric, metric_label(metric), ft=ft, domain=dom, fcodes=fcodes))
            if unknown:
                fig.add_annotation(text=f"{unknown} stacks without {metric}", x=mid, y=-0.02, xref="paper",
                                   yref="paper", showarrow=False)
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
        cpu = (svg(p, "cpu", 560) if self.cpu_known else
               f"<p>CPU time unknown for backend {esc(p.meta.get('backend', '?'))}</p>")
        pic = svg_row([(esc(metric_label("cpu")), cpu), (esc(metric_label("wall")), svg(p, "wall", 560))])
        table = (f"<div class='profmagic-cpuwall-table'><p>Functions by off-CPU time</p>"
                 f"{table_html(self.table.head(30))}</div>")
        return head, pic, table

    def _text(self) -> str:
        return self.verdict + "\n" + self.table.head(30).to_string(na_rep="unknown")


def cpu_wall(profile: Profile, thread: str | None = None, **kw) -> CpuWall:
    """The CPU vs wall display of one profile that has both metrics (``--compare``)."""
    return CpuWall(profile, thread=thread, **kw)

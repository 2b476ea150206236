"""How a comparison view shows itself: one output holding its plotly figure and a static twin.

The live figure carries everything (title, panels, table); the static twin (``text/html``, what
nbconvert, GitHub and a saved notebook without a kernel show) carries the same as script-free
HTML: header, SVG pictures and table. The comparison views (``diff``, ``cpuwall``, ``sidebyside``)
subclass ``ComparisonView`` and give ``_make_figure()``, ``_parts()`` (header, pictures, table
HTML) and ``_text()``.
"""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from ..model import Profile
from . import esc
from . import icicle as I
from .mime import bundle

TABLE_ROWS = 15   # rows of a table drawn in the live figure


def svg_row(panels: list[tuple[str, str]]) -> str:
    """Static icicles side by side: (escaped caption, svg or escaped message) each; no script."""
    cells = "".join(f"<div style='flex:1 1 0;min-width:0;overflow-x:auto'><div style='font:12px sans-serif;"
                    f"margin:2px 0'><b>{cap}</b></div>{body}</div>" for cap, body in panels)
    return f"<div class='profmagic-svg-row' style='display:flex;gap:8px'>{cells}</div>"


def svg(p: Profile, metric: str, width: int, **kw) -> str:
    """The static icicle of ``p`` (``icicle.svg``), or an escaped line saying why there is none."""
    try:
        return I.svg(p, metric, width=width, **kw)
    except Exception as e:  # the table and verdict still help; say what failed
        return f"<p>(icicle unavailable: {esc(e, 300)})</p>"


def table_html(df: pd.DataFrame, floatfmt: str = "{:.4g}") -> str:
    # pandas escapes cell text (escape=True); NaN means "unknown", never zero.
    return df.to_html(index=False, na_rep="unknown", escape=True, border=0,
                      float_format=lambda v: floatfmt.format(v), classes="profmagic-table")


def table_trace(df: pd.DataFrame, domain: dict, floatfmt: str = "{:.4g}", visible: bool = True) -> go.Table:
    """The first ``TABLE_ROWS`` rows of ``df`` as a plotly table (escaped; NaN shown as unknown)."""
    df = df.head(TABLE_ROWS)

    def cell(v) -> str:
        if isinstance(v, float):
            return "unknown" if v != v else floatfmt.format(v)
        return esc(v, 80)
    return go.Table(domain=domain, visible=visible,
                    header=dict(values=[f"<b>{esc(c)}</b>" for c in df.columns], align="left",
                                fill_color="#eeeeee", font=dict(size=11)),
                    cells=dict(values=[[cell(v) for v in df[c]] for c in df.columns], align="left",
                               font=dict(size=11), height=20))


class ComparisonView:
    """One output: the plotly figure, with the static twin as its ``text/html``."""

    _figure = None

    @property
    def figure(self) -> go.Figure:
        """The plotly figure, built on first use by the subclass's ``_make_figure()``."""
        if self._figure is None:
            self._figure = self._make_figure()
        return self._figure

    def static_html(self) -> str:
        """The static twin: header, pictures and table as script-free HTML."""
        return "".join(self._parts())

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {**bundle(self.figure, self.static_html()), "text/plain": self._text()}

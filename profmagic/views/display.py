"""How a comparison view shows itself: its plotly figure with a static twin, its header and table.

The comparison views (``diff``, ``cpuwall``, ``sidebyside``) subclass ``ComparisonView`` and give
``_make_figure()`` (the plotly figure), ``_parts()`` (header, static pictures and table as HTML)
and ``_text()`` (the plain-text form).
"""
from __future__ import annotations

import pandas as pd

from ..model import Profile
from . import esc
from . import icicle as I
from .mime import bundle


def svg_row(panels: list[tuple[str, str]]) -> str:
    """Static icicles side by side: (escaped caption, svg or escaped message) each; no script."""
    cells = "".join(f"<div style='flex:1 1 0;min-width:0;overflow-x:auto'><div style='font:12px sans-serif;"
                    f"margin:2px 0'><b>{cap}</b></div>{body}</div>" for cap, body in panels)
    return f"<div class='profmagic-svg-row' style='display:flex;gap:8px'>{cells}</div>"


def svg(p: Profile, metric: str, width: int) -> str:
    """The static icicle of ``p``, or an escaped line saying why there is none."""
    try:
        return I.svg(p, metric, width=width)
    except Exception as e:  # the table and verdict still help; say what failed
        return f"<p>(icicle unavailable: {esc(e, 300)})</p>"


def table_html(df: pd.DataFrame, floatfmt: str = "{:.4g}") -> str:
    # pandas escapes cell text (escape=True); NaN means "unknown", never zero.
    return df.to_html(index=False, na_rep="unknown", escape=True, border=0,
                      float_format=lambda v: floatfmt.format(v), classes="profmagic-table")


class ComparisonView:
    """Header, figure (plotly mime + static SVG twin) and table, each its own output."""

    _figure = None

    @property
    def figure(self):
        """The plotly figure, built on first use by the subclass's ``_make_figure()``."""
        if self._figure is None:
            self._figure = self._make_figure()
        return self._figure

    def outputs(self) -> list[dict]:
        head, pic, table = self._parts()
        return ([{"text/html": head}] if head else []) + [bundle(self.figure, pic), {"text/html": table}]

    def _ipython_display_(self):
        from IPython.display import display
        for b in self.outputs():
            display(b, raw=True)

    def _repr_mimebundle_(self, include=None, exclude=None):
        head, pic, table = self._parts()
        return {"text/plain": self._text(), "text/html": head + pic + table}

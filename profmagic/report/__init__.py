"""The display of every Profile: a live widget under a kernel, static HTML everywhere else.

- ``static``: header, SVG icicle, tables and downloads as self-contained HTML (no script);
- ``widget``: the live report (tabs Icicle | Sandwich | Source | Time order | [Ranks] | [Tasks] | Table | Raw);
- ``display``: which of them a Profile shows, and the repr with the error when building fails.
"""
from __future__ import annotations

from ..views.mime import PLOTLY_MIME
from .display import fallback, mimebundle, show, warm_up
from .static import downloads_html, header_html, notes, static_html, table_html
from .widget import Report, widget

__all__ = ["PLOTLY_MIME", "Report", "downloads_html", "fallback", "header_html", "mimebundle", "notes",
           "show", "static_html", "table_html", "warm_up", "widget"]

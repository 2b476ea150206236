"""Views over a Profile: plotly figures (icicle, sandwich, timeline). Views never run a profiler.

Every string that comes from a profile (function, file and thread names) is untrusted: plotly
interprets a subset of HTML in labels, hovers and titles, so it goes through ``esc`` first.
"""
from __future__ import annotations

import html

from ..analysis import fmt, fmt_bytes, hover_unit, metric_label
from ..model import Profile

__all__ = ["esc", "fmt", "fmt_bytes", "hover_unit", "metric_label", "title"]
MAX_LABEL = 120


def esc(s, limit: int | None = MAX_LABEL) -> str:
    """Untrusted text made safe for plotly labels and HTML element content: shortened, then
    <, > and & escaped (plotly does not decode &quot;, and quotes are harmless outside attributes)."""
    s = str(s)
    if limit and len(s) > limit:
        s = s[:limit - 1] + "…"
    return html.escape(s, quote=False)


def title(profile: Profile, metric: str, what: str, thread: str | None = None, note: str = "") -> str:
    """An honest title: the view, the metric, backend, rate, sample count, duration; escaped."""
    label = profile.replace(metric=metric).describe() if metric != profile.metric else profile.describe()
    t = f"{what} · {'all threads' if thread is None else 'thread ' + str(thread)}"
    out = f"<b>{esc(t, 200)}</b><br><span style='font-size:11px'>{esc(label, 400)}"
    if note:
        out += "<br>" + esc(note, 400)
    return out + "</span>"

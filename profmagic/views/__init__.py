"""Views over a Profile: plotly figures (icicle, sandwich, timeline). Views never run a profiler.

Every string that comes from a profile (function, file and thread names) is untrusted: plotly
interprets a subset of HTML in labels, hovers and titles, so it goes through ``esc`` first.
"""
from __future__ import annotations

import html

from ..model import MEMORY_METRICS, METRIC_LABELS, Profile

# Colour per frame kind, and a palette for modules (colour-blind-safe Tableau 10).
KIND_COLOURS = {"python": "#4c78a8", "native": "#f58518", "kernel": "#e45756", "other": "#9d9d9d"}
PALETTE = ["#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#eeca3b", "#b279a2",
           "#ff9da6", "#9d755d", "#bab0ac"]
GREY = "#d0d0d0"
MAX_LABEL = 120


def esc(s, limit: int | None = MAX_LABEL) -> str:
    """Untrusted text made safe for plotly labels and HTML element content: shortened, then
    <, > and & escaped (plotly does not decode &quot;, and quotes are harmless outside attributes)."""
    s = str(s)
    if limit and len(s) > limit:
        s = s[:limit - 1] + "…"
    return html.escape(s, quote=False)


def metric_label(metric: str) -> str:
    return METRIC_LABELS.get(metric, metric)


def title(profile: Profile, metric: str, what: str, thread: str | None = None, note: str = "") -> str:
    """An honest title: the view, the metric, backend, rate, sample count, duration; escaped."""
    label = profile.replace(metric=metric).describe() if metric != profile.metric else profile.describe()
    t = f"{what} · {'all threads' if thread is None else 'thread ' + str(thread)}"
    out = f"<b>{esc(t, 200)}</b><br><span style='font-size:11px'>{esc(label, 400)}"
    if note:
        out += "<br>" + esc(note, 400)
    return out + "</span>"


def fmt(metric: str, v: float) -> str:
    """A weight in its unit: samples and allocations as integers, bytes in B/KiB/MiB/GiB, times in s/ms."""
    if v != v:
        return "unknown"
    if metric in ("samples", "allocations"):
        return f"{v:,.0f} {metric}"
    if metric in MEMORY_METRICS:
        return fmt_bytes(v)
    if abs(v) >= 1 or v == 0:
        return f"{v:.3f} s"
    return f"{v * 1e3:.3g} ms"


def fmt_bytes(v: float) -> str:
    """Bytes in binary units, as memray prints them (1 MiB = 1,048,576 bytes)."""
    for unit in ("B", "KiB", "MiB"):
        if abs(v) < 1024:
            return f"{v:,.0f} B" if unit == "B" else f"{v:.4g} {unit}"
        v /= 1024
    return f"{v:.4g} GiB"


def hover_unit(metric: str) -> str:
    """The unit suffix after a number in a hover: " B" for bytes, nothing for counts, else " s"."""
    return {"bytes": " B", "allocated": " B", "samples": "", "allocations": ""}.get(metric, " s")

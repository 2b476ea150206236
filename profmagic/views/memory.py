"""Memory views: the memory-over-time strip (memray's heap against time, the high-water mark marked)
as a plotly figure and as a static SVG twin with no script, and time beside memory per function.

The strip reads ``meta["memory_timeline"]`` (formats/memray.py): memray's snapshots of the heap (bytes
it saw allocated and not yet freed) every 10 ms, the heap's highest point between snapshots when memray
kept every allocation, and when the high-water mark was reached, when that is known.
"""
from __future__ import annotations

import html
import math

import numpy as np
import pandas as pd

from ..model import Profile
from . import esc, fmt, fmt_bytes

PEAK_COLOUR = "#d62728"
HEAP_COLOUR = "#4c78a8"


def timeline(profile: Profile) -> dict | None:
    """The memory timeline of ``profile``, checked: equal-length numeric series, or None."""
    tl = profile.meta.get("memory_timeline")
    if not isinstance(tl, dict):
        return None
    t, heap = tl.get("time"), tl.get("heap")
    if not isinstance(t, list) or not isinstance(heap, list) or len(t) != len(heap):
        return None
    return tl


def available(profile: Profile) -> tuple[bool, str]:
    if timeline(profile) is None:
        src = profile.meta.get("backend") or profile.meta.get("format") or "this source"
        return False, f"{src} recorded no memory over time (memray does)"
    return True, ""


def _series(tl: dict) -> dict:
    """x (seconds), heap, rss, the step of interval peaks, the peak and when, and what x counts from."""
    shift = float(tl.get("starts_after_time_recorder") or 0.0)
    t = [0.0] + [float(x) for x in tl["time"]]   # memray's heap counts from 0 when tracking starts
    heap = [0.0] + [float(h) for h in tl["heap"]]
    rss = tl.get("rss") if isinstance(tl.get("rss"), list) and len(tl["rss"]) == len(tl["time"]) else None
    peak = float(tl.get("peak_bytes") or max(heap))
    out = {"x": [x + shift for x in t], "heap": heap, "rss": [float(r) for r in rss] if rss else None,
           "peak": peak, "between": None, "steps": None,
           "origin": "the time recorder's start" if "starts_after_time_recorder" in tl else "memray's start"}
    pb = tl.get("peak_between")
    if isinstance(pb, list) and len(pb) == 2:
        out["between"] = (float(pb[0]) + shift, float(pb[1]) + shift)
    ip = tl.get("interval_peaks")
    if isinstance(ip, list) and ip:   # interval i: from snapshot i-1 (or the start) to snapshot i (or the end)
        bounds = t + [max(float(tl.get("end") or 0.0), t[-1])]
        xs, ys = [], []
        for i, v in enumerate(ip[:len(bounds) - 1]):
            xs += [bounds[i] + shift, bounds[i + 1] + shift]
            ys += [float(v), float(v)]
        out["steps"] = (xs, ys)
    return out


def caption(profile: Profile) -> str:
    """What the strip shows, in words (plain text; escape before use in HTML)."""
    tl = timeline(profile)
    if tl is None:
        return available(profile)[1]
    s = _series(tl)
    when = (f"reached between {s['between'][0]:.3f} and {s['between'][1]:.3f} s" if s["between"] else
            "when it was reached is not known: no snapshot caught it" + (
                " (aggregated recording; --allocated records the heap's highest point between snapshots)"
                if s["steps"] is None else ""))
    version = profile.meta.get("memray")
    if tl.get("sampled"):   # profmagic's sampled tracker (formats/memsample.py)
        return (f"Memory over time · heap: live bytes estimated from sampled allocations, all threads, every "
                f"10 ms · high-water mark {fmt_bytes(s['peak'])} (estimated), {when} · seconds since {s['origin']}")
    return (f"Memory over time · heap: bytes memray{' ' + str(version) if version else ''} saw allocated and not "
            f"yet freed, all threads, one snapshot every 10 ms · high-water mark {fmt_bytes(s['peak'])}, {when} · "
            f"seconds since {s['origin']}")


def figure(profile: Profile, height: int = 260):
    """The strip as a plotly figure: heap (line), the heap's highest point between snapshots (steps,
    when recorded), RSS (hidden; click its legend entry), the high-water mark (dashed) and when it was
    reached (shaded)."""
    import plotly.graph_objects as go
    tl = timeline(profile)
    if tl is None:
        raise ValueError(available(profile)[1])
    s = _series(tl)
    fig = go.Figure()
    if s["steps"] is not None:
        fig.add_trace(go.Scatter(x=s["steps"][0], y=s["steps"][1], mode="lines", name="highest between snapshots",
                                 line=dict(color=HEAP_COLOUR, width=1, dash="dot"),
                                 hovertemplate="%{y:,.0f} B highest in this interval<extra></extra>"))
    fig.add_trace(go.Scatter(x=s["x"], y=s["heap"], mode="lines+markers", name="heap (snapshots)",
                             line=dict(color=HEAP_COLOUR, width=2), marker=dict(size=4),
                             hovertemplate="t = %{x:.3f} s<br>heap %{y:,.0f} B<extra></extra>"))
    if s["rss"]:
        fig.add_trace(go.Scatter(x=s["x"][1:], y=s["rss"], mode="lines", name="RSS (the whole process)",
                                 visible="legendonly", line=dict(color="#999", dash="dash"),
                                 hovertemplate="t = %{x:.3f} s<br>RSS %{y:,.0f} B<extra></extra>"))
    fig.add_hline(y=s["peak"], line=dict(color=PEAK_COLOUR, dash="dash", width=1),
                  annotation_text=f"high-water mark {esc(fmt_bytes(s['peak']))}", annotation_position="top left")
    if s["between"]:
        lo, hi = s["between"]
        fig.add_vrect(x0=lo, x1=max(hi, lo + 1e-3), fillcolor=PEAK_COLOUR, opacity=0.15, line_width=0,
                      annotation_text="peak reached", annotation_position="bottom right")
    head, _, rest = caption(profile).partition(" · high-water mark")
    ticks = byte_ticks(max(s["peak"], max(s["heap"])))
    fig.update_layout(
        title=dict(text=f"<span style='font-size:12px'>{esc(head, 400)}<br>high-water mark{esc(rest, 400)}"
                        "</span>", x=0.01),
        height=height, margin=dict(l=8, r=8, t=60, b=8), legend=dict(orientation="h", y=-0.25),
        xaxis=dict(title=f"seconds since {s['origin']}", rangemode="tozero"),
        yaxis=dict(title="bytes", rangemode="tozero", tickvals=[v for v, _ in ticks],
                   ticktext=[t for _, t in ticks]))
    return fig


def _ticks(hi: float, n: int = 5) -> list[float]:
    """Round tick values from 0 to ``hi``."""
    if hi <= 0:
        return [0.0]
    step = 10 ** math.floor(math.log10(hi / n))
    for m in (1, 2, 5, 10):
        if hi / (step * m) <= n:
            step *= m
            break
    return [i * step for i in range(int(hi / step) + 1)]


def byte_ticks(hi: float, n: int = 4) -> list[tuple[float, str]]:
    """Round ticks from 0 to ``hi`` bytes in one binary unit (0, 5 MiB, 10 MiB, ...), as fmt_bytes writes them."""
    k = 0
    while k < 3 and hi >= 1024 ** (k + 1):
        k += 1
    unit, name = 1024 ** k, ("B", "KiB", "MiB", "GiB")[k]
    return [(v * unit, f"{v:g} {name}") for v in _ticks(hi / unit, n)]


def svg(profile: Profile, width: int = 960, height: int = 150) -> str:
    """The strip as a static SVG (no script): heap line, the highest point between snapshots when
    recorded, the high-water mark (dashed, labelled) and when it was reached (shaded)."""
    tl = timeline(profile)
    if tl is None:
        return f"<p>({esc(available(profile)[1], 300)})</p>"
    s = _series(tl)
    left, right, top, bottom = 70, 10, 16, 22
    xs = s["x"] + (s["steps"][0] if s["steps"] else [])
    x_hi = max(max(xs), 1e-3)
    y_hi = max(s["peak"], max(s["heap"]), 1.0) * 1.08
    w, h = width - left - right, height - top - bottom

    def X(v):
        return left + w * v / x_hi

    def Y(v):
        return top + h * (1 - v / y_hi)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="profmagic-memory-strip" width="{width}" '
           f'height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="10">',
           f"<title>{esc(caption(profile), 600)}</title>"]
    for v, text in byte_ticks(y_hi / 1.08, 3):
        out.append(f'<line x1="{left}" x2="{width - right}" y1="{Y(v):.1f}" y2="{Y(v):.1f}" stroke="#eee"/>'
                   f'<text x="{left - 4}" y="{Y(v) + 3:.1f}" text-anchor="end" fill="#555">{html.escape(text)}</text>')
    for v in _ticks(x_hi, 8):
        out.append(f'<text x="{X(v):.1f}" y="{height - 8}" text-anchor="middle" fill="#555">{v:g} s</text>')
    if s["between"]:
        lo, hi = s["between"]
        out.append(f'<rect class="profmagic-peak-when" x="{X(lo):.1f}" y="{top}" width="{max(X(hi) - X(lo), 2):.1f}" '
                   f'height="{h}" fill="{PEAK_COLOUR}" opacity="0.15"><title>the high-water mark was reached between '
                   f'{lo:.3f} and {hi:.3f} s</title></rect>')
    if s["steps"]:
        pts = " ".join(f"{X(a):.1f},{Y(b):.1f}" for a, b in zip(*s["steps"]))
        out.append(f'<polyline points="{pts}" fill="none" stroke="{HEAP_COLOUR}" stroke-width="1" '
                   'stroke-dasharray="2,2"><title>the heap\'s highest point between snapshots</title></polyline>')
    pts = " ".join(f"{X(a):.1f},{Y(b):.1f}" for a, b in zip(s["x"], s["heap"]))
    out.append(f'<polyline class="profmagic-heap" points="{pts}" fill="none" stroke="{HEAP_COLOUR}" '
               f'stroke-width="2"><title>heap at each snapshot</title></polyline>')
    label = f"high-water mark {fmt_bytes(s['peak'])}"
    out.append(f'<line class="profmagic-peak" x1="{left}" x2="{width - right}" y1="{Y(s["peak"]):.1f}" '
               f'y2="{Y(s["peak"]):.1f}" stroke="{PEAK_COLOUR}" stroke-dasharray="5,3"/>'
               f'<text x="{left + 4}" y="{Y(s["peak"]) - 3:.1f}" fill="{PEAK_COLOUR}">{html.escape(label)}</text>')
    out.append(f'<line x1="{left}" x2="{left}" y1="{top}" y2="{top + h}" stroke="#999"/>'
               f'<line x1="{left}" x2="{width - right}" y1="{top + h}" y2="{top + h}" stroke="#999"/></svg>')
    return "".join(out)


def strip_html(profile: Profile, width: int = 960) -> str:
    """The static strip with its caption, for the report's static twin."""
    return (f"<div class='profmagic-memory' style='font:12px sans-serif;margin:6px 0 2px'>"
            f"{esc(caption(profile), 600)}</div>" + svg(profile, width))


# -- time beside memory ----------------------------------------------------------------------------------
TIME_AND_MEMORY = ("wall", "cpu", "off_cpu", "bytes", "allocated")


def side_by_side(p: Profile) -> pd.DataFrame:
    """Per function: wall, CPU and off-CPU time and bytes at the high-water mark (totals, callees
    included), and bytes allocated when recorded; heaviest wall first (CPU, then bytes, when unknown)."""
    cols = [m for m in TIME_AND_MEMORY if m in p.metrics]
    if not cols:
        raise ValueError("this profile has neither time nor memory metrics")
    out = p.functions(cols[0])[["name", "file"]].sort_index()
    for m in cols:  # every function on some stack has a row in every metric (0 when it has none)
        out[m] = p.functions(m)["total"]
    order = next(m for m in ("wall", "cpu", "bytes", "allocated") if m in out)
    return out.sort_values(order, ascending=False, kind="stable")


def has_time_and_memory(p: Profile) -> bool:
    known = p.metrics
    return any(m in known for m in ("wall", "cpu")) and "bytes" in known


def side_by_side_html(p: Profile, top: int = 25) -> str:
    """The side-by-side table as HTML (every name escaped)."""
    df = side_by_side(p).head(top)
    show = pd.DataFrame({"function": df["name"].astype(str)})
    for m in [c for c in TIME_AND_MEMORY if c in df]:
        show[p.label(m)] = [fmt(m, float(v)) for v in df[m].to_numpy(dtype=np.float64)]
    show["file"] = df["file"].astype(str)
    return show.to_html(index=False, escape=True, border=0, classes="profmagic-time-memory")

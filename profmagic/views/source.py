"""Source view: the cell's lines, or a function's, each with its time as a heat strip beside the code.

Per line: wall and CPU time (and off-CPU, their difference) where measured, and samples: every
stack through a frame at that line counts once (``analysis.line_table``). The strip is the line's
share of the hottest line: solid for on-CPU time, hatched for off-CPU time. The hottest lines are
listed first. Script-free HTML, every string escaped: the same in the live widget and the static
twin. Python sources come from the cell (``meta["cell"]``), IPython's cell cache or the file; native
sources (perf and eu-stack with debug info) from the file where it is readable.
"""
from __future__ import annotations

import ast
import linecache
import os

import numpy as np
import pandas as pd

from .. import analysis
from ..model import Profile
from . import esc, fmt, metric_label

STRIP = 140      # pixels of the hottest line's strip
HOT = 3          # lines listed first
CONTEXT = 3      # lines shown around a native function's lines
CPU_FILL, OFF_FILL = "#d6604d", "repeating-linear-gradient(45deg,#d6604d 0 2px,#fbe3dc 2px 5px)"


def source_lines(profile: Profile, file: str) -> list[str] | None:
    """The lines of ``file`` as the profile names it (the cell, ``In[N]`` or a path), or None."""
    if file == analysis.cell_file(profile) and profile.meta.get("cell"):
        return str(profile.meta["cell"]).splitlines()
    real = {v: k for k, v in (profile.meta.get("renamed_files") or {}).items()}.get(file, file)
    lines = linecache.getlines(real)
    if not lines and os.path.isfile(real):
        try:
            with open(real, encoding="utf-8", errors="replace") as f:
                lines = f.readlines()
        except OSError:
            lines = []
    return [ln.rstrip("\n") for ln in lines] or None


def _function_range(lines: list[str], name: str, seen: list[int], python: bool) -> tuple[int, int]:
    """First and last line number (1-based) to show for a function whose frames ran ``seen`` lines:
    its whole definition for Python (found with ast), the lines seen with some context otherwise."""
    lo, hi = min(seen), max(seen)
    if python:
        try:
            tree = ast.parse("\n".join(lines))
        except (SyntaxError, ValueError):
            tree = None
        short = name.rsplit(".", 1)[-1]
        best = None
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == short \
                    and node.lineno <= lo and (node.end_lineno or node.lineno) >= hi:
                if best is None or node.lineno > best.lineno:   # the innermost definition
                    best = node
        if best is not None:
            first = min([best.lineno] + [d.lineno for d in best.decorator_list])
            return first, best.end_lineno or hi
    return max(1, lo - CONTEXT), min(len(lines), hi + CONTEXT)


def _clocks(profile: Profile) -> list[str]:
    return [m for m in ("wall", "cpu") if m in profile.metrics] or ["samples"]


def _strip(row: pd.Series, top: float, metric: str) -> str:
    total = float(row.get(metric, row["samples"]))
    width = STRIP * total / top if top > 0 else 0.0
    if metric == "wall" and "cpu" in row.index and total > 0:
        on = width * min(float(row["cpu"]) / total, 1.0)
        return (f"<span style='display:inline-block;height:10px;width:{on:.1f}px;background:{CPU_FILL}'></span>"
                f"<span style='display:inline-block;height:10px;width:{width - on:.1f}px;background:{OFF_FILL}'>"
                "</span>")
    return f"<span style='display:inline-block;height:10px;width:{width:.1f}px;background:{CPU_FILL}'></span>"


def html(profile: Profile, file: str, *, function: int | None = None, thread: str | None = None,
         caption: str = "") -> str:
    """The source view of ``file`` (all its lines that ran; with ``function``, that function's
    definition) as script-free HTML."""
    table = analysis.line_table(profile, file, thread, function)
    what = caption or file
    if not len(table):
        return f"<div class='profmagic-source'><p>No samples at a line of {esc(what)}.</p></div>"
    lines = source_lines(profile, file)
    metric = profile.metric if profile.metric in table else "samples"
    clocks = _clocks(profile)
    seen = [int(x) for x in table.index]
    if lines is None:
        body = f"<p>Source of {esc(file)} is not readable here; the lines that ran are listed above.</p>"
        lo, hi = None, None
    else:
        if function is not None:
            kind = str(profile.frames.loc[profile.function_ids()[profile.frames.index.to_numpy()] == function,
                                          "kind"].iloc[0])
            lo, hi = _function_range(lines, str(_function_name(profile, function)), seen, kind == "python")
        else:
            lo, hi = 1, len(lines)
        body = _listing(lines, table, lo, hi, metric, clocks)
    total = float(np.nansum(profile.weights(metric).to_numpy(dtype=np.float64))) if metric != "samples" \
        else float(profile.sample_count)
    hot = "".join(_hot_item(n, table.loc[n], lines, metric, clocks, total) for n in table.index[:HOT])
    return (f"<div class='profmagic-source' style='font:12px sans-serif'><div><b>Source · {esc(what)}</b> · "
            f"{esc(' and '.join(metric_label(c) for c in clocks))} per line (a line counts each stack through it "
            "once); strip: solid on-CPU, hatched off-CPU</div>"
            f"<div>hottest lines:</div><ol class='profmagic-hot'>{hot}</ol>{body}</div>")


def _function_name(profile: Profile, function: int) -> str:
    fn = profile.function_ids()[profile.frames.index.to_numpy()]
    return str(profile.frames["name"].to_numpy()[fn == function][0])


def _numbers(row: pd.Series, clocks: list[str]) -> str:
    parts = [f"{metric_label(c).split(' (')[0]} {fmt(c, float(row[c]))}" for c in clocks if c != "samples"]
    return " · ".join(parts + [f"{int(row['samples']):,} samples"])


def _hot_item(n: int, row: pd.Series, lines, metric: str, clocks: list[str], total: float) -> str:
    code = lines[n - 1].strip() if lines and 0 < n <= len(lines) else ""
    share = f" ({100 * float(row[metric]) / total:.0f}% of the profile)" if total > 0 else ""
    return (f"<li class='profmagic-hot-line' data-line='{n}'>line {n}: {esc(_numbers(row, clocks))}{esc(share)}"
            f"{' · <code>' + esc(code, 200) + '</code>' if code else ''}</li>")


def _listing(lines: list[str], table: pd.DataFrame, lo: int, hi: int, metric: str, clocks: list[str]) -> str:
    top = float(table[metric].max()) if len(table) else 0.0
    hottest = int(table.index[0])
    head = "".join(f"<th style='text-align:right'>{esc(metric_label(c).split(' (')[0])}</th>"
                   for c in clocks if c != "samples")
    out = [f"<table class='profmagic-source-table' style='border-collapse:collapse;font:12px monospace'>"
           f"<tr><th>line</th>{head}<th style='text-align:right'>samples</th><th></th><th style='text-align:left'>"
           "code</th></tr>"]
    for n in range(lo, hi + 1):
        code = lines[n - 1] if n - 1 < len(lines) else ""
        row = table.loc[n] if n in table.index else None
        cls = "profmagic-src-line" + (" profmagic-hottest" if n == hottest else "")
        style = " style='background:#fff3e0'" if n == hottest else ""
        nums = "".join(f"<td style='text-align:right;padding:0 6px'>{fmt(c, float(row[c])) if row is not None else ''}"
                       "</td>" for c in clocks if c != "samples")
        count = f"{int(row['samples']):,}" if row is not None else ""
        strip = _strip(row, top, metric) if row is not None else ""
        out.append(f"<tr class='{cls}' data-line='{n}'{style}><td style='color:#888;text-align:right;padding:0 6px'>"
                   f"{n}</td>{nums}<td style='text-align:right;padding:0 6px'>{count}</td>"
                   f"<td style='width:{STRIP}px;padding:0 6px'>{strip}</td>"
                   f"<td style='white-space:pre;text-align:left'>{esc(code, 400)}</td></tr>")
    out.append("</table>")
    return "".join(out)


def cell_html(profile: Profile, thread: str | None = None) -> str | None:
    """The cell's own lines with their time, or None when the profile has no cell."""
    file = analysis.cell_file(profile)
    if file is None or not profile.meta.get("cell"):
        return None
    return html(profile, file, thread=thread, caption=f"{file} (this cell)")


def function_html(profile: Profile, function: int, thread: str | None = None) -> str:
    """The source of function ``function`` (an id of ``Profile.function_ids``) with its time per line."""
    fn = profile.function_ids()[profile.frames.index.to_numpy()]
    rows = profile.frames[fn == function]
    if not len(rows):
        raise ValueError(f"no function id {function}")
    name, file = str(rows["name"].iloc[0]), str(rows["file"].iloc[0])
    if not file:
        return f"<div class='profmagic-source'><p>{esc(name)}: its frames carry no file, so no source.</p></div>"
    return html(profile, file, function=function, thread=thread, caption=f"{name} · {file}")

"""The last runs of each profiled cell, per kernel (issue 25 item 3).

A cell is known by the id its front end gives it (IPython's ``pre_run_cell`` hook sees
``info.cell_id``: JupyterLab and Notebook 7 send one), else by its source; the magic's options are
not part of the key, so a run with another backend is the same cell, and is refused a comparison.

Bounded: ``RUNS`` runs per cell, ``CELLS`` cells (the least recently run is forgotten). Every run keeps
a summary (its settings and total); only the newest ``KEEP`` runs of a cell keep a compact copy of
their profile (no raw file), and only while all kept copies together stay under ``MAX_BYTES``:
beyond that the oldest copies are dropped to their summary. A history entry never holds the
report's profile itself (report/keep.py releases that).
"""
from __future__ import annotations

import hashlib
import html
import time
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from . import uncertainty

RUNS = 10                # runs remembered per cell
CELLS = 50               # cells remembered per kernel
KEEP = 2                 # newest runs per cell that keep a compact profile (for the differential view)
MAX_BYTES = 64 * 2**20   # all kept compact profiles together

_shown: list = []   # the newest last-run lines' widgets (as many as reports keep alive: keep.LIVE)
_cells: OrderedDict = OrderedDict()   # key -> list[Run], oldest first; the least recently run cell first
_cell_id: list = [None]               # the running cell's id, from the pre_run_cell hook


@dataclass
class Run:
    number: int                # the cell's execution count
    when: float                # time.time()
    backend: str
    mode: str | None
    rate: float | None
    timing: str | None
    metric: str
    total: float               # seconds (or the metric's unit) of the whole profile
    label: str                 # the cell, in a few words
    profile: object = None     # a compact Profile, or None (summary only)
    nbytes: int = 0
    line: str = field(default="")


# -- the cell's identity ---------------------------------------------------------------------------
def note_cell(info=None) -> None:
    """``pre_run_cell`` hook: remember the running cell's id (None where the front end gives none)."""
    _cell_id[0] = getattr(info, "cell_id", None) or None


def key(code: str, line: bool = False) -> str:
    """The cell's key: its id where known (a line magic adds its statement), else its source."""
    cid = _cell_id[0]
    if cid and not line:
        return f"id:{cid}"
    digest = hashlib.sha256(code.strip().encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"id:{cid}:{digest}" if cid else f"src:{digest}"


# -- remembering -------------------------------------------------------------------------------------
def _compact(profile):
    """A copy without the raw file, and its size in bytes (frames, stacks and samples)."""
    p = profile.replace(raw=None)
    n = int(p.frames.memory_usage(deep=False).sum() + p.stacks.memory_usage(deep=False).sum())
    n += 8 * int(sum(len(s) for s in p.stacks["stack"])) + 64 * len(p.stacks)   # the stack tuples
    if p.samples is not None:
        n += int(p.samples.memory_usage(deep=False).sum())
    return p, n


def remember(cell_key: str, profile, number: int, label: str) -> tuple[Run | None, Run]:
    """Add ``profile`` as the newest run of ``cell_key``: (the cell's previous run or None, this run)."""
    m = profile.meta
    metric = profile.metric
    total = float(np.nansum(profile.weights(metric).to_numpy(np.float64))) if len(profile.stacks) else 0.0
    run = Run(number=number, when=time.time(), backend=str(m.get("backend") or "?"), mode=m.get("mode"),
              rate=_float(m.get("requested_rate") or m.get("rate")), timing=m.get("timing"), metric=metric,
              total=total, label=label)
    if MAX_BYTES > 0 and KEEP > 0:
        run.profile, run.nbytes = _compact(profile)
        if run.nbytes > MAX_BYTES:
            run.profile, run.nbytes = None, 0
    runs = _cells.pop(cell_key, [])
    prev = runs[-1] if runs else None
    runs.append(run)
    del runs[:-max(1, int(RUNS))]
    for r in runs[:-max(0, int(KEEP))] if KEEP > 0 else runs:
        r.profile, r.nbytes = None, 0
    _cells[cell_key] = runs
    while len(_cells) > max(1, int(CELLS)):
        _cells.popitem(last=False)
    _trim()
    return prev, run


def _trim() -> None:
    """Drop the oldest kept profiles until all of them fit in MAX_BYTES."""
    kept = sorted((r for runs in _cells.values() for r in runs if r.profile is not None), key=lambda r: r.when)
    total = sum(r.nbytes for r in kept)
    for r in kept:
        if total <= MAX_BYTES:
            break
        total -= r.nbytes
        r.profile, r.nbytes = None, 0


def kept_bytes() -> int:
    return sum(r.nbytes for runs in _cells.values() for r in runs)


def clear() -> None:
    _cells.clear()


def _float(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


# -- comparing -------------------------------------------------------------------------------------------
def refusal(a: Run, b: Run) -> str | None:
    """Why run ``b`` cannot be compared with run ``a`` of the same cell (None: it can)."""
    if a.backend != b.backend:
        return (f"its last run (In [{a.number}]) used --backend {a.backend} and this one {b.backend}: "
                "backends sample and weigh differently, so a difference would be theirs, not the code's")
    if a.metric != b.metric and "both" not in (a.mode, b.mode):
        return (f"its last run (In [{a.number}]) measured {a.metric} time and this one {b.metric}: "
                "different clocks")
    if a.timing and b.timing and a.timing != b.timing:
        return (f"its last run (In [{a.number}]) was weighed {a.timing} and this one {b.timing} "
                "(py-spy's weighing follows --rate and --timing): give both runs the same --rate and --timing")
    if a.rate and b.rate and max(a.rate, b.rate) > 2 * min(a.rate, b.rate) and a.metric == "samples":
        return (f"its last run (In [{a.number}]) sampled at {a.rate:g} Hz and this one at {b.rate:g} Hz: "
                "sample counts scale with the rate")
    why = _not_comparable(a.profile, b.profile)
    if why:
        return f"against its last run (In [{a.number}]): " + "; ".join(why)
    return None


def _not_comparable(a, b) -> list[str]:
    return [] if a is None or b is None else list(uncertainty.not_comparable(a, b))


def significance(a: Run, b: Run) -> str | None:
    """"significant" or "within noise" for the change of total, from the two runs' 95% intervals of
    their largest function (the cell's outermost frame); None where they are not known."""
    if a.profile is None or b.profile is None:
        return None
    try:
        h = []
        for r in (a, b):
            f = r.profile.functions(r.metric)
            if "total_lo" not in f or not len(f):
                return None
            i = int(np.argmax(f["total"].to_numpy(np.float64)))
            h.append((float(f["total_lo"].iloc[i]), float(f["total_hi"].iloc[i]), float(f["total"].iloc[i])))
        sig = uncertainty.significant(h[1][2] - h[0][2], h[0][0] - h[0][2], h[0][1] - h[0][2],
                                      h[1][0] - h[1][2], h[1][1] - h[1][2])
        return "significant" if bool(np.asarray(sig).item()) else "within noise"
    except (KeyError, ValueError, TypeError):
        return None


def last_run_line(prev: Run | None, run: Run) -> str | None:
    """The report's line, e.g. "wall −85% against this cell's last run (In [3], 2.41 s → 0.36 s;
    significant)", or why the two are not compared; None for a cell's first run."""
    if prev is None:
        return None
    why = refusal(prev, run)
    if why:
        return f"Not compared with this cell's last run: {why}."
    word = significance(prev, run)
    unit = "s" if run.metric in ("wall", "cpu") else run.metric
    if prev.total > 0:
        pct = (run.total - prev.total) / prev.total * 100
        change = f"{'+' if pct >= 0 else '−'}{abs(pct):.0f}%"
    else:
        change = "new"
    return (f"{run.metric} {change} against this cell's last run (In [{prev.number}], "
            f"{prev.total:.3g} {unit} → {run.total:.3g} {unit}" + (f"; {word}" if word else "") + ")")


def compare_last(cell_key: str | None = None):
    """The differential view of a cell's last two runs (the most recently run cell by default)."""
    from .views.diff import compare
    if cell_key is None:
        if not _cells:
            raise ValueError("no profiled cell yet")
        cell_key = next(reversed(_cells))
    runs = _cells.get(cell_key) or []
    if len(runs) < 2:
        raise ValueError("this cell has run once: nothing to compare yet")
    a, b = runs[-2], runs[-1]
    why = refusal(a, b)
    if why:
        raise ValueError(f"not comparable: {why}")
    if a.profile is None or b.profile is None:
        raise ValueError("the runs' profiles were not kept (history.MAX_BYTES); only their summaries are")
    return compare(a.profile, b.profile, labels=(f"In [{a.number}]", f"In [{b.number}]"))


# -- showing ------------------------------------------------------------------------------------------------
def listing():
    """Every remembered run, newest cell first: a DataFrame."""
    import pandas as pd
    rows = []
    for k, runs in reversed(_cells.items()):
        prev = None
        for r in runs:
            rows.append({"cell": r.label, "run": f"In [{r.number}]",
                         "when": time.strftime("%H:%M:%S", time.localtime(r.when)), "backend": r.backend,
                         "mode": r.mode, "rate": r.rate, "timing": r.timing, "metric": r.metric,
                         "total": r.total, "against the run before": (last_run_line(prev, r) or "") if prev else "",
                         "profile kept": r.profile is not None})
            prev = r
    return pd.DataFrame(rows, columns=["cell", "run", "when", "backend", "mode", "rate", "timing", "metric", "total",
                                       "against the run before", "profile kept"])


class LastRun:
    """The last-run line under the report: with ipywidgets, a button opens the differential view."""

    def __init__(self, text: str, cell_key: str, comparable: bool):
        self.text, self.cell_key, self.comparable = text, cell_key, comparable

    def __repr__(self) -> str:
        return self.text

    def _html(self) -> str:
        return f"<div class='profmagic-last-run' style='font-family:sans-serif;font-size:13px'>{html.escape(self.text)}</div>"

    def _ipython_display_(self):
        from IPython.display import display
        try:
            import ipywidgets as w
        except ImportError:
            w = None
        if w is None or not self.comparable:
            display({"text/plain": self.text, "text/html": self._html()}, raw=True)
            return
        button = w.Button(description="Differential view", tooltip="compare this run with the cell's last run")
        out = w.Output()

        def click(_):
            button.disabled = True
            with out:
                try:
                    display(compare_last(self.cell_key))
                except ValueError as e:
                    print(f"profmagic: {e}")
        button.on_click(click)
        box = w.VBox([w.HBox([w.HTML(self._html()), button]), out])
        bundle = box._repr_mimebundle_()
        bundle.update({"text/plain": self.text, "text/html": self._html()})   # where widgets do not render
        display(bundle, raw=True)
        _bound(box)


def _bound(box) -> None:
    """Keep the newest lines' widgets open, as many as reports keep their profile (report/keep.py);
    an older line's are closed (ipywidgets keeps every open widget alive, and a long session grew by
    17 a cell). Its line then leaves the live page; a saved notebook keeps its text."""
    from .report import keep
    from .report.widget import _close
    _shown.append(box)
    while len(_shown) > max(0, int(keep.LIVE)):
        _close([_shown.pop(0)])


def after_run(code: str, profile, number: int, line: bool) -> LastRun | None:
    """Remember this run of the cell; the line to show under its report (None for a first run)."""
    k = key(code, line)
    label = " ".join(code.strip().split())[:40]
    prev, run = remember(k, profile, number, label)
    text = last_run_line(prev, run)
    run.line = text or ""
    if text is None:
        return None
    return LastRun(text, k, refusal(prev, run) is None and prev.profile is not None and run.profile is not None)

"""Cell end -> first interactive icicle (issue 27, item 3): a real `%%profile` cell in a fresh page of
JupyterLab and of Notebook 7 in Chromium, first report of the page and second, each page in a new
browser context (empty cache) with a new kernel; with `%load_ext profmagic`'s warm-up as shipped and,
side by side in the same run, with it reduced to its invisible figure and imports (as before issue 27) and
without it (plotly.js then runs at the first report). See
tests/first_icicle.py for what is timed.

    .venv/bin/python bench/bench_first_icicle.py [--runs 3] [--apps lab,notebook] [--no-write]

Writes its section of bench/RESULTS.md through bench/results.py unless --no-write.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
NAMES = {"lab": "JupyterLab", "notebook": "Notebook 7"}
WARM_UPS = {"warm-up": "as shipped", "figure": "figure only (before)", "none": "none"}


# %load_ext's warm-up as shipped; reduced to its figure (before issue 27); left out
VARIANTS = ("warm-up", "figure", "none")


def measure(app: str, runs: int) -> dict:
    """``runs`` fresh pages of ``app`` per variant, the variants alternating: per page, the first and
    second report's times (s)."""
    import browser as B
    import first_icicle as F
    out = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="bench-first-") as root, B.jupyter_server(root, app) as lab, \
            B.chromium() as br:
        for r in range(runs):
            for v in VARIANTS if r % 2 == 0 else VARIANTS[::-1]:
                setup = {"warm-up": "", "figure": F.FIGURE_ONLY, "none": F.NO_WARM_UP}[v] + F.SETUP
                page = F.fresh_page(lab, br, f"first-{v}-{r}.ipynb", setup)   # a new notebook: a new kernel
                try:
                    first = F.run_and_time(page, root, 1)
                    page.wait_for_timeout(1000)
                    second = F.run_and_time(page, root, 2)
                finally:
                    page.context.close()
                    F.shut_down_kernels(lab)
                out[v].append({"first": first, "second": second})
                print(app, v, r, out[v][-1], flush=True)
    return out


def load_average() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="fresh pages per front end")
    ap.add_argument("--apps", default="lab,notebook")
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args(argv)
    apps = a.apps.split(",")
    load0 = load_average()
    results = {app: measure(app, a.runs) for app in apps}
    cmd = f".venv/bin/python bench/bench_first_icicle.py --runs {a.runs}" + \
        (f" --apps {a.apps}" if a.apps != "lab,notebook" else "")

    def cell(rows, which, key):
        v = [r[which][key] for r in rows if r[which][key] is not None]
        if not v:
            return "never (hidden at once)"
        return f"{statistics.median(v):.2f} ({min(v):.2f}–{max(v):.2f})"

    def ratio(rows, which):   # per page, this report's plotly time over the same page's second report
        return f"{statistics.median(r[which]['plotly'] / r['second']['plotly'] for r in rows):.2f}"
    lines = ["", "## Report: cell end to the first interactive icicle (issue 27)", "",
             f"Command: `nice -n 19 {cmd}` ({time.strftime('%Y-%m-%d %H:%M')}, 2 cores shared with other "
             f"helpers' work, load average {load0} at the start and {load_average()} at the end). A "
             "`%%profile --backend sampler` cell of 1.5 s, run in a fresh page (a new browser context, empty "
             "cache, and a new kernel) right after `%load_ext profmagic`; then the same cell again in the same "
             "page. Seconds from the cell's last statement (`time.time()`, written by the cell) to (a) the "
             "static SVG icicle visible with the cell's function and (b) the plotly icicle visible with it "
             "(hover and click work), on the page's clock (`performance.timeOrigin + performance.now()`, the "
             "same system clock). Median (min–max) over the pages; the last column is the median over pages "
             "of (b) over the same page's second report. The pages take turns: `%load_ext`'s warm-up as shipped "
             "(an invisible plotly icicle, one undisplayed model of each widget class the report uses, and a "
             "report's first-use work on a two-frame profile), reduced to its invisible figure and imports (as "
             "before issue 27, but the figure is now an icicle), and none (plotly.js runs at the first report). Target: (b) ≤ 1 s.", "",
             "| front end | warm-up | report | (a) static SVG icicle (s) | (b) plotly icicle (s) | (b) / second's (b) |",
             "|---|---|---|---|---|---|"]
    for app, per in results.items():
        for v in VARIANTS:
            rows = per[v]
            for which, label in (("first", "first in the page"), ("second", "second")):
                lines.append(f"| {NAMES[app]} | {WARM_UPS[v]} | {label} | "
                             f"{cell(rows, which, 'svg')} | {cell(rows, which, 'plotly')} | {ratio(rows, which)} |")
    lines.append("")
    text = "\n".join(lines)
    print(text)
    if not a.no_write:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from results import write_section
        write_section(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

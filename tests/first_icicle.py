"""Cell end -> first visible icicle, in a fresh JupyterLab or Notebook 7 page in Chromium (issue 27,
item 3). Shared by tests/test_browser_first_icicle.py and bench/bench_first_icicle.py.

The profiled cell's last statement writes ``time.time()`` to ``cell_end.txt``; the page notes
``performance.timeOrigin + performance.now()`` (the same system clock) when (a) the static SVG icicle
and (b) a plotly icicle with the cell's function in it are visible. Only elements made after the
run was clicked count.
"""
from __future__ import annotations

import json
import os
import re
import urllib.request

import browser as B

SETUP = '''\
%load_ext profmagic
import time

def first_leaf(n):
    return sum(i * i for i in range(n))

def first_work(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        first_leaf(3000)
'''
# The user's cell: about 1.5 s of work; its last line marks the cell's end on the system clock.
PROFILED = ("%%profile --backend sampler\nfirst_work(1.5)\n"
            "open('cell_end.txt', 'w').write(repr(time.time()))")
LABEL = "first_work"

OBSERVE = """([cell, label]) => new Promise((resolve) => {
    const now = () => performance.timeOrigin + performance.now();
    const out = {svg: null, widget: null, plotly: null};
    cell.querySelectorAll('svg.profmagic-icicle, .js-plotly-plot').forEach(e => { e.__old = true; });
    const shown = e => { const r = e.getBoundingClientRect(); return !e.__old && r.width > 0 && r.height > 0
        && e.checkVisibility(); };
    const check = () => {
        if (out.svg === null && Array.from(cell.querySelectorAll('svg.profmagic-icicle')).some(s => shown(s)
                && Array.from(s.querySelectorAll('text')).some(t => t.textContent === label))) out.svg = now();
        if (out.widget === null && Array.from(cell.querySelectorAll('.profmagic-widget')).some(w => shown(w))) out.widget = now();
        if (out.plotly === null && Array.from(cell.querySelectorAll('.js-plotly-plot')).some(p => shown(p)
                && Array.from(p.querySelectorAll('g.slice text')).some(t => t.textContent === label))) out.plotly = now();
        if (out.plotly !== null) { obs.disconnect(); clearInterval(timer); resolve(out); }
    };
    const obs = new MutationObserver(check);
    obs.observe(cell, {subtree: true, childList: true, attributes: true});
    const timer = setInterval(check, 20);   // a style change (the twin hidden) is no mutation of the cell
})"""


def run_and_time(page, root: str, index: int, label: str = LABEL) -> dict:
    """Run cell ``index`` (a PROFILED cell) and return seconds from its end to the SVG icicle
    shown (``svg``, None if it never showed) and to the plotly icicle drawn (``plotly``)."""
    end_file = os.path.join(root, "cell_end.txt")
    if os.path.exists(end_file):
        os.unlink(end_file)
    cell = page.locator(".jp-Notebook .jp-CodeCell").nth(index)
    cell.scroll_into_view_if_needed()
    cell.locator(".jp-InputPrompt").click(force=True)
    page.evaluate("a => { window.__first = undefined; (%s)(a).then(o => { window.__first = o; }); }" % OBSERVE,
                  [cell.element_handle(), label])
    prompt = cell.locator(".jp-InputArea-prompt")
    run = page.locator(".jp-NotebookPanel-toolbar [data-command='notebook:run-cell-and-select-next']")
    for attempt in range(4):   # a click while the page is still settling can be lost (as browser.run_cell)
        run.click()
        try:
            prompt.filter(has_text=re.compile(r"\[\*\]")).wait_for(timeout=10_000)
            break
        except Exception:
            if attempt == 3:
                B.screenshot(page, f"first-icicle-{index}-not-run.png")
                raise
            cell.locator(".jp-InputPrompt").click(force=True)
    try:
        page.wait_for_function("() => window.__first !== undefined", timeout=120_000)
    except Exception:
        B.screenshot(page, f"first-icicle-{index}-never-drawn.png")
        raise
    seen = page.evaluate("() => window.__first")
    with open(end_file) as f:
        end = float(f.read()) * 1000
    return {k: None if v is None else (v - end) / 1000 for k, v in seen.items()}


# Baselines, put before SETUP: %load_ext's warm-up left out (plotly.js then runs at the first
# report), or reduced to its invisible figure and imports (as it was before issue 27).
NO_WARM_UP = "import profmagic.report\nprofmagic.report.warm_up = lambda: None  # a baseline\n"
FIGURE_ONLY = ("import profmagic.report.display as _D  # a baseline\n"
               "_D._warm_widgets = _D._warm_views = lambda: None\n")


def fresh_page(lab, browser, name: str, setup: str = SETUP):
    """A new notebook ``name`` (so a new kernel) of ``setup`` and two PROFILED cells, opened in a new
    page (a new browser context: empty cache) of the server ``lab``, with ``setup`` run."""
    B.write_notebook(os.path.join(lab.root, name), [setup, PROFILED, PROFILED])
    page = lab.open(browser, name)
    B.run_cell(page, 0)
    return page


def shut_down_kernels(lab) -> None:
    """Every kernel of the server ``lab`` shut down (a page's kernel outlives its closed page)."""
    url = f"{lab.base}/api/kernels?token={lab.token}"
    with urllib.request.urlopen(url, timeout=30) as r:
        kernels = json.load(r)
    for k in kernels:
        req = urllib.request.Request(f"{lab.base}/api/kernels/{k['id']}?token={lab.token}", method="DELETE")
        urllib.request.urlopen(req, timeout=30).close()


def hover_shows(page, cell, label: str = LABEL) -> str:
    """Hover the plotly box named ``label`` in ``cell``; return the hover label's text (plotly's
    own hover: the figure is interactive)."""
    box = cell.evaluate("""(e, label) => {
        for (const p of e.querySelectorAll('.js-plotly-plot')) { if (!p.checkVisibility()) continue;
            for (const g of p.querySelectorAll('g.slice')) { const t = g.querySelector('text');
                if (t && t.textContent === label) { const r = g.querySelector('path').getBoundingClientRect();
                    return {x: r.x, y: r.y, width: r.width, height: r.height}; } } }
        return null; }""", label)
    assert box, f"no visible plotly box named {label}"
    page.mouse.move(box["x"] + min(20, box["width"] / 2), box["y"] + box["height"] / 2)
    page.wait_for_selector(".hovertext", timeout=10_000)
    return page.locator(".hovertext").first.text_content()

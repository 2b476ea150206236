"""Comparisons in a real JupyterLab and Chromium, drawn by the front end's own plotly renderer (no
network): ``%%profile --compare`` (CPU and wall icicles at one scale, the off-CPU table and the
verdict) and ``profmagic.compare(before, after)`` (both icicles at one scale, the differential
icicle, and its static twin with change colours after nbconvert). Screenshots go to
tests/artifacts/."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

import browser as B
import workloads

pytestmark = [pytest.mark.timed, pytest.mark.browser, pytest.mark.timeout(400),
              pytest.mark.requires("chromium", "playwright", "jupyter-lab")]


SETUP = "%load_ext profmagic\nimport profmagic\n" + workloads.SOURCE + '''
def busy_more(t=0.3):
    end = time.perf_counter() + t
    while time.perf_counter() < end:
        pass
'''
COMPARE = "%%profile --compare --backend sampler\nspin()\nnap()"
RATIO = "print(f'RATIO {_profile.total(\"cpu\") / _profile.total(\"wall\"):.5f}')"
BEFORE = "%%profile -q --backend sampler\nbusy(0.6)\nbusy_more(0.1)"
KEEP_BEFORE = "before = _profile"
AFTER = "%%profile -q --backend sampler\nbusy(0.15)\nbusy_more(0.45)"
SHOW = ("after = _profile\nprint(f'TIMES {before.total(\"wall\"):.5f} {after.total(\"wall\"):.5f}')\n"
        "profmagic.compare(before, after)")
CELLS = [SETUP, COMPARE, RATIO, BEFORE, KEEP_BEFORE, AFTER, SHOW]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("lab-compare")
    B.write_notebook(str(root / "compare.ipynb"), CELLS)
    return root


@pytest.fixture(scope="module")
def page(root, browser):
    with B.jupyter_lab(str(root)) as lab:
        pg = lab.open(browser, "compare.ipynb")
        requests = []
        pg.on("request", lambda r: requests.append(r.url))
        for i in range(len(CELLS)):
            B.run_cell(pg, i)
        pg.requests = requests
        yield pg
        pg.close()


def output(page, i):
    return page.locator(".jp-Notebook .jp-CodeCell").nth(i).locator(".jp-OutputArea")


def printed(page, i, tag) -> list[float]:
    text = output(page, i).text_content()
    m = re.search(rf"{tag} ([\d.]+)(?: ([\d.]+))?", text)
    assert m, text
    return [float(x) for x in m.groups() if x is not None]


def drawn(page, i):
    """The plot of cell i, scrolled into view with every trace drawn."""
    plot = output(page, i).locator(".js-plotly-plot").first
    plot.wait_for(timeout=60_000)
    plot.scroll_into_view_if_needed()
    page.wait_for_function("e => e.querySelectorAll('g.iciclelayer g.trace').length >= 2",
                           arg=plot.element_handle(), timeout=60_000)
    return plot


ROOT_WIDTHS = """e => Array.from(e.querySelectorAll('g.iciclelayer g.trace')).filter(t => t.style.opacity !== '0')
    .map(t => { const s = t.querySelector('g.slice path'); const r = s.getBoundingClientRect();
                return {x: r.x, width: r.width, label: (t.querySelector('g.slice text') || {}).textContent}; })"""

# A box's colour: its fill, or for a hatched (off-CPU) box the background of its fill pattern.
FILL = """(path) => { const f = path.style.fill; const m = f.match(/url\\("?#([^")]+)"?\\)/);
    if (!m) return f; const rect = document.getElementById(m[1]).querySelector('rect');
    return rect ? getComputedStyle(rect).fill : f; }"""
FILLS_OF = """(e, name) => Array.from(e.querySelectorAll('g.slice')).filter(g => {
        const t = g.querySelector('text'); return t && t.textContent === name; })
    .map(g => (%s)(g.querySelector('path')))""" % FILL


def test_cpu_wall_at_one_scale_same_colours_table_and_verdict(page):
    plot = drawn(page, 1)
    texts = plot.evaluate("e => Array.from(e.querySelectorAll('g.slice text')).map(t => t.textContent)")
    assert texts.count("spin") == 2, texts      # in the CPU and in the wall icicle
    assert "nap" in texts, texts                # in the wall icicle (no CPU)
    roots = sorted(plot.evaluate(ROOT_WIDTHS), key=lambda r: r["x"])
    assert len(roots) == 2 and roots[0]["x"] + roots[0]["width"] <= roots[1]["x"] + 1, roots
    ratio = printed(page, 2, "RATIO")[0]
    drawn_ratio = roots[0]["width"] / roots[1]["width"]
    assert abs(drawn_ratio - ratio) <= 0.03, (drawn_ratio, ratio)   # the gap is the off-CPU time
    fills = plot.evaluate(FILLS_OF, "spin")
    assert len(fills) == 2 and fills[0] == fills[1], fills         # one colour per function in both
    table = plot.evaluate("e => e.data.filter(t => t.type === 'table').map(t => [t.header.values, t.cells.values])")
    heads, cols = table[0]
    assert [re.sub("<[^>]+>", "", h) for h in heads] == ["function", "file", "cpu s", "off-CPU s", "wall s",
                                                          "on-CPU %"]
    names = cols[0]
    assert names.index("nap") < names.index("spin"), names   # sorted by off-CPU: nap waits, spin does not
    off = [float(x) for x in cols[3]]
    assert off == sorted(off, reverse=True), off
    title = plot.locator(".gtitle").first.text_content()
    assert "% of wall time off-CPU, mostly in" in title, title
    out = output(page, 1)   # one output for the view: the plot; its HTML twin is the same output's text/html
    assert out.locator(".jp-OutputArea-child:has(.js-plotly-plot)").count() == 1
    assert out.locator(".profmagic-cpuwall, table.profmagic-table").count() == 0
    B.screenshot(page, "compare-cpu-wall.png", page.locator(".jp-Notebook .jp-CodeCell").nth(1))
    external = [u for u in page.requests if not u.startswith(("http://127.0.0.1", "data:", "blob:"))]
    assert external == [], f"the page fetched from the network: {external[:5]}"


def test_before_after_at_one_scale_with_the_differential_icicle(page):
    plot = drawn(page, 6)
    t_before, t_after = printed(page, 6, "TIMES")
    roots = plot.evaluate(ROOT_WIDTHS)
    panels = sorted([r for r in roots if r["label"] in ("before", "after")], key=lambda r: r["x"])
    assert [r["label"] for r in panels] == ["before", "after"], roots
    drawn_ratio = panels[1]["width"] / panels[0]["width"]
    assert abs(drawn_ratio - t_after / t_before) <= 0.03, (drawn_ratio, t_after, t_before)
    fills = plot.evaluate(FILLS_OF, "busy_more")
    assert len(set(fills)) >= 2 and len(fills) >= 3, fills   # two panels alike, the diff icicle by change
    panel_fills = plot.evaluate("""e => { const out = {}; for (const t of e.querySelectorAll('g.iciclelayer g.trace')) {
        const root = (t.querySelector('g.slice text') || {}).textContent; if (root !== 'before' && root !== 'after') continue;
        for (const g of t.querySelectorAll('g.slice')) { const x = g.querySelector('text');
          if (x && x.textContent === 'busy') (out[root] = out[root] || []).push((%s)(g.querySelector('path'))); } }
        return out; }""" % FILL)
    assert panel_fills["before"][0] == panel_fills["after"][0], panel_fills
    B.screenshot(page, "compare-before-after.png", page.locator(".jp-Notebook .jp-CodeCell").nth(6))
    # The normalise switch gives each panel its own width.
    plot.locator(".updatemenu-button", has_text="normalised").click()
    page.wait_for_function("""e => { const w = Array.from(e.querySelectorAll('g.iciclelayer g.trace'))
        .filter(t => ['before', 'after'].includes((t.querySelector('g.slice text') || {}).textContent))
        .map(t => t.querySelector('g.slice path').getBoundingClientRect().width);
        return w.length === 2 && Math.abs(w[0] - w[1]) < 2; }""", arg=plot.element_handle(), timeout=30_000)
    B.screenshot(page, "compare-before-after-normalised.png", page.locator(".jp-Notebook .jp-CodeCell").nth(6))


def test_static_twin_of_the_differential_icicle_has_change_colours(root, browser):
    """nbconvert runs the notebook and writes HTML; offline, the differential icicle is an SVG whose
    boxes are red (slower: busy_more) and blue (faster: busy)."""
    nbconvert = [sys.executable, "-m", "jupyter", "nbconvert"]
    subprocess.run(nbconvert + ["--to", "notebook", "--execute", "--output", "executed.ipynb", "compare.ipynb"],
                   cwd=root, check=True, capture_output=True, timeout=300)
    os.makedirs(B.ARTIFACTS, exist_ok=True)
    subprocess.run(nbconvert + ["--to", "html", "--output-dir", B.ARTIFACTS, "--output", "compare-static",
                                "executed.ipynb"], cwd=root, check=True, capture_output=True, timeout=120)
    pg = browser.new_page(viewport={"width": 1300, "height": 900})
    pg.route("http*://**", lambda route: route.abort())  # offline
    pg.goto("file://" + os.path.join(B.ARTIFACTS, "compare-static.html"))
    diff = pg.locator("svg.profmagic-diff")
    assert diff.count() == 1
    fills = diff.evaluate("""s => Array.from(s.querySelectorAll('g')).filter(g => g.querySelector('title'))
        .map(g => [g.querySelector('title').textContent.split('\\n')[0], g.querySelector('rect').getAttribute('fill')])""")
    rgb = {}
    for name, c in fills:   # shallowest box of each name first
        rgb.setdefault(name, tuple(int(c[i:i + 2], 16) for i in (1, 3, 5)))
    assert rgb["busy_more"][0] > rgb["busy_more"][2] + 60, rgb      # slower: red
    assert rgb["busy"][2] > rgb["busy"][0] + 60, rgb                # faster: blue
    cpu, wall = (pg.locator("svg.profmagic-icicle").nth(i) for i in (0, 1))   # --compare's twin
    assert pg.locator(".profmagic-rest").count() >= 1                # the off-CPU gap is drawn
    B.screenshot(pg, "compare-static.png", diff)
    assert cpu.is_visible() and wall.is_visible()
    pg.close()

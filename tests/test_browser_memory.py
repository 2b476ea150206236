"""Memory in the report, in a real JupyterLab and a real Chromium (issue 20): the memray icicle sized
by bytes and the memory-over-time strip in the live widget (Time order tab), for --backend memray and
for --memory beside the sampler; and both in the static twin after nbclient + nbconvert, offline."""
from __future__ import annotations

import os

import pytest
import workloads

import browser as B

pytestmark = [pytest.mark.browser, pytest.mark.timeout(600),
              pytest.mark.requires("chromium", "playwright", "jupyter-lab", "memray")]

SETUP = "%load_ext profmagic\n" + workloads.SOURCE + workloads.MEMORY_SOURCE
MEMRAY_CELL = "%%profile --backend memray\nkeep = cell()"
BOTH_CELL = "%%profile --backend sampler --memory --memory-exact\nkeep2 = cell()\nspin(0.3)"   # memray beside time


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    d = tmp_path_factory.mktemp("lab")
    B.write_notebook(str(d / "memory.ipynb"), [SETUP, MEMRAY_CELL, BOTH_CELL])
    return d


@pytest.fixture(scope="module")
def page(root, browser):
    with B.jupyter_lab(str(root)) as lab:
        pg = lab.open(browser, "memory.ipynb")
        for i in range(3):
            B.run_cell(pg, i, timeout=240_000)
        yield pg
        pg.close()


def widget(page, i):
    w = page.locator(".jp-Notebook .jp-CodeCell").nth(i).locator(".profmagic-widget")
    w.wait_for(timeout=60_000)
    w.scroll_into_view_if_needed()
    return w


VISIBLE_PLOTS = "e => Array.from(e.querySelectorAll('.js-plotly-plot')).filter(p => p.offsetParent !== null)"


def plot_texts(w, selector: str) -> list[str]:
    """Texts of ``selector`` in the visible plotly plots under ``w``, once there are some."""
    js = f"e => ({VISIBLE_PLOTS})(e).flatMap(p => Array.from(p.querySelectorAll({selector!r}))).map(t => t.textContent)"
    w.page.wait_for_function(f"e => ({js})(e).length > 0", arg=w.element_handle(), timeout=60_000)
    return w.evaluate(js)


def test_memray_icicle_in_bytes_and_the_strip_in_the_time_tab(page):
    w = widget(page, 1)
    labels = plot_texts(w, "g.slice text")
    assert "alloc" in labels and "cell" in labels, labels
    title = " ".join(plot_texts(w, ".gtitle"))
    assert "bytes alive at the memory high-water mark" in title and "memray" in title, title
    assert "Hz" not in title and "samples" not in title
    B.screenshot(page, "memory-icicle.png", w)
    w.get_by_role("tab", name="Time order").click()
    texts = plot_texts(w, ".annotation-text")
    assert any(t.startswith("high-water mark") and "MiB" in t for t in texts), texts
    legend = plot_texts(w, ".legendtext")
    assert "heap (snapshots)" in legend, legend
    assert "keeps no time order" in w.text_content()  # memray has no samples: the strip stands alone
    B.screenshot(page, "memory-strip.png", w)


def test_time_beside_memory_widget(page):
    w = widget(page, 2)
    title = " ".join(plot_texts(w, ".gtitle"))
    assert "wall time" in title and "sampler" in title and "memray" in title, title
    options = w.locator("select").nth(1).evaluate(   # ipywidgets draws spaces as no-break spaces
        "s => Array.from(s.options).map(o => o.textContent.replace(/\u00a0/g, ' '))")
    assert "bytes alive at the memory high-water mark" in options, options
    w.get_by_role("tab", name="Table").click()
    table = w.locator("table.profmagic-time-memory")
    table.wait_for(timeout=60_000)
    head = table.locator("th").all_text_contents()
    assert head[:4] == ["function", "wall time (s)", "CPU time (s)", "off-CPU time (s) = wall − cpu"], head
    rows = {r.locator("td").first.text_content(): r.locator("td").all_text_contents()
            for r in table.locator("tbody tr").all()}
    assert rows["alloc"][4].endswith("MiB") and rows["spin"][4].endswith(" B"), rows
    w.get_by_role("tab", name="Time order").click()
    legend = plot_texts(w, ".legendtext")
    assert "heap (snapshots)" in legend and "spin" in legend, legend  # the samples' leaves and the strip
    B.screenshot(page, "time-beside-memory.png", w)


def test_static_twin_offline_after_nbconvert(root, browser):
    import subprocess
    import sys
    jupyter = [sys.executable, "-m", "jupyter", "nbconvert"]
    subprocess.run(jupyter + ["--to", "notebook", "--execute", "--output", "executed.ipynb", "memory.ipynb"],
                   cwd=root, check=True, capture_output=True, timeout=400)
    os.makedirs(B.ARTIFACTS, exist_ok=True)
    subprocess.run(jupyter + ["--to", "html", "--output-dir", B.ARTIFACTS, "--output", "memory-static",
                              "executed.ipynb"], cwd=root, check=True, capture_output=True, timeout=120)
    pg = browser.new_page(viewport={"width": 1200, "height": 900})
    pg.route("http*://**", lambda route: route.abort())  # offline
    pg.goto("file://" + os.path.join(B.ARTIFACTS, "memory-static.html"))
    strips = pg.locator("svg.profmagic-memory-strip")
    assert strips.count() == 2
    for i in range(2):
        s = strips.nth(i)
        assert s.is_visible()
        assert s.locator("polyline.profmagic-heap").count() == 1 and s.locator("line.profmagic-peak").count() == 1
        assert any(t.startswith("high-water mark") for t in s.locator("text").all_text_contents())
    icicle = pg.locator("svg.profmagic-icicle").first
    assert "alloc" in icicle.evaluate("s => Array.from(s.querySelectorAll('text')).map(t => t.textContent)")
    assert "Time beside memory" in pg.content()
    B.screenshot(pg, "memory-static.png", strips.first)
    pg.close()

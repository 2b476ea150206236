"""``%%profile --compare`` in a real JupyterLab and Chromium: CPU and wall icicles drawn side by
side by the front end's own plotly renderer (no network), the off-CPU table and the verdict."""
from __future__ import annotations

import pytest

import browser as B
import workloads

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300),
              pytest.mark.requires("chromium", "playwright", "jupyter-lab")]


SETUP = "%load_ext profmagic\n" + workloads.SOURCE
COMPARE = "%%profile --compare --backend sampler\nspin()\nnap()"


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    root = tmp_path_factory.mktemp("lab-compare")
    B.write_notebook(str(root / "compare.ipynb"), [SETUP, COMPARE])
    with B.jupyter_lab(str(root)) as lab, B.chromium() as browser:
        pg = lab.open(browser, "compare.ipynb")
        # JupyterLab sometimes asks which kernel to start although the notebook names one: accept it.
        accept = pg.locator(".jp-Dialog button.jp-mod-accept")
        try:
            accept.click(timeout=5_000)
        except Exception:  # no dialog this time
            pass
        pg.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=60_000)
        requests = []
        pg.on("request", lambda r: requests.append(r.url))
        for i in range(2):
            B.run_cell(pg, i)
        pg.requests = requests
        yield pg
        pg.close()


def test_compare_renders_two_icicles_and_the_table(page):
    out = page.locator(".jp-Notebook .jp-CodeCell").nth(1).locator(".jp-OutputArea")
    plot = out.locator(".js-plotly-plot").first
    plot.wait_for(timeout=60_000)
    plot.scroll_into_view_if_needed()
    page.wait_for_function("e => e.querySelectorAll('g.iciclelayer g.trace').length === 2",
                           arg=plot.element_handle(), timeout=60_000)
    texts = plot.evaluate("e => Array.from(e.querySelectorAll('g.slice text')).map(t => t.textContent)")
    assert texts.count("spin") == 2, texts      # in the CPU and in the wall icicle
    assert "nap" in texts, texts                # in the wall icicle (no CPU)
    boxes = plot.evaluate("""e => Array.from(e.querySelectorAll('g.iciclelayer g.trace'))
        .map(t => { const r = t.getBoundingClientRect(); return [r.x, r.width]; })""")
    (x0, w0), (x1, w1) = sorted(boxes)
    assert x0 + w0 <= x1 + 1, boxes              # side by side, not overlapping
    # The same function has the same colour in both icicles.
    fills = plot.evaluate("""e => Array.from(e.querySelectorAll('g.slice')).filter(g => {
            const t = g.querySelector('text'); return t && t.textContent === 'spin'; })
        .map(g => g.querySelector('path').style.fill)""")
    assert len(fills) == 2 and fills[0] == fills[1], fills
    table = out.locator("table.profmagic-table").first
    table.wait_for(timeout=10_000)
    heads = table.locator("th").all_text_contents()
    assert heads[:6] == ["function", "file", "cpu s", "off-CPU s", "wall s", "on-CPU %"], heads
    names = table.locator("tbody tr td:first-child").all_text_contents()
    assert "nap" in names[:3] and "spin" in names, names   # sorted by off-CPU: the cell, then nap
    off = [float(t) for t in table.locator("tbody tr td:nth-child(4)").all_text_contents()]
    assert off == sorted(off, reverse=True), off
    verdict = out.locator(".profmagic-cpuwall").first.text_content()
    assert "% of wall time off-CPU, mostly in" in verdict, verdict
    B.screenshot(page, "compare-cpu-wall.png", page.locator(".jp-Notebook .jp-CodeCell").nth(1))
    external = [u for u in page.requests if not u.startswith(("http://127.0.0.1", "data:", "blob:"))]
    assert external == [], f"the page fetched from the network: {external[:5]}"

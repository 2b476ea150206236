"""Bounded long sessions in a real JupyterLab and Notebook 7 (issue 27 item 4): with ``keep.LIVE = 1``,
the report of an older profiled cell whose profile was freed shows its static twin again (SVG icicle)
and one line saying the live profile was released and how to keep one; the newest report still draws
its plotly icicle, its twin hidden."""
from __future__ import annotations

import browser as B
import pytest

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300),
              pytest.mark.requires("chromium", "playwright", "jupyter-lab", "jupyter-notebook")]
SETUP = '''\
%load_ext profmagic
import time
from profmagic.report import keep
keep.LIVE = 1

def spin_here(seconds):
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        sum(i * i for i in range(2000))
'''
CELL = "%%profile --backend sampler\nspin_here(0.3)"
SHOWN = "e => { const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0; }"   # display:none: 0x0


@pytest.mark.parametrize("app", list(B.APPS))
def test_a_released_report_shows_its_twin_and_says_so(tmp_path, browser, app):
    B.write_notebook(str(tmp_path / "keep.ipynb"), [SETUP, CELL, CELL, CELL])
    with B.jupyter_server(str(tmp_path), app) as lab:
        page = lab.open(browser, "keep.ipynb")
        try:
            for i in range(4):
                B.run_cell(page, i)
            cells = page.locator(".jp-Notebook .jp-CodeCell")
            newest = cells.nth(3)
            newest.scroll_into_view_if_needed()
            page.wait_for_function("e => e.querySelector('.js-plotly-plot g.slice') !== null",
                                   arg=newest.element_handle(), timeout=60_000)
            # The first cell's profile was freed when the third report was shown (LIVE = 1; _profile
            # names the newest): its report is the notice, and its static twin is shown again.
            first = cells.nth(1)
            first.scroll_into_view_if_needed()
            notice = first.locator(".profmagic-released")
            notice.wait_for(timeout=60_000)
            text = notice.inner_text()
            assert "the live profile of this report was released" in text and "(p = _profile)" in text, text
            assert first.locator(".js-plotly-plot").count() == 0
            twin = first.locator("svg.profmagic-icicle")
            assert twin.count() == 1 and twin.evaluate(SHOWN) is True
            labels = twin.evaluate("s => Array.from(s.querySelectorAll('text')).map(t => t.textContent)")
            assert "spin_here" in labels, labels
            # The newest report: its plotly icicle, its twin hidden.
            assert newest.locator("svg.profmagic-icicle").evaluate(SHOWN) is False
            assert newest.locator(".profmagic-released").count() == 0
        except Exception:
            B.screenshot(page, f"{app}-keep-failed.png")
            raise
        finally:
            page.close()

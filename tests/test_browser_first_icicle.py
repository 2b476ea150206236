"""The first interactive icicle of a fresh page (issue 27, item 3): in JupyterLab and in Notebook 7,
in a real Chromium, a `%%profile` cell run right after `%load_ext profmagic` shows its plotly icicle
soon after the cell's end, and plotly's hover works on it. The warm-up that makes this so
(``report.display.warm_up``) leaves nothing visible, and the first report closes its widget models.

The target is 1 s on a quiet machine (bench/bench_first_icicle.py, bench/RESULTS.md); the bound here
is 5 s, for a machine shared with other work."""
from __future__ import annotations

import json

import pytest

import browser as B
import first_icicle as F

BOUND = 5.0   # seconds from the cell's end to the visible plotly icicle; the target is 1 s (see above)


@pytest.mark.timed
@pytest.mark.browser
@pytest.mark.timeout(300)
@pytest.mark.requires("chromium", "playwright", "jupyter-lab", "jupyter-notebook")
@pytest.mark.parametrize("app", list(B.APPS))
def test_first_icicle_of_a_fresh_page_is_soon_and_interactive(app, tmp_path, browser):
    with B.jupyter_server(str(tmp_path), app) as lab:
        page = F.fresh_page(lab, browser, "first.ipynb")
        try:
            # The warm-up's output: an icicle drawn 10 by 10 pixels (transparent), and no text.
            warm = page.locator(".jp-Notebook .jp-CodeCell").nth(0)
            page.wait_for_function("c => c.querySelector('.js-plotly-plot .main-svg') !== null",
                                   arg=warm.element_handle(), timeout=60_000)
            size = warm.evaluate("c => { const r = c.querySelector('.js-plotly-plot .main-svg').getBoundingClientRect();"
                                 " return [r.width, r.height]; }")
            assert size == [10, 10], size
            assert warm.evaluate("c => c.querySelector('.js-plotly-plot').getBoundingClientRect().height") <= 12
            assert warm.locator(".jp-OutputArea-output").inner_text().strip() == ""
            first = F.run_and_time(page, lab.root, 1)
            cell = page.locator(".jp-Notebook .jp-CodeCell").nth(1)
            hover = F.hover_shows(page, cell)
            B.screenshot(page, f"{app}-first-icicle.png", cell)
            page.wait_for_timeout(500)
            second = F.run_and_time(page, lab.root, 2)
        finally:
            page.context.close()
    assert first["plotly"] is not None and 0 < first["plotly"] <= BOUND, first
    assert second["plotly"] is not None and 0 < second["plotly"] <= BOUND, second
    assert F.LABEL in hover, hover   # plotly's own hover label, on the box of the cell's function


@pytest.mark.kernel
@pytest.mark.timeout(120)
def test_warm_up_shows_an_empty_icicle_and_the_first_report_closes_its_widgets(kernel):
    """In a real kernel: ``%load_ext profmagic`` displays one invisible plotly icicle and opens one
    undisplayed model of each widget class the report uses; the first report closes them all, with
    their layout and style models."""
    r = kernel.run("%load_ext profmagic")
    assert r.error is None, r.text()
    figs = [d for d in r.data if "application/vnd.plotly.v1+json" in d]
    assert len(figs) == 1 and len(r.data) == 1, r.data
    fig = figs[0]["application/vnd.plotly.v1+json"]
    assert [t["type"] for t in fig["data"]] == ["icicle"]
    assert fig["layout"]["width"] == fig["layout"]["height"] == 10
    assert fig["data"][0]["marker"]["colors"] == ["rgba(0,0,0,0)"] and fig["data"][0]["textinfo"] == "none"
    assert figs[0]["text/plain"] == "" and figs[0]["text/html"] == ""
    warm = json.loads(kernel.run(
        "import json, profmagic.report.display as D\n"
        "print(json.dumps(sorted(type(w).__name__ for w in D._WARM)))").stdout)
    assert warm == sorted(["VBox", "HBox", "Tab", "HTML", "Dropdown", "BoundedFloatText", "Checkbox", "Button",
                           "Output", "Select", "Text", "_ClickBridge"]), warm
    kernel.run("_warm = [m.model_id for w in D._WARM for m in (w, getattr(w, 'layout', None), "
               "getattr(w, 'style', None)) if m is not None]")
    r = kernel.run("%%profile --backend sampler\nimport time\nend = time.perf_counter() + 0.5\n"
                   "while time.perf_counter() < end:\n    sum(i * i for i in range(1000))")
    assert r.error is None and any("application/vnd.jupyter.widget-view+json" in d for d in r.data + r.updates), r.text()
    left = kernel.run("import ipywidgets\nprint(len(_warm), len(D._WARM), "
                      "len(set(_warm) & set(ipywidgets.widgets.widget._instances)))").stdout.split()
    assert int(left[0]) >= 20 and left[1:] == ["0", "0"], left   # closed, with their layouts and styles

"""The report in a real JupyterLab and a real Chromium: icicle drawn, zoom, sandwich, download,
no script from hostile names, and the static fallback after nbclient + nbconvert offline."""
from __future__ import annotations

import json
import os

import pytest

import browser as B
from profmagic.profile import StackBuilder

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

why = B.missing()
if why:
    pytest.skip(why, allow_module_level=True)

WORKLOAD = '''\
%load_ext profmagic
import time

def busy_inner(n):
    s = 0
    for i in range(n):
        s += i * i
    return s

def part_a(seconds):
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        busy_inner(2000)

def part_b(seconds):
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        busy_inner(2000)

def busy_outer():
    part_a(0.8)
    part_b(0.4)
'''
PROFILE_CELL = "%%profile --backend sampler\nbusy_outer()"
EVIL_IMG = '<img src=x onerror="window.__xss=1">'
EVIL_SCRIPT = '</script><script>window.__xss=2</script>'
EVIL_THREAD = '<svg onload="window.__xss=3">'


def evil_profile(path: str) -> str:
    """A speedscope file whose function and thread names are hostile HTML."""
    b = StackBuilder()
    main = b.frame("main", "app.py", 1, "python")
    img = b.frame(EVIL_IMG, "<img src=x onerror=alert(4)>.py", 2, "python")
    scr = b.frame(EVIL_SCRIPT, "evil.py", 3, "python")
    for i, (th, st) in enumerate([(EVIL_THREAD, (main, img)), (EVIL_THREAD, (main, img, scr)),
                                  ("MainThread", (main, scr))] * 20):
        b.add(b.stack(th, st), wall=0.01, cpu=0.004, time=i * 0.01)
    p = b.build(metric="wall", meta={"backend": "handmade", "rate": 100.0})
    p.save(path)
    return path


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    d = tmp_path_factory.mktemp("lab")
    evil_profile(str(d / "evil.speedscope.json"))
    B.write_notebook(str(d / "report.ipynb"), [
        WORKLOAD, PROFILE_CELL,
        "import profmagic\nprofmagic.load('evil.speedscope.json')",
    ])
    return d


@pytest.fixture(scope="module")
def browser():
    with B.chromium() as b:
        yield b


@pytest.fixture(scope="module")
def page(root, browser):
    with B.jupyter_lab(str(root)) as lab:
        pg = lab.open(browser, "report.ipynb")
        pg.dialogs = []
        pg.on("dialog", lambda d: (pg.dialogs.append(d.message), d.dismiss()))
        for i in range(3):
            B.run_cell(pg, i)
        yield pg
        pg.close()


def cell(page, i):
    return page.locator(".jp-Notebook .jp-CodeCell").nth(i)


VISIBLE_SLICES = """e => Array.from(e.querySelectorAll('.js-plotly-plot')).filter(p => p.offsetParent !== null)
    .flatMap(p => Array.from(p.querySelectorAll('g.slice text'))).map(t => t.textContent)"""


def slice_texts(locator) -> list[str]:
    """Labels of the icicle slices in the visible plots under ``locator``."""
    locator.scroll_into_view_if_needed()  # JupyterLab does not lay out cells off screen
    try:
        locator.page.wait_for_function(f"e => ({VISIBLE_SLICES})(e).length > 0", arg=locator.element_handle(),
                                       timeout=60_000)
    except Exception:
        B.screenshot(locator.page, "slices-failed.png")
        raise
    return locator.evaluate(VISIBLE_SLICES)


def slice_box(scope, label: str):
    return scope.evaluate("""(e, label) => {
        for (const g of e.querySelectorAll('g.slice')) {
            const t = g.querySelector('text');
            if (t && t.textContent === label) { const r = g.querySelector('path').getBoundingClientRect();
                return {x: r.x, y: r.y, width: r.width, height: r.height}; }
        } return null; }""", label)


def test_icicle_drawn_with_labels_and_zooms(page):
    w = cell(page, 1).locator(".profmagic-widget")
    w.wait_for(timeout=60_000)
    plot = w.locator(".js-plotly-plot").first
    texts = slice_texts(w)
    for name in ("busy_outer", "part_a", "part_b", "busy_inner"):
        assert name in texts, texts
    title = plot.locator(".gtitle").first.text_content()
    assert "wall" in title and "sampler" in title and "samples" in title and "Hz" in title, title
    # The static twin is hidden once the widget is drawn.
    assert not cell(page, 1).locator(".profmagic-static").first.is_visible()
    B.screenshot(page, "report-icicle.png", cell(page, 1))
    full = plot.evaluate("e => e.querySelector('.main-svg').getBoundingClientRect().width")
    before = slice_box(plot, "part_b")
    assert before and before["width"] < 0.6 * full, (before, full)
    page.mouse.click(before["x"] + before["width"] / 2, before["y"] + before["height"] / 2)
    # Zoomed: part_b now spans the plot's width.
    page.wait_for_function("""([e, w]) => { for (const g of e.querySelectorAll('g.slice')) {
            const t = g.querySelector('text');
            if (t && t.textContent === 'part_b') return g.querySelector('path').getBoundingClientRect().width > 0.9 * w; }
        return false; }""", arg=[plot.element_handle(), full], timeout=10_000)
    B.screenshot(page, "report-icicle-zoomed.png", cell(page, 1))


def test_sandwich_pick_function(page):
    w = cell(page, 1).locator(".profmagic-widget")
    w.get_by_role("tab", name="Sandwich").click()
    sel = w.locator(".profmagic-functions-list select")
    sel.wait_for(timeout=30_000)
    idx = sel.evaluate("s => Array.from(s.options).findIndex(o => o.textContent.includes('part_b'))")
    assert idx >= 0
    sel.select_option(index=idx)
    page.wait_for_function(f"e => ({VISIBLE_SLICES})(e).includes('busy_outer')", arg=w.element_handle(),
                           timeout=60_000)
    texts = slice_texts(w)
    assert "busy_outer" in texts and "busy_inner" in texts and "part_b" in texts
    assert "part_a" not in texts  # neither a caller nor a callee of part_b
    title = w.evaluate("e => Array.from(e.querySelectorAll('.js-plotly-plot')).filter(p => p.offsetParent)"
                       ".map(p => p.querySelector('.gtitle').textContent).join(' ')")
    assert "callers" in title and "part_b" in title
    B.screenshot(page, "report-sandwich.png", cell(page, 1))


def test_speedscope_download(page, tmp_path):
    w = cell(page, 1).locator(".profmagic-widget")
    w.get_by_role("tab", name="Raw").click()
    link = w.locator("a.profmagic-speedscope")
    link.wait_for(timeout=30_000)
    with page.expect_download() as dl:
        link.click()
    path = tmp_path / "dl.json"
    dl.value.save_as(str(path))
    doc = json.loads(path.read_text())
    assert doc["$schema"] == "https://www.speedscope.app/file-format-schema.json"
    names = {f["name"] for f in doc["shared"]["frames"]}
    assert {"busy_outer", "part_a", "part_b", "busy_inner"} <= names
    assert doc["profiles"] and all(p["type"] == "sampled" for p in doc["profiles"])
    raw = w.locator("a.profmagic-raw")
    assert raw.count() == 1 and raw.get_attribute("download")


def test_hostile_names_run_no_script(page):
    w = cell(page, 2).locator(".profmagic-widget")
    w.wait_for(timeout=60_000)
    texts = slice_texts(w)
    assert EVIL_IMG in texts and EVIL_SCRIPT in texts, texts
    box = slice_box(w, EVIL_IMG)
    page.mouse.move(box["x"] + 5, box["y"] + 5)  # the hover label renders the name too
    page.wait_for_selector(".hovertext", timeout=10_000)
    assert EVIL_IMG in page.locator(".hovertext").first.text_content()
    # Every tab, and a thread named like an <svg onload>.
    w.locator(".widget-dropdown select").first.select_option(label=EVIL_THREAD)
    page.wait_for_function(f"e => ({VISIBLE_SLICES})(e).includes({json.dumps(EVIL_THREAD)})",
                           arg=w.element_handle(), timeout=30_000)
    w.get_by_role("tab", name="Sandwich").click()
    sel = w.locator(".profmagic-functions-list select")
    sel.wait_for(timeout=30_000)
    idx = sel.evaluate("(s, n) => Array.from(s.options).findIndex(o => o.textContent.includes(n))", EVIL_SCRIPT)
    sel.select_option(index=idx)
    page.wait_for_function("e => Array.from(e.querySelectorAll('.js-plotly-plot')).filter(p => p.offsetParent)"
                           ".some(p => p.querySelector('.gtitle').textContent.includes('callers'))",
                           arg=w.element_handle(), timeout=30_000)
    for tab in ("Time order", "Table", "Raw"):
        w.get_by_role("tab", name=tab).click()
        page.wait_for_timeout(300)
    w.get_by_role("tab", name="Table").click()
    assert EVIL_IMG in w.locator("table").first.text_content()
    B.screenshot(page, "report-hostile.png", cell(page, 2))
    assert page.evaluate("typeof window.__xss") == "undefined"
    assert page.dialogs == []
    # Nothing hostile became an element.
    assert page.evaluate("document.querySelectorAll('img[src=x], svg[onload], [onerror]').length") == 0


def test_static_fallback_offline_after_nbconvert(root, browser):
    """nbconvert --execute (nbclient) runs the notebook, saving widget state as it does by default;
    nbconvert makes HTML;
    Chromium opens it with every network request refused: the SVG icicle shows, and no script runs."""
    import subprocess
    import sys
    import nbformat
    jupyter = [sys.executable, "-m", "jupyter", "nbconvert"]
    subprocess.run(jupyter + ["--to", "notebook", "--execute", "--output", "executed.ipynb", "report.ipynb"],
                   cwd=root, check=True, capture_output=True, timeout=240)
    nb = nbformat.read(str(root / "executed.ipynb"), as_version=4)
    assert "widgets" in nb.metadata  # the widget state is there, and nbconvert prefers it
    os.makedirs(B.ARTIFACTS, exist_ok=True)
    subprocess.run(jupyter + ["--to", "html", "--output-dir", B.ARTIFACTS, "--output", "report-static",
                              "executed.ipynb"], cwd=root, check=True, capture_output=True, timeout=120)
    out = os.path.join(B.ARTIFACTS, "report-static.html")
    pg = browser.new_page(viewport={"width": 1200, "height": 900})
    dialogs = []
    pg.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    pg.route("http*://**", lambda route: route.abort())  # offline
    pg.goto("file://" + out)
    svgs = pg.locator("svg.profmagic-icicle")
    assert svgs.count() == 2
    labels = svgs.nth(0).evaluate("s => Array.from(s.querySelectorAll('text')).map(t => t.textContent)")
    assert {"busy_outer", "part_a"} <= set(labels), labels
    evil = svgs.nth(1).evaluate("s => Array.from(s.querySelectorAll('text, title')).map(t => t.textContent)")
    assert any(EVIL_IMG in t for t in evil) and any(EVIL_SCRIPT in t for t in evil)
    assert svgs.nth(0).is_visible()
    B.screenshot(pg, "report-static.png", svgs.nth(0))
    assert pg.evaluate("typeof window.__xss") == "undefined" and dialogs == []
    pg.close()

"""The report in a real JupyterLab and in Notebook 7, in a real Chromium: icicle drawn, zoom,
sandwich, source, download, no script from hostile names; and the static fallback after nbclient +
nbconvert offline, with a working speedscope download."""
from __future__ import annotations

import base64
import json
import os

import pytest

import browser as B
import profmagic
from profmagic.model import StackBuilder

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300),
              pytest.mark.requires("chromium", "playwright", "jupyter-lab", "jupyter-notebook")]


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

def spin_child(seconds):
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        pass
'''
PROFILE_CELL = "%%profile --backend sampler\nbusy_outer()\npart_b(0.2)"   # line 1 is the hot one
CHILD_SPINS = (0.3, 0.9)
RANKS_CELL = f'''%%profile --subprocesses --backend sampler
import multiprocessing as mp
ws = [mp.get_context("fork").Process(target=spin_child, args=(d,), name=f"spinner{{i}}")
      for i, d in enumerate({CHILD_SPINS!r})]
for w in ws: w.start()
for w in ws: w.join()
'''
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
    profmagic.save(p, path)
    return path


def make_root(d):
    evil_profile(str(d / "evil.speedscope.json"))
    B.write_notebook(str(d / "report.ipynb"), [
        WORKLOAD, PROFILE_CELL,
        "import profmagic\nprofmagic.load('evil.speedscope.json')",
        RANKS_CELL,
    ])
    return d


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return make_root(tmp_path_factory.mktemp("static"))


@pytest.fixture(scope="module", params=list(B.APPS))
def page(request, tmp_path_factory, browser):
    """The notebook run in JupyterLab, then in Notebook 7 (``page.app``)."""
    root = make_root(tmp_path_factory.mktemp(request.param))
    with B.jupyter_server(str(root), request.param) as lab:
        pg = lab.open(browser, "report.ipynb")
        pg.app = request.param
        pg.dialogs = []
        pg.on("dialog", lambda d: (pg.dialogs.append(d.message), d.dismiss()))
        for i in range(4):
            B.run_cell(pg, i)
        yield pg
        pg.close()


def shot(page, name: str, locator=None):
    return B.screenshot(page, f"{page.app}-{name}", locator)


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
    shot(page, "report-icicle.png", cell(page, 1))
    full = plot.evaluate("e => e.querySelector('.main-svg').getBoundingClientRect().width")
    before = slice_box(plot, "part_b")
    assert before and before["width"] < 0.6 * full, (before, full)
    page.mouse.click(before["x"] + before["width"] / 2, before["y"] + before["height"] / 2)
    # Zoomed: part_b now spans the plot's width.
    page.wait_for_function("""([e, w]) => { for (const g of e.querySelectorAll('g.slice')) {
            const t = g.querySelector('text');
            if (t && t.textContent === 'part_b') return g.querySelector('path').getBoundingClientRect().width > 0.9 * w; }
        return false; }""", arg=[plot.element_handle(), full], timeout=10_000)
    shot(page, "report-icicle-zoomed.png", cell(page, 1))


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
    shot(page, "report-sandwich.png", cell(page, 1))


def visible_titles(w) -> str:
    return w.evaluate("e => Array.from(e.querySelectorAll('.js-plotly-plot')).filter(p => p.offsetParent)"
                      ".map(p => p.querySelector('.gtitle').textContent).join(' | ')")


def test_click_in_icicle_then_show_in_sandwich(page):
    """plotly's click event on an icicle box reaches Python (the report's click bridge);
    "show in Sandwich" then opens that function's callers and callees."""
    w = cell(page, 1).locator(".profmagic-widget")
    w.get_by_role("tab", name="Icicle").click()
    slice_texts(w)
    plot = w.locator(".js-plotly-plot").first
    box = slice_box(plot, "busy_inner")
    assert box, slice_texts(w)
    page.mouse.click(box["x"] + min(20, box["width"] / 2), box["y"] + box["height"] / 2)
    w.locator(".profmagic-clicked", has_text="busy_inner").wait_for(timeout=30_000)
    button = w.locator(".profmagic-to-sandwich")
    assert button.is_enabled()
    button.click()
    page.wait_for_function("e => Array.from(e.querySelectorAll('.js-plotly-plot')).filter(p => p.offsetParent)"
                           ".some(p => /callers.*busy_inner/.test(p.querySelector('.gtitle').textContent))",
                           arg=w.element_handle(), timeout=60_000)
    assert w.get_by_role("tab", name="Sandwich").get_attribute("aria-selected") == "true"
    texts = slice_texts(w)
    assert {"busy_inner", "part_a", "part_b", "busy_outer"} <= set(texts), texts  # both callers
    shot(page, "report-click-to-sandwich.png", cell(page, 1))


def test_source_tab_shows_the_cells_hottest_line_first(page):
    """The Source tab: the cell's lines with wall/CPU per line, the hottest listed first; a box
    clicked in the icicle shows its function's source."""
    w = cell(page, 1).locator(".profmagic-widget")
    w.get_by_role("tab", name="Source").click()
    hot = w.locator(".profmagic-hot-line").first
    hot.wait_for(timeout=60_000)
    assert hot.get_attribute("data-line") == "1", hot.text_content()
    assert "busy_outer()" in hot.text_content() and "wall time" in hot.text_content()
    rows = w.locator("tr.profmagic-src-line")
    assert rows.count() == 2 and "profmagic-hottest" in rows.first.get_attribute("class")
    shot(page, "report-source.png", cell(page, 1))
    # A function picked in the icicle: its definition, with time per line.
    w.get_by_role("tab", name="Icicle").click()
    slice_texts(w)
    box = slice_box(w.locator(".js-plotly-plot").first, "busy_inner")
    page.mouse.click(box["x"] + min(20, box["width"] / 2), box["y"] + box["height"] / 2)
    w.locator(".profmagic-clicked", has_text="busy_inner").wait_for(timeout=30_000)
    w.locator(".profmagic-to-source").click()
    w.locator(".profmagic-source", has_text="busy_inner").wait_for(timeout=60_000)
    code = " ".join(w.locator("tr.profmagic-src-line").all_text_contents())
    assert "def busy_inner(n):" in code and "s += i * i" in code, code
    shot(page, "report-source-function.png", cell(page, 1))


def test_ranks_tab_one_bar_per_process_and_its_icicle(page):
    """A real --subprocesses recording of 2 forked workers: the Ranks tab shows one bar per
    process and the one-line "differs most"; a click on a process shows its icicle."""
    c = cell(page, 3)
    w = c.locator(".profmagic-widget")
    w.wait_for(timeout=60_000)
    w.get_by_role("tab", name="Ranks").click()
    ranks = w.locator(".profmagic-ranks")
    ranks.wait_for(timeout=60_000)
    ranks.scroll_into_view_if_needed()
    page.wait_for_function("e => e.querySelectorAll('.js-plotly-plot g.point').length > 0",
                           arg=ranks.element_handle(), timeout=60_000)
    bars = ranks.locator(".js-plotly-plot").first
    procs = bars.evaluate("e => Array.from(e.querySelectorAll('.ytick text')).map(t => t.textContent)")
    assert sum("spinner" in p for p in procs) == len(CHILD_SPINS), procs
    per_trace = bars.evaluate("e => Array.from(e.querySelectorAll('g.trace.bars'))"
                              ".map(t => t.querySelectorAll('g.point').length)")
    assert per_trace and all(n == len(procs) for n in per_trace), (per_trace, procs)
    assert "differs most" in ranks.text_content()
    # The worker that spun longest (known from the cell) has the longest bar.
    widths = bars.evaluate("""e => { const out = {}; const ys = Array.from(e.querySelectorAll('.ytick text'))
        .map(t => t.textContent); for (const tr of e.querySelectorAll('g.trace.bars')) {
        tr.querySelectorAll('g.point').forEach((p, i) => { const r = p.querySelector('path').getBoundingClientRect();
        out[ys[i]] = (out[ys[i]] || 0) + r.width; }); } return out; }""")
    spin = {p: widths[p] for p in widths if "spinner" in p}
    assert max(spin, key=spin.get).split("spinner")[1].startswith(str(len(CHILD_SPINS) - 1)), widths
    shot(page, "report-ranks.png", c)
    # Click the longest spinner: its icicle, with the function it ran.
    button = ranks.locator(".profmagic-ranks-pick button", has_text=f"spinner{len(CHILD_SPINS) - 1}")
    button.click()
    page.wait_for_function(f"e => ({VISIBLE_SLICES})(e).includes('spin_child')",
                           arg=ranks.element_handle(), timeout=60_000)
    assert "busy_outer" not in slice_texts(ranks)
    titles = visible_titles(ranks)
    assert "Icicle" in titles and "sampler" in titles and "samples" in titles, titles
    shot(page, "report-ranks-icicle.png", c)


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
    shot(page, "report-hostile.png", cell(page, 2))
    assert page.evaluate("typeof window.__xss") == "undefined"
    assert page.dialogs == []
    # Nothing hostile became an element.
    assert page.evaluate("document.querySelectorAll('img[src=x], svg[onload], [onerror]').length") == 0


def test_static_fallback_offline_after_nbconvert(root, browser, tmp_path):
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
    pg = browser.new_page(viewport={"width": 1200, "height": 900}, accept_downloads=True)
    dialogs = []
    pg.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    pg.route("http*://**", lambda route: route.abort())  # offline
    pg.goto("file://" + out)
    svgs = pg.locator("svg.profmagic-icicle")
    assert svgs.count() == 3
    labels = svgs.nth(0).evaluate("s => Array.from(s.querySelectorAll('text')).map(t => t.textContent)")
    assert {"busy_outer", "part_a"} <= set(labels), labels
    evil = svgs.nth(1).evaluate("s => Array.from(s.querySelectorAll('text, title')).map(t => t.textContent)")
    assert any(EVIL_IMG in t for t in evil) and any(EVIL_SCRIPT in t for t in evil)
    assert svgs.nth(0).is_visible()
    # The multi-process cell's ranks, as script-free HTML: one bar row per process, the one line.
    rows = pg.locator("table.profmagic-ranks-bars tr.profmagic-rank-bar")
    names = [t for t in rows.all_text_contents()]
    assert sum("spinner" in t for t in names) == len(CHILD_SPINS), names
    assert pg.locator(".profmagic-differs").first.is_visible()
    assert "differs most" in pg.locator(".profmagic-differs").first.text_content()
    B.screenshot(pg, "report-static.png", svgs.nth(0))
    # The saved output keeps its downloads: the speedscope JSON, as a data URI that loads back.
    link = pg.locator("a.profmagic-speedscope").first
    href = link.get_attribute("href")
    assert href.startswith("data:application/json;base64,")
    saved = tmp_path / "from-link.speedscope.json"
    saved.write_bytes(base64.b64decode(href.split(",", 1)[1]))
    p = profmagic.load(str(saved))
    assert {"busy_outer", "part_a", "part_b", "busy_inner"} <= set(p.frames["name"]) and p.sample_count > 10
    with pg.expect_download() as dl:          # and the browser offers it as a download, offline
        link.click()
    dl.value.save_as(str(tmp_path / "clicked.json"))
    assert profmagic.load(str(tmp_path / "clicked.json")).sample_count == p.sample_count
    assert pg.evaluate("typeof window.__xss") == "undefined" and dialogs == []
    pg.close()

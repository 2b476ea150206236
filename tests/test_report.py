"""The report: static bundle, widget tabs and pickers, downloads, and the display under a real kernel."""
from __future__ import annotations

import base64
import json
import re

import pytest

import profmagic
from plotly_json import arr
from profmagic import report
from profmagic.model import Raw, StackBuilder

pytestmark = pytest.mark.timeout(120)

EVIL = "<img src=x onerror=alert(1)>"
EVIL2 = "</script><script>alert(2)</script>"


def profile(raw: Raw | None = None, unknown=(), approximate=None):
    b = StackBuilder()
    main = b.frame("main", "app.py", 1, "python")
    work = b.frame("work", "app.py", 5, "python")
    evil = b.frame(EVIL, "evil.py", 2, "python")
    evil2 = b.frame(EVIL2, "evil.py", 3, "native")
    t = 0.0
    for th, st, n in [("MainThread", (main, work), 6), ("MainThread", (main, evil), 3),
                      ("worker", (main, evil2), 2), ("worker", (main,), 1)]:
        sid = b.stack(th, st)
        for _ in range(n):
            kw = {"wall": 0.01} if "cpu" in unknown else {"wall": 0.01, "cpu": 0.006}
            b.add(sid, time=t, **kw)
            t += 0.01
    meta = {"backend": "synthetic", "rate": 100.0}
    if approximate:
        meta["approximate"] = approximate
    return b.build(metric="wall", meta=meta, raw=raw, unknown_metrics=unknown)


def test_static_bundle_without_kernel():
    p = profile(unknown=("cpu",), approximate="rebuilt from caller pairs")
    b = report.mimebundle(p)
    assert set(b) == {"text/plain", "text/html"}
    h = b["text/html"]
    assert "<svg" in h and "<script" not in h.lower()
    assert EVIL not in h and EVIL2 not in h and "&lt;img src=x onerror=alert(1)&gt;" in h
    assert "Approximate: rebuilt from caller pairs" in h
    assert "CPU time (s): not measured (synthetic cannot know it)" in h
    assert "wall time (s)" in h and "12 samples" in h and "100 Hz" in h


def data_uri(html: str, cls: str) -> bytes:
    m = re.search(rf"class='{cls}' download='[^']+' href='data:[^;]+;base64,([^']+)'", html)
    assert m, html[:500]
    return base64.b64decode(m.group(1))


def test_downloads_are_data_uris():
    raw = Raw(b"main;work 6\n", "folded", filename="cell.folded")
    p = profile(raw=raw)
    h = report.downloads_html(p)
    assert data_uri(h, "profmagic-raw") == raw.data
    doc = json.loads(data_uri(h, "profmagic-speedscope"))
    assert doc["$schema"] == "https://www.speedscope.app/file-format-schema.json"
    assert {f["name"] for f in doc["shared"]["frames"]} == {"main", "work", EVIL, EVIL2}
    assert "download='cell.folded'" in h


def test_raw_on_disk_is_a_link_and_a_large_one_is_written_next_to_the_notebook(tmp_path, monkeypatch):
    from profmagic import downloads
    path = tmp_path / "perf.data"
    path.write_bytes(b"\1" * 1000)
    p = profile(raw=Raw(None, "perf", path=str(path)))
    assert data_uri(report.downloads_html(p), "profmagic-raw") == path.read_bytes()
    notebook_dir = tmp_path / "nb"
    notebook_dir.mkdir()
    monkeypatch.chdir(notebook_dir)               # a kernel's working directory is its notebook's
    monkeypatch.setattr(downloads, "MAX_DATA_URI", 999)
    h = report.downloads_html(p)
    written = re.findall(r"class='profmagic-raw' download='([^']+)' href='\1'", h)
    assert len(written) == 1 and "1,000 bytes" in h and "written next to the notebook" in h
    assert (notebook_dir / written[0]).read_bytes() == path.read_bytes()
    doc = re.findall(r"class='profmagic-speedscope' download='([^']+)' href='\1'", h)
    assert len(doc) == 1 and profmagic.load(str(notebook_dir / doc[0])).sample_count == p.sample_count
    assert report.downloads_html(p) == h          # written once: the same names again


def test_widget_tabs_and_pickers():
    p = profile(unknown=("cpu",))
    r = report.Report(p, uid="abc")
    assert [o[1] for o in r.metric.options] == p.metrics == ["samples", "wall"]
    assert [o[0] for o in r.thread.options] == ["all threads (merged)", "MainThread", "worker"]
    assert "profmagic-static-abc{display:none}" in r.widget.children[0].value
    fig = r.panes[0].children[0].outputs[0]["data"][report.PLOTLY_MIME]
    labels = fig["data"][0]["labels"]
    assert "work" in labels and EVIL not in json.dumps(fig)
    # Another thread and metric redraw the icicle from that thread only, in that metric.
    r.thread.value = 1  # worker
    r.metric.value = "samples"
    fig = r.panes[0].children[0].outputs[0]["data"][report.PLOTLY_MIME]
    labels = fig["data"][0]["labels"]
    assert "work" not in labels and "&lt;/script&gt;&lt;script&gt;alert(2)&lt;/script&gt;" in labels
    assert arr(fig["data"][0]["values"])[0] == 3  # the worker's samples
    assert "samples" in fig["layout"]["title"]["text"] and "worker" in fig["layout"]["title"]["text"]
    # Sandwich: the list is text; picking shows callers and callees; a bad regex says so.
    r.tabs.selected_index = 1
    assert r.sw_list.options and all(isinstance(v, int) for _, v in r.sw_list.options)
    r.sw_filter.value = "("
    assert "missing" in r.sw_msg.value or "unterminated" in r.sw_msg.value
    r.sw_filter.value = "script"
    assert len(r.sw_list.options) == 1
    r.sw_list.value = r.sw_list.options[0][1]
    sfig = r.sw_fig.outputs[0]["data"][report.PLOTLY_MIME]
    assert len(sfig["data"]) == 2 and EVIL2 not in json.dumps(sfig)
    for name in ("Source", "Time order", "Table", "Raw"):
        i = r.TABS.index(name)
        r.tabs.selected_index = i
        assert r.panes[i].children and "Error" not in str(getattr(r.panes[i].children[0], "value", ""))
    table_tab = r.TABS.index("Table")
    assert "worker" in r.panes[table_tab].children[0].outputs[0]["data"]["text/html"]
    r.thread.value = -1  # all threads again: the open tab rebuilds
    r.tabs.selected_index = table_tab
    table = r.panes[table_tab].children[0].outputs[0]["data"]["text/html"]
    assert EVIL not in table and "&lt;img src=x" in table


def test_time_order_tab_says_why_when_there_is_no_order():
    b = StackBuilder()
    b.add(b.stack("T", (b.frame("a", "a.py", 1, "python"),)), samples=5)
    p = b.build(metric="samples", meta={"format": "folded"})
    r = report.Report(p)
    i = r.TABS.index("Time order")
    r.tabs.selected_index = i
    assert "folded keeps no time order" in r.panes[i].children[0].value


@pytest.mark.kernel
def test_display_under_a_real_kernel(kernel):
    """In a kernel, the Profile displays as a static twin (for nbconvert) then the live widget."""
    rep = kernel.run("from profmagic.model import StackBuilder\n"
                     "b = StackBuilder()\n"
                     "s = b.stack('T', (b.frame('main', 'a.py', 1, 'python'), b.frame('<b>x</b>', 'a.py', 2)))\n"
                     "b.add(s, wall=0.5)\n"
                     "b.build(meta={'backend': 'k'})")
    assert rep.status == "ok", rep.error
    static = [d for d in rep.data if "text/html" in d]
    assert len(static) == 1 and "<svg" in static[0]["text/html"] and "&lt;b&gt;x&lt;/b&gt;" in static[0]["text/html"]
    assert re.search(r"profmagic-static-[0-9a-f]{12}", static[0]["text/html"])
    assert rep.result and "application/vnd.jupyter.widget-view+json" in rep.result
    assert "text/html" not in rep.result  # not twice


@pytest.mark.kernel
def test_del_frees_a_displayed_profile_and_its_report_says_so(kernel):
    """A profile held in a variable and displayed is held by its report only weakly: ``del`` frees
    it (and everything derived from it); the report's other tabs then say it is gone."""
    setup = ("import gc, weakref\nfrom IPython.display import display\nfrom profmagic import report\n"
             "from profmagic.model import StackBuilder\nb = StackBuilder()\n"
             "b.add(b.stack('T', (b.frame('main', 'a.py', 1, 'python'), b.frame('work', 'a.py', 2, 'python'))), wall=0.5)\n"
             "p = b.build(meta={'backend': 'k'})\nref = weakref.ref(p)\ndisplay(p)\n"
             "r = report.Report(p, hold=not report.display._named(p))")
    rep = kernel.run(setup)
    assert rep.status == "ok", rep.error
    assert any("application/vnd.jupyter.widget-view+json" in d for d in rep.data)
    rep = kernel.run("del p\ngc.collect()\nprint(ref() is None)\nr.tabs.selected_index = r.TABS.index('Sandwich')\n"
                     "print(r.panes[r.TABS.index('Sandwich')].children[0].value)")
    assert rep.status == "ok", rep.error
    freed, message = rep.stdout.splitlines()[:2]
    assert freed == "True" and "deleted from the kernel" in message
    # Displayed without a name (display(load(f))): its report holds it, or nothing would.
    assert kernel.value("report.display._named(b.build(meta={'backend': 'k'}))") is False


@pytest.mark.kernel
def test_a_profiled_cells_report_holds_its_profile_after_the_next_one(kernel):
    """``_profile`` is the only name for a profiled cell's profile and the next profiled cell rebinds
    it: the first cell's report must keep its profile, or its tabs would say it was deleted."""
    rep = kernel.run("%load_ext profmagic\nimport gc, time, weakref")
    assert rep.status == "ok", rep.error
    rep = kernel.run("%%profile --backend sampler\ntime.sleep(0.1)")
    assert rep.status == "ok" and any("application/vnd.jupyter.widget-view+json" in d for d in rep.data + rep.updates)
    rep = kernel.run("first = weakref.ref(_profile)")
    assert rep.status == "ok", rep.error
    rep = kernel.run("%%profile --backend sampler\ntime.sleep(0.1)")
    assert rep.status == "ok", rep.error
    assert kernel.value("gc.collect() >= 0 and first() is not None and first() is not _profile") is True


@pytest.mark.kernel
def test_show_draws_the_report_of_a_quiet_profile(kernel):
    """``%%profile -q`` shows nothing and keeps its Profile in ``_profile``; ``report.show`` draws its report."""
    rep = kernel.run("%load_ext profmagic\nimport time")
    assert rep.status == "ok", rep.error
    rep = kernel.run("%%profile -q --backend sampler\ntime.sleep(0.1)")
    assert rep.status == "ok" and rep.result is None and rep.data == [], (rep.error, rep.data)
    rep = kernel.run("from profmagic.report import show\nshow(_profile)")
    assert rep.status == "ok", rep.error
    assert any("<svg" in d.get("text/html", "") for d in rep.data)
    assert any("application/vnd.jupyter.widget-view+json" in d for d in rep.data)


@pytest.mark.kernel
def test_load_ext_draws_an_invisible_figure_so_plotly_loads_early(kernel):
    """%load_ext profmagic makes the front end load its plotly renderer then, not after the first
    profiled cell: one 10-pixel figure (an icicle of one transparent box, no text), with nothing for
    nbconvert or GitHub to show."""
    rep = kernel.run("%reload_ext profmagic")
    assert rep.status == "ok", rep.error
    figs = [d for d in rep.data if report.PLOTLY_MIME in d]
    assert len(figs) == 1 and figs[0]["text/html"] == "" and figs[0]["text/plain"] == ""
    fig = figs[0][report.PLOTLY_MIME]
    assert [(t["type"], t["marker"]["colors"], t["textinfo"]) for t in fig["data"]] == \
        [("icicle", ["rgba(0,0,0,0)"], "none")]
    assert fig["layout"]["height"] <= 10 and fig["config"]["staticPlot"] is True


def test_partial_and_message_are_shown():
    p = profile().with_meta(partial="the code raised ZeroDivisionError; this profile covers it up to there",
                            message="py-spy missed the first 0.1 s")
    for text in (report.static_html(p), report.Report(p).widget.children[0].value):
        assert "Partial: the code raised ZeroDivisionError; this profile covers it up to there" in text
        assert "py-spy missed the first 0.1 s" in text


def test_a_failing_view_falls_back_to_repr_and_the_error(monkeypatch):
    p = profile()

    # A fake, only to inject a fault no real profile produces here: the sandwich table (used by
    # the static HTML's function table) raises.
    def broken(*a, **k):
        raise RuntimeError("injected fault in a view")
    monkeypatch.setattr("profmagic.views.sandwich.table", broken)
    b = report.mimebundle(p)
    assert b["text/plain"].startswith(repr(p)) and "injected fault in a view" in b["text/plain"]
    assert "RuntimeError" in b["text/html"] and "12 samples" in b["text/html"]


def test_click_in_icicle_shows_the_function_in_sandwich():
    """The icicle's customdata carries each box's function id; the click bridge sends it back."""
    p = profile()
    r = report.Report(p)
    assert r.bridge is not None and r.to_sandwich.disabled
    fig = r.panes[0].children[0].outputs[0]["data"][report.PLOTLY_MIME]["data"][0]
    node = fig["labels"].index("work")
    key = int(arr(fig["customdata"])[node][0])
    assert p.functions().set_index("id").loc[key, "name"] == "work"
    r.bridge.clicked = {"key": key, "label": "work", "n": 1}   # what the browser sends on plotly_click
    assert not r.to_sandwich.disabled and ">work</b>" in r.click_label.value
    r.to_sandwich.click()
    assert r.TABS[r.tabs.selected_index] == "Sandwich" and r.sw_list.value == key
    sfig = r.sw_fig.outputs[0]["data"][report.PLOTLY_MIME]
    assert "work" in sfig["layout"]["title"]["text"] and "callers" in sfig["layout"]["title"]["text"]
    # Root and (other) boxes are not functions: nothing to show.
    r.bridge.clicked = {"key": -1, "label": "all threads", "n": 2}
    assert ">work</b>" in r.click_label.value


def every_title(r: "report.Report") -> dict:
    """The title (plotly) or the text (HTML) each tab of a report shows, every tab built."""
    out = {}
    for i, name in enumerate(r.TABS):
        r.tabs.selected_index = i
        texts = [r.widget.children[0].value]   # the header, above every tab
        for c in r.panes[i].children:
            for o in getattr(c, "outputs", ()):
                d = o["data"]
                texts.append(d[report.PLOTLY_MIME]["layout"]["title"]["text"] if report.PLOTLY_MIME in d
                             else d.get("text/html", ""))
            if hasattr(c, "value") and isinstance(c.value, str):
                texts.append(c.value)
        if name == "Sandwich":
            r.sw_list.value = r.sw_list.options[0][1]
            texts.append(r.sw_fig.outputs[0]["data"][report.PLOTLY_MIME]["layout"]["title"]["text"])
        out[name] = texts
    return out


def test_honest_labels_in_every_tab_of_a_sampled_profile():
    p = profile().with_meta(duration=0.12)
    for name, texts in every_title(report.Report(p)).items():
        figs = texts[1:] if name in ("Icicle", "Sandwich", "Time order") else texts
        for t in figs:
            for want in ("wall time (s)", "backend synthetic", "100 Hz", "12 samples", "0.120 s"):
                assert want in t, (name, want, t[:300])


def test_honest_labels_and_approximate_in_every_tab_of_a_real_cprofile(tmp_path):
    """cProfile traces calls: titles say "N calls", and its rebuilt stacks say approximate everywhere."""
    import cProfile
    from profmagic.formats import pstats as fmt

    def leaf(n):
        return sum(i * i for i in range(n))

    def root():
        return leaf(20000) + leaf(10000)
    pr = cProfile.Profile()
    pr.enable()
    root()
    pr.disable()
    pr.dump_stats(str(tmp_path / "run.pstats"))
    p = fmt.read((tmp_path / "run.pstats").read_bytes())
    assert p.meta.get("approximate")
    calls = f"{int(p.stacks['calls'].sum()):,} calls"
    tabs = every_title(report.Report(p))
    assert set(tabs) == {"Icicle", "Sandwich", "Source", "Time order", "Table", "Raw"}
    for name, texts in tabs.items():
        shown = texts if name in ("Time order", "Table", "Raw", "Source") else texts[1:]
        for t in shown if name not in ("Time order",) else texts[:1]:
            assert "approximate" in t.lower() and "backend pstats" in t, (name, t[:300])
            assert calls in t and "samples" not in t.split("approximate")[0], (name, t[:300])


@pytest.mark.parametrize("order", ["shell first", "profmagic first, then load()", "extension"])
def test_ipython_displays_a_profile_through_the_registered_formatter(order):
    """The model has no _repr_mimebundle_: IPython's formatter for Profile, registered by the root
    package (on import inside a running IPython, on load(), or by %load_ext), draws the report."""
    import subprocess
    import sys
    shell = "from IPython.core.interactiveshell import InteractiveShell\nip = InteractiveShell.instance()\n"
    code = {
        "shell first": shell + "import profmagic\np = profmagic.load(b'a;b 3\\n')\n",
        "profmagic first, then load()": "import profmagic\n" + shell + "p = profmagic.load(b'a;b 3\\n')\n",
        "extension": ("import profmagic\nfrom profmagic.formats import folded\n" + shell
                      + "p = folded.read(b'a;b 3\\n')\nprint(ip.display_formatter.format(p)[0].keys())\n"
                      "ip.extension_manager.load_extension('profmagic')\n"),
    }[order] + ("data = ip.display_formatter.format(p)[0]\n"
                "print(sorted(data), '<svg' in data['text/html'], data['text/plain'] == repr(p))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    last = out.stdout.strip().splitlines()[-1]
    assert last == "['text/html', 'text/plain'] True True", out.stdout
    if order == "extension":   # before %load_ext (IPython started after the import): the repr only
        assert out.stdout.splitlines()[0] == "dict_keys(['text/plain'])", out.stdout

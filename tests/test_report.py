"""The report: static bundle, widget tabs and pickers, downloads, and the display under a real kernel."""
from __future__ import annotations

import base64
import json
import re

import pytest

from profmagic import report
from profmagic.profile import Raw, StackBuilder

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
    b = p._repr_mimebundle_()
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


def test_large_raw_points_to_disk(tmp_path):
    path = tmp_path / "perf.data"
    path.write_bytes(b"\0" * 1000)
    p = profile(raw=Raw(None, "perf", path=str(path)))
    h = report.downloads_html(p)
    assert "profmagic-raw" not in h and str(path) in h and "1,000 bytes" in h


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
    assert fig["data"][0]["values"][0] == 3  # the worker's samples
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
    for i in (2, 3, 4):
        r.tabs.selected_index = i
        assert r.panes[i].children and "Error" not in str(getattr(r.panes[i].children[0], "value", ""))
    assert "worker" in r.panes[3].children[0].outputs[0]["data"]["text/html"]
    r.thread.value = -1  # all threads again: the open tab rebuilds
    r.tabs.selected_index = 3
    table = r.panes[3].children[0].outputs[0]["data"]["text/html"]
    assert EVIL not in table and "&lt;img src=x" in table


def test_time_order_tab_says_why_when_there_is_no_order():
    b = StackBuilder()
    b.add(b.stack("T", (b.frame("a", "a.py", 1, "python"),)), samples=5)
    p = b.build(metric="samples", meta={"format": "folded"})
    r = report.Report(p)
    r.tabs.selected_index = 2
    assert "folded keeps no time order" in r.panes[2].children[0].value


@pytest.mark.kernel
def test_display_under_a_real_kernel(kernel):
    """In a kernel, the Profile displays as a static twin (for nbconvert) then the live widget."""
    rep = kernel.run("from profmagic.profile import StackBuilder\n"
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

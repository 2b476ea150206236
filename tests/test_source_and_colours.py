"""A colour per function (the same in every panel and profile), the hover's numbers over all calls
of a function, and the Source view's time per line."""
from __future__ import annotations

import profmagic
import re

import pytest

from profmagic import analysis
from profmagic.model import StackBuilder
from profmagic.views import colours, icicle, source

pytestmark = pytest.mark.timeout(120)

CELL = "setup()\nfor i in range(3):\n    work(i)\nwait()\n"


def cell_profile():
    """A %%profile-like profile: the cell In[7] (lines 1-4) calls work (In[5]) from two places."""
    b = StackBuilder()
    mod = {n: b.frame("<module>", "In[7]", n, "python") for n in (1, 3, 4)}
    setup = b.frame("setup", "In[5]", 2, "python")
    work = b.frame("work", "In[5]", 6, "python")
    helper = b.frame("helper", "In[5]", 9, "python")
    wait = b.frame("wait", "In[5]", 12, "python")
    sleep = b.frame("sleep", "", None, "native")
    for st, n, cpu in [((mod[1], setup), 5, 0.01), ((mod[1], setup, work), 10, 0.004), ((mod[3], work), 40, 0.004),
                       ((mod[3], work, helper), 20, 0.01), ((mod[4], wait, sleep), 30, 0.0)]:
        sid = b.stack('Thread 1 "MainThread"', st)
        for _ in range(n):
            b.add(sid, wall=0.01, cpu=cpu)
    return b.build(metric="wall", meta={"backend": "sampler", "rate": 100.0, "cell": CELL,
                                        "trimmed_to": "/tmp/ipykernel_1/77.py",
                                        "renamed_files": {"/tmp/ipykernel_1/77.py": "In[7]"}})


def test_the_same_function_has_the_same_colour_everywhere_and_kinds_keep_their_family():
    p = cell_profile()
    b = StackBuilder()                                            # another profile, other frames and files
    main, work, helper = (b.frame(n, "/elsewhere/app.py", i, "python") for i, n in enumerate(("main", "work", "helper")))
    b.add(b.stack("T", (main, work, helper)), samples=3, wall=0.03)
    q = b.build(metric="wall")
    fills = {}
    for prof in (p, q):
        tr = profmagic.icicle(prof).data[0]
        for lab, c in zip(tr.labels, tr.marker.colors):
            fills.setdefault(lab, set()).add(c)
    assert all(len(c) == 1 for c in fills.values()), fills        # one colour per name, in both
    assert len({next(iter(fills[n])) for n in ("setup", "work", "helper", "wait")}) == 4   # neighbours differ
    fams = [colours.family(n, f, k) for n, f, k in [("work", "a.py", "python"), ("memcpy", "libc.so.6", "native"),
                                                      ("_PyEval_EvalFrameDefault", "Python/ceval.c", "native")]]
    assert fams == ["python", "native", "interpreter"]
    blue = colours.function_colour("work", "python")
    orange = colours.function_colour("work", "native")
    r, g, b_ = (int(blue[i:i + 2], 16) for i in (1, 3, 5))
    assert b_ > r                                                   # Python: blues
    r, g, b_ = (int(orange[i:i + 2], 16) for i in (1, 3, 5))
    assert r > b_                                                   # native: oranges


def test_hover_gives_the_box_and_all_calls_of_its_function_in_wall_cpu_off_cpu():
    p = cell_profile()
    tr = profmagic.icicle(p).data[0]
    rows = [dict(zip(("label", "custom"), x)) for x in zip(tr.labels, tr.customdata)]
    work = [r["custom"] for r in rows if r["label"] == "work"]
    assert len(work) == 2                                          # called from setup and from the loop
    # customdata: 1 total, 2 self, 4 function total, 5 function self, then (cpu, fn cpu), (off, fn off)
    boxes = sorted((c[1], c[2]) for c in work)
    assert boxes == [pytest.approx((0.1, 0.1)), pytest.approx((0.6, 0.4))]
    for c in work:
        assert (c[4], c[5]) == pytest.approx((0.7, 0.5))          # all calls of work: total 70, self 50 samples
        assert c[7] == pytest.approx(50 * 0.004 + 20 * 0.01)      # CPU over all its calls: 0.4 s
        assert c[9] == pytest.approx(0.7 - c[7], rel=1e-6)        # off-CPU over all its calls
    for word in ("this call path", "all its calls", "CPU", "off-CPU"):
        assert word in tr.hovertemplate
    # The static twin's hover titles carry the same numbers.
    svg = icicle.svg(p)
    assert re.search(r"work\n[^\n]*\nthis call path: 0\.6 [^\n]*self 0\.4\n  CPU 0\.36 s · off-CPU 0\.24 s\n"
                     r"all its calls: 0\.7, self 0\.5\n  CPU 0\.4 s · off-CPU 0\.3 s", svg), svg[:3000]


def test_source_view_of_the_cell_lists_the_hottest_line_first_with_wall_and_cpu():
    p = cell_profile()
    lines = analysis.line_table(p, "In[7]")
    assert list(lines.index) == [3, 4, 1]                          # the loop body (60), wait (30), setup (15)
    assert lines.loc[3, "wall"] == pytest.approx(0.6) and lines.loc[3, "cpu"] == pytest.approx(0.36)
    assert lines.loc[4, "off_cpu"] == pytest.approx(0.3) and lines.loc[4, "samples"] == 30
    html = source.cell_html(p)
    hot = re.findall(r"<li class='profmagic-hot-line' data-line='(\d+)'>", html)
    assert hot == ["3", "4", "1"]
    assert "work(i)" in html[html.index("profmagic-hot-line"):html.index("</li>")]
    assert re.search(r"<tr class='profmagic-src-line profmagic-hottest' data-line='3'", html)
    assert html.count("class='profmagic-src-line") == 4            # every line of the cell, in order


def test_source_view_of_a_function_shows_its_definition(tmp_path):
    f = tmp_path / "mod.py"
    f.write_text("import time\n\n\ndef work(n):\n    s = 0\n    for i in range(n):\n        s += i\n    return s\n\n"
                 "def other():\n    pass\n")
    b = StackBuilder()
    top = b.frame("main", str(f), 1, "python")
    for line, n in ((6, 3), (7, 9)):
        b.add(b.stack("T", (top, b.frame("work", str(f), line, "python"))), samples=n, wall=0.01 * n)
    p = b.build(metric="wall", meta={"backend": "t"})
    fid = int(p.functions().set_index("name").at["work", "id"])
    html = source.function_html(p, fid)
    shown = [int(x) for x in re.findall(r"class='profmagic-src-line[^']*' data-line='(\d+)'", html)]
    assert shown == [4, 5, 6, 7, 8]                                # def work ... return s
    assert re.findall(r"data-line='(\d+)'>line", html)[0] == "7"   # the hottest line first
    assert "&lt;" not in html or "<script" not in html

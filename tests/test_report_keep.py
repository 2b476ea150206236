"""Bounded long sessions (issue 27 item 4): in a real kernel, the reports of profiled cells keep at most
``keep.LIVE`` profiles alive. An older report lets go; a profile nobody holds is then freed and its
report becomes a notice saying so and how to keep one; a profile held as ``p = _profile`` survives and
its report keeps working. The session's figures at 300 cells: bench/bench_long_session.py."""
from __future__ import annotations

import html
import json
import re

import pytest
from faults.conftest import documented

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(600)]
LIVE = 5
CELLS = 30
HELD = 3      # the cell whose profile the user keeps as p = _profile
SETUP = '''\
%load_ext profmagic
import gc, json, weakref
from profmagic import history
from profmagic.report import keep
from profmagic.model import Profile
keep.LIVE = 5
refs, reports = [], []
gc.disable()   # what is freed below is freed by reference counting, at once

def leaf_work(n):
    s = 0
    for i in range(n):
        s += i * i
    return s

def job():
    import time
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.05:
        leaf_work(20000)

def alive():
    return [r() is not None for r in refs]
'''
CELL = "%%profile -b sampler\njob()"
OPEN = "len(__import__('ipywidgets').widgets.widget._instances)"
KEPT = "sum(r.profile is not None for runs in history._cells.values() for r in runs)"
WIDGET = "application/vnd.jupyter.widget-view+json"


def profiled_cell(kernel, keep_it: bool = False):
    r = kernel.run(CELL)
    assert r.error is None, r.text()
    assert any(WIDGET in d for d in r.data + r.updates), r.text()
    r = kernel.run("refs.append(weakref.ref(_profile)); reports.append(keep.reports()[-1])"
                   + ("\np = _profile" if keep_it else ""))
    assert r.error is None, r.text()


def test_reports_keep_the_newest_profiles_and_a_held_one(kernel):
    assert kernel.run(SETUP).error is None
    for i in range(1, CELLS + 1):
        profiled_cell(kernel, keep_it=i == HELD)
        if i <= LIVE:   # the first LIVE reports all hold theirs
            assert kernel.value("alive()") == [True] * i
        if i == CELLS - 10:
            open_before = kernel.value(OPEN)
    # Each cell adds a report and collapses one: what stays open of it is its box and the notice, with
    # their layout and style (ipywidgets keeps every open widget).
    assert kernel.value(OPEN) - open_before == 10 * 5
    # gc is off: letting go frees a profile at once (nothing else refers to it).
    alive = kernel.value("alive()")
    newest = list(range(CELLS - LIVE + 1, CELLS + 1))
    assert [i + 1 for i, a in enumerate(alive) if a] == [HELD] + newest
    assert kernel.value("[i + 1 for i, r in enumerate(reports) if not r.collapsed]") == [HELD] + newest
    # The Profile objects in the kernel: the LIVE newest and the held one, and the cell's history's
    # compact copies of its newest runs (history.KEEP, for the differential view); no other copy or cache.
    assert kernel.value("history.KEEP") == 2 and kernel.value(KEPT) == 2
    assert kernel.value(f"gc.collect() >= 0 and sum(isinstance(o, Profile) for o in gc.get_objects()) - {KEPT}") \
        == LIVE + 1
    assert kernel.value(f"[r.holds for r in reports[-{LIVE} - 1:]]") == [False] + [True] * LIVE

    # The oldest report: one notice, saying the profile was released and how to keep one; its widgets closed.
    notice = kernel.value("[w.value for w in reports[0].widget.children]")
    assert len(notice) == 1 and "profmagic-released" in notice[0]
    text = html.unescape(re.sub(r"<[^>]+>", "", notice[0]))
    documented("profile-released", text)
    for words in (f"the {LIVE} newest reports keep theirs", "(p = _profile)",
                  "(p = profmagic.load('run.json'))"):
        assert words in text, (words, text)
    assert kernel.value("[w.comm is None for w in (reports[0].tabs, reports[0].metric, reports[0].bridge, "
                        "reports[0].metric.layout, reports[0].metric.style)]") == [True] * 5
    assert kernel.value("reports[0].widget.comm is not None") is True   # the notice's box stays shown

    # The held profile's report lets go too, but p keeps the profile, and every tab still works.
    rep = kernel.run(f"r = reports[{HELD - 1}]\nassert r._ref() is p and not r.holds\n"
                     "r.tabs.selected_index = r.TABS.index('Sandwich')\n"
                     "print(json.dumps([o[0] for o in r.sw_list.options]))\n"
                     "r.metric.value = r.metric.value\nr._changed()\nr.tabs.selected_index = 0\n"
                     "out = r.panes[0].children[0].outputs[0]['data']['application/vnd.plotly.v1+json']\n"
                     "print(json.dumps(sorted(set(out['data'][0]['labels']))))")
    assert rep.error is None, rep.text()
    functions, labels = (json.loads(line) for line in rep.stdout.strip().splitlines()[-2:])
    assert any("leaf_work" in f for f in functions), functions
    assert {"job", "leaf_work"} <= set(labels), labels

    # del p: the profile is freed, and at the next report its report becomes the notice too.
    assert kernel.run("del p, r, out").error is None
    profiled_cell(kernel)
    assert kernel.value(f"refs[{HELD - 1}]() is None and reports[{HELD - 1}].collapsed") is True
    documented("profile-released", html.unescape(kernel.value(f"reports[{HELD - 1}].widget.children[0].value")))
    assert kernel.value(f"gc.collect() >= 0 and sum(isinstance(o, Profile) for o in gc.get_objects()) - {KEPT}") \
        == LIVE
    assert kernel.run("gc.enable()").error is None

"""The Ranks tab of the report (issue 9): a multi-process profile shows its processes side by side,
names the one that differs most, says which processes ended, and works offline as static HTML."""
from __future__ import annotations

import profmagic
import json
import re

import numpy as np

import pytest

from profmagic import analysis, multi, report
from profmagic.model import StackBuilder
from plotly_json import arr
from profmagic.views import fmt, ranks

pytestmark = pytest.mark.timeout(120)

WORKERS = 3
ODD = 2  # the worker that spends most of its time in slow_io


def worker(i: int):
    """Worker i: main -> compute for 20 samples and main -> slow_io for 2 (ODD: 30) samples of 10 ms;
    compute is on CPU, slow_io is not."""
    b = StackBuilder()
    main = b.frame("main", "w.py", 1, "python")
    comp = b.frame("compute", "w.py", 5, "python")
    io = b.frame("slow_io", "w.py", 9, "python")
    t = 0.0
    for st, n, cpu in [((main, comp), 20, 0.01), ((main, io), 30 if i == ODD else 2, 0.0)]:
        sid = b.stack('Thread 1 "MainThread"', st)
        for _ in range(n):
            b.add(sid, time=t, wall=0.01, cpu=cpu)
            t += 0.01
    return b.build(metric="wall", meta={"backend": "sampler", "rate": 100.0, "duration": t, "pid": 100 + i})


@pytest.fixture
def many():
    labels = [f"pid {100 + i} · worker-{i}" for i in range(WORKERS)]
    p = multi.concat([worker(i) for i in range(WORKERS)], key="process", labels=labels)
    procs = dict(p.meta.processes)   # meta is read-only: a new profile with the process ended
    procs[labels[1]] = {**procs[labels[1]], "ended": True, "ended_at": 0.22}
    return p.with_meta(processes=procs), labels


def test_report_has_a_ranks_tab_with_one_line_and_one_bar_per_process(many):
    p, labels = many
    r = report.Report(p, uid="r1")
    assert r.TABS == ("Icicle", "Sandwich", "Source", "Time order", "Ranks", "Table", "Raw")
    i = r.TABS.index("Ranks")
    r.tabs.selected_index = i
    box = r.panes[i].children[0]
    assert "profmagic-ranks" in box._dom_classes
    line = box.children[0].value
    assert "\n" not in line and "<br" not in line
    assert re.search(rf"<b>{re.escape(labels[ODD])} differs most", line), line
    # Its compute and slow_io shares differ by the same amount (the two functions of the process).
    m = re.search(r"(compute|slow_io) takes (\d+)% of it vs (\d+)% in the others", line)
    share = {"compute": (20 / 50, 20 / 22), "slow_io": (30 / 50, 2 / 22)}[m.group(1)]
    assert (int(m.group(2)), int(m.group(3))) == tuple(round(100 * s) for s in share), line
    bars = box.children[1].outputs[0]["data"][report.PLOTLY_MIME]["data"]
    assert [len(tr["y"]) for tr in bars] == [WORKERS, WORKERS]          # CPU and off-CPU, one bar each
    cpu = dict(zip(bars[0]["y"], arr(bars[0]["x"])))
    assert cpu[labels[0]] == pytest.approx(0.2)                           # 20 samples x 10 ms on CPU
    off = dict(zip([y.split(" (ended")[0] for y in bars[1]["y"]], arr(bars[1]["x"])))
    assert off[labels[ODD]] == pytest.approx(0.3)
    # A click on a process shows its icicle, from that process only.
    box.show_process(ODD)
    fig = box.icicle_box.children[0].outputs[0]["data"][report.PLOTLY_MIME]
    assert arr(fig["data"][0]["values"])[0] == 500_000                        # 50 samples x 10 ms, in µs
    # The metric picker reaches the Ranks tab.
    r.metric.value = "cpu"
    r.tabs.selected_index = i
    assert "CPU time" in json.dumps(r.panes[i].children[0].children[1].outputs[0]["data"][report.PLOTLY_MIME]
                                    ["layout"]["title"])


def test_ended_process_is_noted_in_widget_and_static_html(many):
    p, labels = many
    note = f"{labels[1]} at +0.22 s"
    assert any("Ended during the recording" in n and note in n for n in report.notes(p))
    r = report.Report(p)
    assert "Ended during the recording" in r.widget.children[0].value
    h = report.static_html(p)
    assert note in h and f"{labels[1]} (ended at +0.22 s)" in h


def test_static_ranks_html_is_offline(many):
    p, labels = many
    h = report.static_html(p)
    assert "<script" not in h.lower() and "cdn" not in h.lower()
    assert not re.search(r"(src|href)\s*=\s*['\"]?(https?:)?//", h)  # nothing fetched from a network
    assert h.count("class='profmagic-rank-bar'") == WORKERS
    assert "class='profmagic-differs'" in h and f"{labels[ODD]} differs most" in h
    assert "class='profmagic-ranks-heat'" in h
    with pytest.raises(ValueError, match="CDN"):
        ranks.html(p, include_plotlyjs="cdn")
    inline = ranks.html(p, include_plotlyjs=True)  # plotly.js inlined, no script from the network
    assert inline.count("<script") >= 2 and not re.search(r"<script[^>]+src=", inline)


def test_single_process_has_no_ranks_tab():
    r = report.Report(worker(0))
    assert "Ranks" not in r.TABS and "Processes side by side" not in report.static_html(worker(0))


def spinner(seconds: float, pid: int):
    """A worker that only spins: main -> spin, 10 ms samples on CPU."""
    b = StackBuilder()
    sid = b.stack('Thread 1 "MainThread"', (b.frame("main", "w.py", 1, "python"), b.frame("spin", "w.py", 3)))
    n = round(seconds / 0.01)
    for k in range(n):
        b.add(sid, time=k * 0.01, wall=0.01, cpu=0.01)
    return b.build(metric="wall", meta={"backend": "sampler", "rate": 100.0, "duration": n * 0.01, "pid": pid})


@pytest.mark.parametrize("spins", [(0.3, 0.9), (0.4, 0.4, 1.2, 0.4)])
def test_alike_processes_differ_by_their_total(spins):
    """Same code in the same proportions: the one line names the process whose total is furthest
    from the others' median (two processes always tie on their function shares)."""
    labels = [f"spinner{i}" for i in range(len(spins))]
    p = multi.concat([spinner(s, 10 + i) for i, s in enumerate(spins)], key="process", labels=labels)
    line = analysis.differs_most(p)

    def gap(i):  # relative distance from the others' median
        med = np.median([s for j, s in enumerate(spins) if j != i])
        return abs(spins[i] - med) / med
    odd = max(range(len(spins)), key=gap)
    assert line.startswith(f"spinner{odd} differs most, in wall time (s): {fmt('wall', spins[odd])} vs"), line
    assert "spend their time alike" in line


def test_ranks_figures_have_honest_titles(many):
    p, labels = many
    want = ("wall time (s)", "backend sampler", "100 Hz", f"{p.sample_count} samples", f"{p.duration:.3f} s")
    for fig in (ranks.bars(p), ranks.heat(p)):
        assert all(w in fig.layout.title.text for w in want), fig.layout.title.text
    sub = analysis.process_profile(p, labels[0])
    t = profmagic.icicle(sub).layout.title.text
    assert all(w in t for w in ("wall time (s)", "backend sampler", "100 Hz", f"{sub.sample_count} samples")), t

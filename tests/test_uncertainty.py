"""Issue 25 items 1-2 in a real ipykernel: every function's figure carries a 95% interval that holds
the truth of a workload that times itself, the header says the resolution in words, and compare()
marks a change significant only when it is outside both runs' noise."""
from __future__ import annotations

import re

import numpy as np
import pytest
import retries

import profmagic
from profmagic import uncertainty as U

pytestmark = [pytest.mark.timed, pytest.mark.kernel, pytest.mark.timeout(400)]

SETUP = r'''
%load_ext profmagic
import time, re
import profmagic, profmagic.uncertainty, profmagic.views.header
TRUTH = {}
def busy(t):
    end = time.perf_counter() + t
    while time.perf_counter() < end:
        pass
def nap(t):
    time.sleep(t)
def timed(f, t):
    w0 = time.perf_counter()
    f(t)
    TRUTH[f.__name__] = time.perf_counter() - w0
def work(b=0.3, n=0.4):
    TRUTH.clear()
    w0 = time.perf_counter()
    timed(busy, b)
    timed(nap, n)
    TRUTH["timed"] = TRUTH["busy"] + TRUTH["nap"]
    TRUTH["work"] = TRUTH["<module>"] = time.perf_counter() - w0
def inside(p, metric="wall"):
    """Per function of TRUTH: (truth, total, lo, hi)."""
    f = p.functions(metric)
    f = f[f["name"].isin(["busy", "nap"])]
    return {n: (TRUTH[n], float(t), float(lo), float(hi))
            for n, t, lo, hi in zip(f["name"], f["total"], f["total_lo"], f["total_hi"])}
'''


@pytest.fixture(scope="module")
def k(kernel):
    r = kernel.run(SETUP)
    assert r.status == "ok", r.text() + str(r.error)
    return kernel


def _run(k, cell, backend="sampler", extra=""):
    r = k.run(f"%%profile -b {backend} -q {extra}\n{cell}\n")
    assert r.status == "ok", r.text() + str(r.error)
    return r


def _truth_miss(k, backend, kind):
    """One try: the profile's intervals against the workload's own times. Checked on every try: the
    interval columns and their order; counted (tests/retries.py): whether each holds the truth."""
    _run(k, "work()", backend)
    assert k.value(f"profmagic.uncertainty.kind(_profile, 'wall')") == kind
    got = k.value("inside(_profile)")
    assert set(got) == {"busy", "nap"}, got
    for name, (truth, total, lo, hi) in got.items():
        assert 0 <= lo <= total <= hi and hi > lo, (name, got)
    overloaded = retries.waited(k.value("_profile.meta.get('cell_run_delay')"), k.value("_profile.meta['cell_wall']"))
    bad = {n: v for n, v in got.items() if not v[2] <= v[0] <= v[3]}
    if kind == "timed":   # two stack changes each: a few sampling intervals wide, not a count's sqrt(n)
        bad.update({f"{n} (wider than ±0.1 s)": v for n, v in got.items() if (v[3] - v[2]) / 2 >= 0.1})
    return overloaded or (f"truth outside its interval: {bad}" if bad else None)


# Counted tries (tests/retries.py): a 95% interval may miss by design. Noise measured with
# `PROFMAGIC_MEASURE_NOISE=20 pytest -s tests/test_uncertainty.py -k intervals_hold` on 2026-12-05 at load 11
# on 2 cores (the cell waited for a core 20-47% of its time): the sampler missed 0 of 20 tries; calibrated
# py-spy missed 3 of 20, each time reading busy low and nap high by 0.13-0.2 s (busy 0.14 for 0.34): time
# moved from a spinning function to the sleep after it, beyond the counting rule; py-spy's own doing,
# traced in issue 25 item 4.
SAMPLER_TRUTH = retries.plan(0, 20, "load 11 on 2 cores, 2026-12-05")
PYSPY_TRUTH = retries.plan(3, 20, "load 11 on 2 cores, 2026-12-05")


def test_sampler_intervals_hold_the_truth(k):
    retries.run(SAMPLER_TRUTH, lambda: _truth_miss(k, "sampler", "timed"))


@pytest.mark.requires("py-spy", "ptrace")
def test_pyspy_intervals_hold_the_truth(k):
    retries.run(PYSPY_TRUTH, lambda: _truth_miss(k, "py-spy", "counted"))   # calibrated: counts


@pytest.mark.requires("py-spy", "ptrace")
def test_timed_pyspy_has_interval_columns(k):
    _run(k, "work()", "py-spy", "--timing timed --mode wall")
    assert k.value("profmagic.uncertainty.kind(_profile, 'wall')") == "timed"
    got = k.value("inside(_profile)")
    for name, (truth, total, lo, hi) in got.items():
        assert 0 <= lo < total < hi, (name, got)


def test_header_states_the_resolution(k):
    _run(k, "work()")
    line = k.value("profmagic.views.header.resolution(_profile)")
    n = k.value("_profile.sample_count")
    m = re.fullmatch(r"Resolution: ±([\d.]+) points at 95% for a function entered once, more for one entered "
                     r"often \(widest here: ±([\d.]+) points, (\S+)\) \(([\d,]+) timed samples\)(.*)", line)
    assert m, line
    assert int(m.group(4).replace(",", "")) == n
    assert 0 < float(m.group(1)) <= float(m.group(2)) < 50, line
    wide = float(m.group(2)) > U.WIDE
    assert ("raise --rate (now" in m.group(5) and "longer run" in m.group(5)) == wide, line
    html = k.value("profmagic.views.header.header_html(_profile)")
    assert "profmagic-resolution" in html and "points at 95%" in html
    # The same run's report: the live hover and the Sandwich list give intervals, and the static twin too
    assert "95%" in k.value("profmagic.icicle(_profile).data[0].hovertemplate")
    assert "total, 95% interval" in k.value("list(profmagic.sandwich(_profile).data[0].header.values)")
    static = k.value("__import__('profmagic.report.static').report.static.static_html(_profile)")
    assert "<th>total 95%</th>" in static and "this call path, 95%: " in static and "points at 95%" in static


def test_counted_and_exact_resolution_in_words():
    p = profmagic.load("main;a 90\nmain;b 270\n")   # folded counts: the binomial rule on 360 samples
    assert U.kind(p) == "counted"
    assert U.resolution(p).startswith("Resolution: ±4.5 points at 95% for a 25% share (360 samples, each a count);"
                                      " to narrow it")
    f = p.functions()
    # Wilson's interval of 90 in 360: 0.20807..0.29721 of 360
    assert f.loc["a", "total_lo"] == pytest.approx(0.20807 * 360, rel=1e-3)
    assert f.loc["a", "total_hi"] == pytest.approx(0.29721 * 360, rel=1e-3)
    # On every sample: Wilson's interval of 360 in 360 (it could have been away between samples)
    assert f.loc["main", "total_lo"] == pytest.approx(0.98943 * 360, rel=1e-4)
    assert f.loc["main", "total_hi"] == pytest.approx(360)


def _compare_in_kernel(k, second: str):
    _run(k, "work()")
    assert k.run("A = _profile\nTA = dict(TRUTH, root=A.meta['cell_wall'])").status == "ok"
    _run(k, second)
    r = k.run("B = _profile\nC = profmagic.compare(A, B, metric='wall')")
    assert r.status == "ok", r.text() + str(r.error)
    table = k.value("{n: bool(s) for n, s in zip(C.table['name'], C.table['significant'])}")
    live = k.value("[list(t.customdata[:, 4]) for t in C.figure.data if t.type == 'icicle' "
                   "and 'change:' in (t.hovertemplate or '') and t.visible is not False][0]")
    labels = k.value("[list(t.labels) for t in C.figure.data if t.type == 'icicle' "
                     "and 'change:' in (t.hovertemplate or '') and t.visible is not False][0]")
    html = k.value("C._repr_mimebundle_()['text/html']")
    truth = k.value("{n: dict(TRUTH, root=B.meta['cell_wall'])[n] - TA[n] for n in TA}")
    noise = k.value("dict(zip(C.table['name'], C.table['noise']))")
    return table, dict(zip(labels, live)), html, truth, noise


# Two runs of the same cell differ by chance, and for real on a loaded machine (a sleep that wakes late is
# longer): the workload times its functions, so a change marked significant is a miss only when its true
# change is under half the noise it was judged against (a false alarm), and a try whose cell waited for a core
# over half its time is not counted (tests/retries.py). `PROFMAGIC_MEASURE_NOISE=15 pytest -s
# tests/test_uncertainty.py -k back_to_back`, 2026-12-05, load 7-11 on 2 cores: see SAME_CELL.
SAME_CELL = retries.plan(0, 15, "load 7-11 on 2 cores, 2026-12-05")


def test_back_to_back_runs_mark_nothing_significant(k):
    def once():
        table, live, html, truth, noise = _compare_in_kernel(k, "work()")
        sig = [n for n, s in table.items() if s]
        assert (not sig) == ("no function changed by more than both runs" in html), (sig, html[:500])
        diff = html[html.index("profmagic-diff"):]
        diff = diff[:diff.index("</svg>")]
        assert ("· significant" in diff) == any(s.endswith(" significant") for s in live.values()), live
        live_sig = [n.replace("&lt;", "<").replace("&gt;", ">") for n, s in live.items() if s.endswith(" significant")]
        live_sig = ["root" if n == "all threads" else n for n in live_sig]
        false = [n for n in set(sig) | set(live_sig) if abs(truth.get(n, 0.0)) < noise.get(n, 0.0) / 2]
        overloaded = retries.waited(k.value("B.meta.get('cell_run_delay')"), k.value("B.meta['cell_wall']"))
        return overloaded or (f"significant with no true change: {false}; table {sig}, live {live}, true changes "
                              f"{truth}, noise {noise}" if false else None)
    retries.run(SAME_CELL, once)


def test_a_function_made_twice_slower_is_significant(k):
    table, live, html, truth, noise = _compare_in_kernel(k, "work(b=0.6)")
    assert table["busy"], table
    assert live["busy"].endswith(" significant"), live
    # nap did not change (unless a loaded machine woke it late: then it did, and may be marked)
    real = abs(truth["nap"]) >= noise["nap"] / 2
    assert real or (not table["nap"] and live["nap"].endswith("within noise")), (table, live, truth, noise)
    diff = html[html.index("profmagic-diff"):]
    diff = diff[:diff.index("</svg>")]
    busy = re.search(r"<title>busy\n[^<]*</title><rect[^>]*fill=\"(#[0-9a-f]{6})\"", diff)
    assert busy and "· significant" in busy.group(0), diff[:2000]
    assert int(busy.group(1)[1:3], 16) > int(busy.group(1)[5:7], 16) + 30   # red: slower
    nap = re.search(r"<title>nap\n[^<]*</title><rect[^>]*fill=\"(#[0-9a-f]{6})\"", diff)
    assert nap and (real or ("within noise" in nap.group(0) and nap.group(1) == "#d0d0d0")), nap
    assert "significant (outside both runs' 95% noise): busy" in html
    # The change table, as shown, says it in words
    row = re.search(r"<tr>\s*<td>busy</td>.*?</tr>", html, re.S)
    assert row and "<td>significant</td>" in row.group(0), html[-3000:]


def test_significance_rule_and_refusals():
    ch = np.array([0.05, 0.2])
    assert U.significant(ch, [0.9, 0.9], [1.1, 1.1], [0.9, 0.9], [1.1, 1.1]).tolist() == [False, True]
    a = profmagic.load("main;a 90\nmain;b 270\n").with_meta(rate=100.0)
    b = profmagic.load("main;a 90\nmain;b 270\n").with_meta(rate=500.0)
    with pytest.raises(ValueError, match="sample counts at different rates are not comparable"):
        profmagic.compare(a, b)
    assert U.not_comparable(a, b) == ["their rates differ more than 2x (100 Hz against 500 Hz)"]
    assert U.not_comparable(a.with_meta(mode="cpu"), a.with_meta(mode="wall")) == [
        "the runs measured different clocks (cpu against wall)"]
    assert U.not_comparable(a, a) == []


def _timed_profile():
    """A timed profile made by hand (a fake only in that no sampler ran: the arithmetic is the point):
    10 ms samples of main;a, one of main;b, then main;a again."""
    from profmagic.model import StackBuilder
    b = StackBuilder()
    main, fa, fb = b.frame("main", "m.py", 1), b.frame("a", "m.py", 2), b.frame("b", "m.py", 3)
    sa, sb = b.stack("T", (main, fa)), b.stack("T", (main, fb))
    sids = [sa] * 30 + [sb] + [sa] * 30
    b.add_samples(sids, time=0.01 * np.arange(1, 62), wall=np.full(61, 0.01))
    return b.build(metric="wall", meta={"backend": "sampler", "rate": 100.0})


def test_timed_arithmetic_boxes_and_below_resolution():
    p = _timed_profile()
    assert U.kind(p) == "timed"
    f = p.functions()
    # b: one run, two changes in 10 ms intervals: ±min(1.96·sqrt(2·0.01²/3), 0.02) = ±0.016 s, more than
    # its 0.01 s: below resolution
    h = min(U.Z * np.sqrt(2 * 0.01 ** 2 / 3), 0.02)
    assert f.loc["b", "total"] == pytest.approx(0.01)
    assert f.loc["b", "total_hi"] == pytest.approx(0.01 + h) and f.loc["b", "total_lo"] == 0.0
    # a: two runs, four changes, the recording's two edges among them (mean square g²/3 each)
    ha = min(U.Z * np.sqrt(4 * 0.01 ** 2 / 3), 0.04)
    assert f.loc["a", "total_hi"] - f.loc["a", "total"] == pytest.approx(ha)
    # main: on every sample, changes only at the recording's edges
    assert f.loc["main", "total_hi"] - f.loc["main", "total"] == pytest.approx(min(U.Z * np.sqrt(2 * 1e-4 / 3), 0.02))
    # The live icicle: each box's interval in its hover numbers; b faded and said to be below resolution
    from profmagic.views import icicle
    tr = profmagic.icicle(p).data[0]
    box = {lab: (c, txt, col) for lab, c, txt, col in zip(tr.labels, tr.customdata, tr.hovertext, tr.marker.colors)}
    assert "95%" in tr.hovertemplate
    assert box["b"][0][-2] == 0.0 and box["b"][0][-1] == pytest.approx(0.01 + h, rel=1e-5)
    assert box["b"][1].endswith("below resolution") and not box["a"][1].endswith("below resolution")
    assert box["b"][2] == icicle._faded(icicle.Paint.of(p, "wall").colours[p.functions().loc["b", "id"]])
    svg = icicle.svg(p)
    assert re.search(r"<title>b\n[^<]*this call path, 95%: 0–0\.026 s · below resolution", svg), svg
    assert re.search(r"<title>a\n[^<]*this call path, 95%: 0\.577–0\.623 s\n", svg), svg
    assert "below resolution" not in svg[svg.index("<title>a\n"):][:200]
    # The Sandwich's function list and the static twin's table give each function's interval
    from profmagic.report.static import functions_html
    from profmagic.views import sandwich
    t = sandwich.figure(p).data[0]
    assert "total, 95% interval" in t.header.values
    col = dict(zip(t.cells.values[0], t.cells.values[3]))
    assert col["b"] == "0–0.026" and col["a"] == f"{0.6 - ha:.4g}–{0.6 + ha:.4g}"
    html = functions_html(p, "wall")
    assert "<th>total 95%</th>" in html and re.search(r"<td>b</td>(\s*<td>[^<]*</td>){4}\s*<td>0–0\.026</td>", html), html
    # A Sandwich's callers and callees are no call paths from the root: no interval claimed there
    callers = sandwich.figure(p, "b").data[0]
    assert "95%" not in callers.hovertemplate


def _documented(error_id: str, text: str) -> bool:
    """``text`` holds the message docs/errors.md gives under ``### `error_id` `` (… matches anything)."""
    import os
    with open(os.path.join(os.path.dirname(__file__), "..", "docs", "errors.md"), encoding="utf-8") as f:
        doc = f.read()
    block = doc.split(f"### `{error_id}`", 1)[1].split("```text\n", 1)[1].split("\n```", 1)[0]
    return re.search(".*?".join(map(re.escape, block.split("…"))), text) is not None


def test_refusal_and_warning_are_documented():
    a = profmagic.load("main;a 90\nmain;b 270\n").with_meta(rate=100.0)
    with pytest.raises(ValueError) as e:
        profmagic.compare(a, a.with_meta(rate=500.0))
    assert _documented("compare-rates-differ", str(e.value)), str(e.value)
    p = _timed_profile()
    with pytest.warns(UserWarning) as w:
        c = profmagic.compare(p.with_meta(mode="cpu"), p.with_meta(mode="wall"), metric="wall")
    text = str(w[0].message)
    assert text == "before and after are not comparable: the runs measured different clocks (cpu against wall)"
    assert _documented("compare-not-comparable", text)
    assert "not comparable: the runs measured different clocks" in c.summary()
    # The same profile against itself: nothing changed, nothing significant, no warning
    same = profmagic.compare(p, p, metric="wall")
    assert not same.table["significant"].any() and (same.table["noise"] > 0).all()
    assert same.warnings == []


def test_eu_stack_cpu_moved_off_a_sleeping_stack_stays_inside_its_interval():
    """eu-stack's reader puts no CPU on a stack the thread is mostly seen asleep in: a waiting function's
    own small deltas (wakes, the ptrace stops themselves) go to the thread's running stack. A function
    that waited 1.2 s between two runs read 0 ms of CPU against 1.8-5.1 ms measured (bench_coverage.py
    --scenarios phases), outside its interval. Its interval now reaches the CPU moved off it, and the
    running stack's reaches down by what it received."""
    from profmagic.formats import eu_stack
    lines = ["# profmagic eu-stack sampler pid=1 interval=0.01 duration=1.0 snapshots=100"]
    for k in range(100):   # 20 running snapshots in spin, 60 asleep in wait (1 ms of CPU each), 20 in spin
        waiting = 20 <= k < 80
        state, ns, fn = ("S", 1_000_000, "wait") if waiting else ("R", 10_000_000, "spin")
        lines += [f"# t={0.01 * (k + 1):.6f}", "PID 1 - app", f"TID 1: state={state} cpu_ns={ns} comm=app",
                  f"#0  0x0000000000001000 {fn} - /lib/x.so", "#1  0x0000000000002000 main - /lib/x.so"]
    p = eu_stack.read(("\n".join(lines) + "\n").encode())
    f = p.functions("cpu").set_index("name")
    assert f.at["wait", "total"] == 0.0 and f.at["spin", "total"] == pytest.approx(0.46)
    assert f.at["wait", "total_hi"] >= 0.060 - 1e-12   # its 60 deltas of 1 ms could be its own
    assert f.at["spin", "total_lo"] <= 0.400 + 1e-12   # and are not surely spin's
    assert f.at["main", "total_lo"] <= f.at["main", "total"] <= f.at["main", "total_hi"]


def test_a_calibrated_pyspy_count_above_its_rate_widens_by_the_excess():
    """py-spy behind its timer takes the missed samples back to back at one stack. A lag from before
    the cell left the cell's thread 14% over 100 Hz in 3 of 10 loaded runs of bench_coverage.py
    --scenarios phases, those samples all at one stack, every function of the run outside its Wilson
    interval (86% coverage). The excess beyond Poisson chance now widens every interval."""
    from profmagic.backends.pyspy import calibrate_both
    from profmagic.model import StackBuilder

    def profile(spin, nap):
        b = StackBuilder()
        f = [b.frame(n, "a.py", i + 1, "python") for i, n in enumerate(["main", "spin", "nap"])]
        b.add(b.stack("cell", [f[0], f[1]]), samples=spin, wall=spin / 100, cpu=spin / 100)
        b.add(b.stack("cell", [f[0], f[2]]), samples=nap, wall=nap / 100, cpu=0.0)
        return calibrate_both(b.build(metric="wall", meta={"rate": 100.0, "backend": "py-spy"}),
                              "cell", wall_s=3.0, cpu_s=1.5, requested=100.0)

    # 300 expected in 3 s; 360 seen: 60 − 1.96·sqrt(300) = 26.05 samples beyond chance, at 3/360 s each.
    wide, plain = profile(150, 210), profile(150, 150)
    assert U.catch_up(plain) == 0.0
    assert U.catch_up(wide) == pytest.approx((60 - U.Z * np.sqrt(300)) * 3.0 / 360)
    fw, fp = wide.functions("wall").set_index("name"), plain.functions("wall").set_index("name")
    lo, hi = U.counted(np.array([fw.at["nap", "total"]]), 3.0 / 360, 360)
    assert fw.at["nap", "total_lo"] == pytest.approx(lo[0] - U.catch_up(wide))
    assert fw.at["nap", "total_hi"] == pytest.approx(hi[0] + U.catch_up(wide))
    # The truth the bunch hid (nap 1.5 s, if its 60 extra samples were one bunch) is inside only now.
    assert fw.at["nap", "total_lo"] <= 1.5 <= fw.at["nap", "total_hi"]
    assert not lo[0] <= 1.5
    assert fp.at["nap", "total_lo"] <= 1.5 <= fp.at["nap", "total_hi"]
    assert f"every interval is {U.catch_up(wide) * 1e3:,.0f} ms wider each way" in U.resolution(wide, "wall")
    assert "catching up" not in U.resolution(plain, "wall")

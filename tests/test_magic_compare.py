"""Issue 6 in a real ipykernel: --mode both on every backend, --compare, --backends, --rerun."""
from __future__ import annotations

import math
import os
import statistics

import pytest
import retries
import tools
import workloads

pytestmark = [pytest.mark.timed, pytest.mark.kernel, pytest.mark.timeout(300)]

SETUP = r'''
%load_ext profmagic
import time
RUNS = 0
TRUTH = {}
''' + workloads.SOURCE + r'''
def work():
    """spin then nap, each measured: the truth the profile is checked against."""
    global RUNS
    RUNS += 1
    c0, w0 = time.thread_time(), time.perf_counter()
    spin()
    c1, w1 = time.thread_time(), time.perf_counter()
    nap()
    c2, w2 = time.thread_time(), time.perf_counter()
    TRUTH.update(spin_cpu=c1 - c0, nap_wall=w2 - w1, nap_cpu=c2 - c1)
def evil():
    spin(0.2)
    nap(0.2)
evil.__code__ = evil.__code__.replace(co_name="<img src=x onerror=alert(1)>",
                                      co_qualname="<img src=x onerror=alert(1)>")
def totals(p, metric, match=None):
    """Function total per name (or the largest over names containing ``match``), NaN kept."""
    f = p.functions(metric)
    d = {str(n): float(v) for n, v in zip(f["name"], f["total"])}
    if match is None:
        return d
    return max([v for n, v in d.items() if match in n] or [0.0])
'''

PLOTLY = "application/vnd.plotly.v1+json"


@pytest.fixture(scope="module")
def k(kernel):
    r = kernel.run(SETUP)
    assert r.status == "ok", r.text() + str(r.error)
    return kernel


def _both(k, backend, extra=""):
    r = k.run(f"%%profile --backend {backend} --mode both -q {extra}\nwork()\n")
    assert r.status == "ok", r.text() + str(r.error)
    return r, k.value("dict(metrics=_profile.metrics, truth=TRUTH, mode=_profile.meta.get('mode'), "
                      "spin_cpu=totals(_profile, 'cpu').get('spin', 0.0), "
                      "nap_cpu=totals(_profile, 'cpu').get('nap', 0.0), "
                      "nap_wall=totals(_profile, 'wall').get('nap', 0.0))")


def _check(s, label):
    t = s["truth"]
    assert {"wall", "cpu", "off_cpu"} <= set(s["metrics"]), (label, s)
    assert s["spin_cpu"] == pytest.approx(t["spin_cpu"], rel=0.10), (label, "cpu(spin)", s)
    assert s["nap_cpu"] < 0.1 * t["spin_cpu"], (label, "cpu(nap) should be about 0", s)
    assert s["nap_wall"] == pytest.approx(t["nap_wall"], rel=0.10), (label, "wall(nap)", s)


def test_sampler_mode_both(k):
    _, s = _both(k, "sampler")
    _check(s, "sampler")


# Two py-spy beside the cell (--idle and without), calibrated on the cell thread's wall and CPU time, each
# try compared with the cell's own measurement of the same run (paired):
# - cpu(spin) within 10% and cpu(nap) under 10% of it, on every try: calibrated on the thread's CPU
#   time, they do not depend on load. A 30% CPU regression fails the first try.
# - wall(nap) is estimated (samples x effective rate) and noisy under load: the median of
#   r = ln(wall(nap) / measured nap) over PAIR_TRIES tries that did not wait for a core more than half
#   their wall time (retries.LOAD_LIMIT) must lie within +-ln 1.25.
# Measured `PROFMAGIC_MEASURE_NOISE=40 pytest -s tests/test_magic_compare.py::test_pyspy_mode_both_pair_calibrated`,
# 2026-12-04, 2 cores shared with other sessions (load 4.7-6.7): cpu(spin)/truth 0.990-1.001 in 40 of 40
# tries, cpu(nap) <= 0.003 s; 29 of 40 tries counted (11 waited over half their time), r: mean +0.037,
# sd 0.092, range -0.135..+0.222. The median of 12 has sd ~ 1.2533 x 0.092 / sqrt(12) = 0.033, so:
# - today's code fails when |median| > ln 1.25 = 0.223: (0.223 - 0.037) / 0.033 = 5.6 sd, about 1e-8;
# - wall read 30% high (r + 0.262): (0.299 - 0.223) / 0.033 = 2.3 sd, passes 1.1%; 30% low (r - 0.357):
#   (0.320 - 0.223) / 0.033 = 2.9 sd, passes 0.2% (a bootstrap of the 29 tries: 1.1% and 0.2%).
# A second run at heavier load (30 tries, 27 of them waited over half their time): those read r = +0.35
# (median), which is why they are not counted; its 3 counted tries read -0.09, +0.14 and -0.08.
# The rule it replaces (at most 16 misses of a +-10% check in 24 tries) passed a regression that made 30% of
# tries miss 99.996% of the time: today's noise alone makes 35% of counted tries miss it (10 of 29).
PAIR_TRIES = 12
PAIR_BOUND = math.log(1.25)
PAIR_MAX = 3 * PAIR_TRIES     # tries at most, overloaded ones included


@pytest.mark.requires("py-spy", "ptrace")
def test_pyspy_mode_both_pair_calibrated(k):
    """py-spy --mode both against the cell's own clocks: CPU on every try, wall by the median of
    PAIR_TRIES counted tries (the arithmetic above). With PROFMAGIC_MEASURE_NOISE=N: N tries, printed."""
    measuring = int(os.environ.get("PROFMAGIC_MEASURE_NOISE", "0") or 0)
    counted, overloaded = [], []
    for i in range(1, (measuring or PAIR_MAX) + 1):
        if not measuring and len(counted) == PAIR_TRIES:
            break
        r, s = _both(k, "py-spy")
        meta = k.value("{k: _profile.meta.get(k) for k in ('rate', 'requested_rate', 'calibrated', "
                       "'cpu_method', 'cell_thread_samples', 'cell_wall', 'cell_run_delay')}")
        assert "two py-spy recordings" in meta["cpu_method"] and meta["calibrated"] is True, meta
        assert meta["requested_rate"] == 100.0
        assert meta["rate"] == pytest.approx(meta["cell_thread_samples"] / meta["cell_wall"]), meta
        t = s["truth"]
        assert {"wall", "cpu", "off_cpu"} <= set(s["metrics"]), s
        assert s["spin_cpu"] == pytest.approx(t["spin_cpu"], rel=0.10), (i, "cpu(spin)", s)
        assert s["nap_cpu"] < 0.1 * t["spin_cpu"], (i, "cpu(nap) should be about 0", s)
        ratio = math.log(max(s["nap_wall"], 1e-6) / t["nap_wall"])
        waited = None if meta["cell_run_delay"] is None else meta["cell_run_delay"] / meta["cell_wall"]
        if measuring:
            print(f"try {i}: r {ratio:+.3f} cpu(spin)/truth {s['spin_cpu'] / t['spin_cpu']:.3f} "
                  f"cpu(nap) {s['nap_cpu']:.3f} waited {waited if waited is None else round(waited, 2)}")
        (overloaded if waited is not None and waited > retries.LOAD_LIMIT else counted).append(ratio)
    if measuring:
        print(f"{len(counted)} counted, {len(overloaded)} overloaded; counted r: mean "
              f"{statistics.fmean(counted):+.3f} sd {statistics.pstdev(counted):.3f}" if counted else "none counted")
        return
    if len(counted) < PAIR_TRIES:
        tools.lacking(f"needs a core to spare for this timing check: {len(overloaded)} of {PAIR_MAX} tries waited "
                      f"for a core over {retries.LOAD_LIMIT:.0%} of the time; install: run it on a machine that "
                      "is not overloaded")
    median = statistics.median(counted)
    assert abs(median) <= PAIR_BOUND, (f"wall(nap) off by a median factor {math.exp(median):.3f} over "
                                       f"{len(counted)} tries (bound 1.25): r = {[round(x, 3) for x in counted]}")


@pytest.mark.requires("eu-stack", "ptrace")
def test_eustack_mode_both(k):
    """eu-stack sees native frames only: the spin is the cell thread's CPU, the sleep is clock_nanosleep."""
    r = k.run("%%profile --backend eu-stack --mode both -q\nwork()\n", timeout=180)
    assert r.status == "ok", r.text() + str(r.error)
    s = k.value("dict(metrics=_profile.metrics, truth=TRUTH, "
                "cpu=float(_profile.stacks.loc[_profile.stacks.thread == _profile.meta['cell_thread'], 'cpu'].sum()), "
                "sleep_cpu=totals(_profile, 'cpu', 'nanosleep'), sleep_wall=totals(_profile, 'wall', 'nanosleep'))")
    t = s["truth"]
    assert {"wall", "cpu", "off_cpu"} <= set(s["metrics"]), s
    assert s["cpu"] == pytest.approx(t["spin_cpu"], rel=0.10), s
    assert s["sleep_cpu"] < 0.1 * t["spin_cpu"], s
    assert s["sleep_wall"] == pytest.approx(t["nap_wall"], rel=0.10), s


@pytest.mark.requires("perf", "perf_event")
def test_perf_mode_both_measures_wall_from_sched_switch(k):
    """perf --mode both: cpu-clock for on-CPU time, sched_switch for off-CPU time, one session."""
    r = k.run("%%profile --backend perf --mode both -q\nwork()\n", timeout=180)
    assert r.status == "ok", r.text() + str(r.error)
    s = k.value("dict(metrics=_profile.metrics, unknown=_profile.meta.get('unknown'), truth=TRUTH, "
                "cpu=float(_profile.stacks.loc[_profile.stacks.thread == _profile.meta['cell_thread'], 'cpu'].sum()), "
                "sleep_cpu=totals(_profile, 'cpu', 'nanosleep'), sleep_wall=totals(_profile, 'wall', 'nanosleep'))")
    t = s["truth"]
    assert {"wall", "cpu", "off_cpu"} <= set(s["metrics"]) and s["unknown"] is None, s
    assert s["cpu"] == pytest.approx(t["spin_cpu"], rel=0.10), s
    assert s["sleep_cpu"] < 0.1 * t["spin_cpu"], s
    assert s["sleep_wall"] == pytest.approx(t["nap_wall"], rel=0.10), s


def test_compare_shows_two_icicles_table_and_verdict(k):
    r = k.run("%%profile --compare --backend sampler\nwork()\nevil()\n")
    assert r.status == "ok", r.text() + str(r.error)
    shown = r.data + r.updates      # the comparison replaces the live view in place: one output
    figs = [d[PLOTLY] for d in shown if PLOTLY in d]
    assert len(figs) == 1, [list(d) for d in shown]
    traces = figs[0]["data"]
    assert [t["type"] for t in traces] == ["icicle", "icicle", "table"]   # CPU, wall (one scale), off-CPU table
    html = "".join(d.get("text/html", "") for d in shown if PLOTLY in d)
    assert "% of wall time off-CPU, mostly in" in html
    for col in ("cpu s", "off-CPU s", "wall s", "on-CPU %"):
        assert f"<th>{col}</th>" in html, col
    assert html.count("<svg") == 2          # the static twin: CPU and wall icicles
    assert "<img src=x" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    assert all("<img" not in str(lab) for t in traces if t["type"] == "icicle" for lab in t["labels"])
    # one output per cell: no Out[n] under the comparison; the Profile is in _profile
    assert r.result is None
    assert k.value("type(_profile).__name__ + ' ' + _profile.meta['mode']") == "Profile both"
    for cdn in ("cdn.", "unpkg", "https://cdn"):
        assert cdn not in html


@pytest.mark.requires("py-spy", "ptrace")
def test_backends_side_by_side_returns_dict_and_warns(k):
    names = ["sampler", "pyinstrument", "py-spy"]
    before = k.value("RUNS")
    r = k.run(f"%%profile --backends {','.join(names)}\nwork()\n")
    assert r.status == "ok", r.text() + str(r.error)
    assert f"runs the cell {len(names)} times" in r.stderr
    assert k.value("RUNS") - before == len(names)
    assert k.value("sorted((n, type(p).__name__) for n, p in _profiles.items())") == sorted((n, "Profile") for n in names)
    figs = [d[PLOTLY] for d in r.data if PLOTLY in d]
    assert len(figs) == 1 and len(figs[0]["data"]) == len(names)
    html = "".join(d.get("text/html", "") for d in r.data)
    assert html.count("<svg") == len(names) and "Top functions per backend" in html


def test_one_clock_backend_refuses_without_rerun(k):
    before = k.value("RUNS")
    r = k.run("%%profile --backend pyinstrument --mode both\nwork()\n")
    assert "measures one clock per run" in r.stderr and "--rerun" in r.stderr, r.text()
    assert k.value("RUNS") == before, "the cell must not run when --mode both is refused"


@pytest.mark.parametrize("backend", ["pyinstrument", "cprofile"])
def test_one_clock_backend_rerun_gives_both_and_warns(k, backend):
    before = k.value("RUNS")
    r = k.run(f"%%profile --backend {backend} --mode both --rerun -q\nwork()\n")
    assert r.status == "ok", r.text() + str(r.error)
    assert "runs TWICE" in r.stderr
    assert k.value("RUNS") - before == 2
    s = k.value("dict(metrics=_profile.metrics, truth=TRUTH, approx=_profile.meta['approximate'], "
                "runs=_profile.meta['runs'], spin_cpu=totals(_profile, 'cpu').get('spin', 0.0), "
                "nap_cpu=totals(_profile, 'cpu').get('nap', 0.0), nap_wall=totals(_profile, 'wall').get('nap', 0.0))")
    assert s["runs"] == 2 and "two separate runs" in s["approx"]
    assert {"wall", "cpu", "off_cpu"} <= set(s["metrics"])
    # The cpu run was the second: TRUTH holds its spin; the nap's wall is from the first run.
    assert s["spin_cpu"] == pytest.approx(s["truth"]["spin_cpu"], rel=0.10), s
    assert s["nap_cpu"] < 0.1 * s["truth"]["spin_cpu"], s
    assert s["nap_wall"] == pytest.approx(0.6, rel=0.10), s


@pytest.mark.requires("py-spy", "ptrace")
def test_pyspy_no_samples_on_a_deep_stack_points_to_sampler(k):
    """py-spy 0.4 records nothing for a 10,000-deep stack although the cell is busy for 0.3 s."""
    r = k.run("import sys\nsys.setrecursionlimit(30000)\n"
              "def deep(n):\n    return spin(0.3) if n == 0 else deep(n - 1)\n")
    assert r.status == "ok", r.text()
    r = k.run("%%profile --backend py-spy --idle\ndeep(10000)\n")
    assert "samples" in r.stderr and "py-spy reported" in r.stderr, r.text()
    assert "--backend sampler" in r.stderr and "run it longer" not in r.stderr, r.stderr

"""Issue 6 in a real ipykernel: --mode both on every backend, --compare, --backends, --rerun."""
from __future__ import annotations

import pytest
import retries
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


# Counted tries (tests/retries.py): py-spy's samples carry no time stamps, and two py-spy beside the cell
# need cores of their own. Noise: `PROFMAGIC_MEASURE_NOISE=40 pytest
# tests/test_magic_compare.py::test_pyspy_mode_both_pair_calibrated`, 2026-12-01 at load 7-14 on 2 cores:
# of 130 tries, 125 ran with the cell waiting for a core over half its time (92 of them missed, wall(nap)
# read 0.4-2.4 s for 0.6 s); 1 of the 5 counted missed; in a full `make test` at load 8-12, 6 of 12
# counted tries missed (wall(nap) 13-17 % off). So 7 of 17: the rule below (at most 16 misses in 24) is
# nearly toothless until the check is measured, or made steadier, on a machine with a core to spare.
PAIR = retries.plan(7, 17, "load 7-14 on 2 cores, 2026-12-01")


@pytest.mark.requires("py-spy", "ptrace")
def test_pyspy_mode_both_pair_calibrated(k):
    """Two py-spy at once (--idle and without), calibrated on the cell thread's wall and CPU time;
    the measured split is counted under the rule above, the rest checked on every try."""
    def once():
        r, s = _both(k, "py-spy")
        meta = k.value("{k: _profile.meta.get(k) for k in ('rate', 'requested_rate', 'calibrated', "
                       "'cpu_method', 'cell_thread_samples', 'cell_wall', 'cell_run_delay')}")
        assert "two py-spy recordings" in meta["cpu_method"] and meta["calibrated"] is True, meta
        assert meta["requested_rate"] == 100.0
        assert meta["rate"] == pytest.approx(meta["cell_thread_samples"] / meta["cell_wall"]), meta
        overloaded = retries.waited(meta["cell_run_delay"], meta["cell_wall"])
        if overloaded:
            return overloaded
        t = s["truth"]
        assert {"wall", "cpu", "off_cpu"} <= set(s["metrics"]), s
        off = [f"{what} {got:.3f} vs {want:.3f}" for what, got, want in (
            ("cpu(spin)", s["spin_cpu"], t["spin_cpu"]), ("wall(nap)", s["nap_wall"], t["nap_wall"]))
            if abs(got - want) > 0.10 * want]
        if s["nap_cpu"] >= 0.1 * t["spin_cpu"]:
            off.append(f"cpu(nap) {s['nap_cpu']:.3f}, should be about 0")
        return "; ".join(off) or None
    retries.run(PAIR, once)


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

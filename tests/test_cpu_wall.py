"""CPU vs wall (issue 6): the comparison display on a known profile, and real runs in --mode both."""
from __future__ import annotations

import ctypes
import importlib.util
import math
import os
import time

import numpy as np
import pytest

import profmagic
import retries
from workloads import nap, spin
from profmagic.model import StackBuilder
from profmagic.views import cpuwall as C

pytestmark = [pytest.mark.timed, pytest.mark.timeout(180)]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _hand_built():
    """wall 5 s, cpu 1 s: work is busy, wait blocks in a native acquire, io reads."""
    b = StackBuilder()
    f = {n: b.frame(n, "app.py", i + 1, "python") for i, n in enumerate(["main", "work", "wait", "io"])}
    acq = b.frame("acquire", "libpthread.so", None, "native")
    rd = b.frame("read", "libc.so", None, "native")
    T = 'Thread 1 "MainThread"'
    b.add(b.stack(T, [f["main"], f["work"]]), samples=100, wall=1.0, cpu=0.9)
    b.add(b.stack(T, [f["main"], f["wait"], acq]), samples=300, wall=3.0, cpu=0.0)
    b.add(b.stack(T, [f["main"], f["io"], rd]), samples=100, wall=1.0, cpu=0.1)
    return b.build(metric="wall", meta={"backend": "sampler", "rate": 100.0})


def test_table_sorted_by_off_cpu_with_exact_values():
    v = C.cpu_wall(_hand_built())
    t = v.table.set_index("function")
    assert list(v.table.columns) == ["function", "file", "cpu s", "off-CPU s", "wall s", "on-CPU %"]
    expect = {"main": (1.0, 4.0, 5.0), "wait": (0.0, 3.0, 3.0), "acquire": (0.0, 3.0, 3.0),
              "io": (0.1, 0.9, 1.0), "read": (0.1, 0.9, 1.0), "work": (0.9, 0.1, 1.0)}
    for name, (cpu, off, wall) in expect.items():
        r = t.loc[name]
        assert (r["cpu s"], r["off-CPU s"], r["wall s"]) == pytest.approx((cpu, off, wall))
        assert r["on-CPU %"] == pytest.approx(100 * cpu / wall)
    assert list(v.table["off-CPU s"]) == sorted(v.table["off-CPU s"], reverse=True)
    assert v.verdict == "80% of wall time off-CPU, mostly in wait waiting in acquire (75% of it)"


def icicles(fig):
    return [tr for tr in fig.data if tr.type == "icicle"]


def test_two_icicles_same_colour_per_function_at_one_scale():
    v = C.cpu_wall(_hand_built())
    fig = v.figure
    assert [tr.type for tr in fig.data] == ["icicle", "icicle", "table"]
    cpu, wall = icicles(fig)
    assert cpu.domain.x[1] <= wall.domain.x[0]  # side by side: CPU left, wall right
    # One scale: the CPU icicle is CPU/wall (1 s of 5 s) of the wall icicle's width.
    width = [tr.domain.x[1] - tr.domain.x[0] for tr in (cpu, wall)]
    assert width[0] / width[1] == pytest.approx(1.0 / 5.0) and v.ratio == pytest.approx(0.2)
    assert "off-CPU time = wall − CPU: 4 s" in " ".join(a.text for a in fig.layout.annotations)
    colour = [dict(zip(tr.labels, tr.marker.colors)) for tr in icicles(fig)]
    shared = set(colour[0]) & set(colour[1]) - {"CPU time (s)", "wall time (s)"}
    assert {"main", "work", "io", "read"} <= shared  # wait and acquire used no CPU
    assert {"wait", "acquire"} <= set(colour[1])
    assert all(colour[0][n] == colour[1][n] for n in shared)
    assert len({colour[1][n] for n in ("work", "wait", "io")}) == 3  # different functions differ
    texts = " ".join(a.text for a in fig.layout.annotations)
    assert "CPU time" in texts and "wall time" in texts
    assert "backend sampler" in fig.layout.title.text and "500 samples" in fig.layout.title.text
    html = v._repr_mimebundle_()["text/html"]
    assert "80% of wall time off-CPU" in html and "off-CPU s" in html
    # Off-CPU hatched in the wall icicle: wait (all off-CPU) densely, work (10 %) lightly.
    pattern = dict(zip(wall.labels, zip(wall.marker.pattern.shape, wall.marker.pattern.solidity)))
    assert pattern["wait"] == ("/", pytest.approx(0.65)) and pattern["work"][0] == "/"
    assert pattern["work"][1] < pattern["io"][1] <= pattern["wait"][1]   # denser: more of the box waiting
    assert cpu.marker.pattern.shape is None    # the CPU icicle has nothing off-CPU


def test_unknown_cpu_is_shown_as_unknown_never_zero():
    b = StackBuilder()
    f = [b.frame("main", "a.py", 1, "python"), b.frame("nap", "a.py", 2, "python")]
    b.add(b.stack("T", f), samples=10, wall=0.1)
    p = b.build(metric="wall", meta={"backend": "pyinstrument"}, unknown_metrics=["cpu"])
    v = C.cpu_wall(p)
    assert v.table["cpu s"].isna().all() and v.table["off-CPU s"].isna().all()
    assert "unknown" in v.verdict and "pyinstrument" in v.verdict
    html = v._repr_mimebundle_()["text/html"]
    assert "unknown" in html
    assert ">0<" not in html and ">0.0<" not in html
    assert len(icicles(v.figure)) == 1  # the wall icicle; the CPU side says why it is empty
    assert any("CPU time unknown" in a.text for a in v.figure.layout.annotations)


def test_escaped_names_in_cpu_wall():
    b = StackBuilder()
    evil = "<img src=x onerror=alert(1)>"
    b.add(b.stack("T", [b.frame(evil, "x.py", 1, "python")]), samples=1, wall=1.0, cpu=0.2)
    v = C.cpu_wall(b.build(metric="wall", meta={"backend": "t"}))
    html = v._repr_mimebundle_()["text/html"]
    assert "<img src=x" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    assert all("<img" not in str(x) for tr in icicles(v.figure) for x in tr.labels)
    assert "<img" not in v.figure.to_json()


# -- real runs ------------------------------------------------------------------------------------------
def _fn_totals(p, metric):
    f = p.functions(metric)
    return {n: float(v) for n, v in zip(f["name"], f["total"])}


def _check(cpu, wall, label, wall_rel=0.10):
    assert cpu.get("spin", 0.0) == pytest.approx(0.3, rel=0.10), f"{label}: cpu(spin)"
    assert cpu.get("nap", 0.0) < 0.03, f"{label}: cpu(nap) should be about 0"
    assert wall.get("nap", 0.0) == pytest.approx(0.6, rel=wall_rel), f"{label}: wall(nap)"


def test_sampler_mode_both_spin_and_sleep():
    with profmagic.profile("sampler", mode="both", rate=100, announce=lambda s: None) as rec:
        spin(0.3)
        nap(0.6)
    p = rec.profile
    assert {"wall", "cpu", "off_cpu"} <= set(p.metrics)
    cpu, wall = _fn_totals(p, "cpu"), _fn_totals(p, "wall")
    _check(cpu, wall, "sampler")
    v = C.cpu_wall(p)
    # On a loaded machine spin also waits for a core (off-CPU too), so the verdict may name either.
    off = p.total("off_cpu")
    assert v.verdict.startswith(f"{100 * off / p.total('wall'):.0f}% of wall time off-CPU, mostly")
    nap_row = v.table.set_index("function").loc["nap"]
    assert math.isclose(nap_row["on-CPU %"], 0.0, abs_tol=5.0)
    assert nap_row["off-CPU s"] == pytest.approx(nap_row["wall s"], rel=0.05)


# Counted tries (tests/retries.py): py-spy's samples carry no time stamps, each weighs 1/effective rate,
# and on a loaded 2-core machine its sample times jitter: nap got 0.32-0.75 s for 0.6 s in about 15
# single recordings at load 4-8, and a median of three once read 1.18x (a fresh clone's CI, 2026-12-05).
# Noise: `PROFMAGIC_MEASURE_NOISE=40 pytest -s tests/test_cpu_wall.py::test_pyspy_two_recordings_combined`,
# 2026-12-05: 3 of 40 tries missed at load 1.4, 6 of 40 beside 2 spinning processes (0.81-1.24x).
PYSPY_PAIR = retries.plan(9, 80, "load 1.4 and beside 2 spinners on 2 cores, 2026-12-05")


@pytest.mark.requires("py-spy", "ptrace")
def test_pyspy_two_recordings_combined():
    """Method (a): py-spy --idle and py-spy without --idle at once, combined per stack. The CPU split,
    which calibration ties to the measured CPU time, is checked on every try within 10%; wall(nap),
    within 15% of its measured time, is counted under the rule above."""
    from profmagic.procfs import run_delay
    from profmagic.transforms import combine_idle
    quiet = dict(announce=lambda s: None, rate=100)

    def once():
        with profmagic.profile("py-spy", idle=True, **quiet) as wall_rec:
            with profmagic.profile("py-spy", idle=False, **quiet) as cpu_rec:
                w0, d0 = time.perf_counter(), run_delay()
                spin(0.3)
                n0 = time.perf_counter()
                nap(0.6)
                nap_s, wall_s, delay = time.perf_counter() - n0, time.perf_counter() - w0, run_delay() - d0
        p = combine_idle(wall_rec.profile, cpu_rec.profile)
        assert p.meta["mode"] == "both" and "two py-spy recordings" in p.meta["cpu_method"]
        assert (p.weights("off_cpu") >= 0).all()
        cpu, wall = _fn_totals(p, "cpu"), _fn_totals(p, "wall")
        assert cpu.get("spin", 0.0) == pytest.approx(0.3, rel=0.10), "py-spy combined: cpu(spin)"
        assert cpu.get("nap", 0.0) < 0.03, "py-spy combined: cpu(nap) should be about 0"
        ratio = wall.get("nap", 0.0) / nap_s
        overloaded = retries.waited(delay, wall_s)
        return overloaded or (None if abs(ratio - 1.0) <= 0.15 else f"wall(nap)/measured {ratio:.2f}")
    retries.run(PYSPY_PAIR, once)


def _both_profile(n_wall, n_cpu):
    """The cell thread of a py-spy pair: ``n_wall`` --idle samples, ``n_cpu`` of them also without
    --idle, and a second thread with 50 of each; weights 1/100 s a sample, as read_pair gives."""
    b = StackBuilder()
    f = [b.frame("spin", "a.py", 1, "python"), b.frame("nap", "a.py", 2, "python")]
    b.add(b.stack("cell", [f[0]]), samples=n_cpu, wall=n_cpu / 100, cpu=n_cpu / 100)
    b.add(b.stack("cell", [f[1]]), samples=n_wall - n_cpu, wall=(n_wall - n_cpu) / 100, cpu=0.0)
    b.add(b.stack("other", [f[0]]), samples=50, wall=0.5, cpu=0.5)
    return b.build(metric="wall", meta={"backend": "py-spy", "rate": 100.0, "mode": "both"})


def test_calibrate_both_counts_waiting_for_a_core_as_runnable():
    """py-spy without --idle counts a thread waiting for a core as active: at load 4, a 0.3 s CPU
    spin got 135 such samples at 100 Hz (450 per CPU second), over the 1.35 s it was runnable
    (CPU + run-queue time). That is calibrated to the measured 0.3 s; a thread that waited for its
    threads (6 samples, 1 ms CPU, 1 ms on a run queue) is not."""
    from profmagic.backends.pyspy import calibrate_both
    q = calibrate_both(_both_profile(200, 135), "cell", 2.0, 0.3, 100, run_delay=1.05)
    assert q.meta["calibrated_cpu"] == 0.3
    assert q.stacks.loc[q.stacks["thread"] == "cell", "cpu"].sum() == pytest.approx(0.3)
    q = calibrate_both(_both_profile(200, 6), "cell", 2.0, 0.001, 100, run_delay=0.001)
    assert "calibrated_cpu" not in q.meta and "too few or too many" in q.meta["cpu_calibration_note"]
    assert q.stacks.loc[q.stacks["thread"] == "other", "cpu"].sum() == pytest.approx(0.5)  # wall factor 1


def _cworker():
    spec = importlib.util.spec_from_file_location("groundtruth", os.path.join(ROOT, "bench", "groundtruth.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return ctypes.CDLL(mod.build_cworker())


def _eustack_c_thread():
    """eu-stack sees a pure C thread's native frames; its CPU comes from /proc schedstat per sample.
    A 30-70 Hz sampler needs longer phases than the sampler: busy 0.6 s CPU, then sleep 1.2 s."""
    lib = _cworker()
    lib.cw_start.argtypes = [ctypes.c_double] * 3
    out = (ctypes.c_double * 7)()
    with profmagic.profile("eu-stack", mode="both", rate=100, all_threads=True,
                           announce=lambda s: None) as rec:
        lib.cw_start(0.6, 1.2, 0.1)  # one cycle: c_busy 0.6 s CPU, then c_sleep 1.2 s
        lib.cw_join(out)
    p = rec.profile
    c_tid = int(out[6])
    rows = p.stacks["thread"].astype(str).str.contains(rf"\b{c_tid}\b").to_numpy()
    assert rows.any(), f"the C thread {c_tid} is missing from {p.threads}"
    q = p.subset(rows)
    return _fn_totals(q, "cpu"), _fn_totals(q, "wall"), out


@pytest.mark.requires("eu-stack", "gcc", "ptrace")
def test_eustack_mode_both_cpu_on_a_pure_c_thread():
    cpu, wall, out = _eustack_c_thread()
    assert cpu.get("c_busy", 0.0) == pytest.approx(out[1], rel=0.10)
    assert cpu.get("c_sleep", 0.0) < 0.1 * out[1]


@pytest.mark.requires("eu-stack", "gcc", "ptrace")
def test_eustack_mode_both_wall_on_a_pure_c_thread():
    cpu, wall, out = _eustack_c_thread()
    assert wall.get("c_sleep", 0.0) == pytest.approx(out[2], rel=0.10)


@pytest.mark.requires("py-spy", "ptrace")
def test_pyspy_pair_recorder_cleans_up_and_calibrates():
    """The Recorder-shaped pair that --mode both uses for py-spy: both children reaped, temp files gone,
    and after calibration the cell thread sums to its measured wall and CPU time."""
    import threading
    from profmagic.backends.base import Options
    from profmagic.backends.pyspy import PairRecorder, calibrate_both, read as read_pair
    from profmagic.procfs import run_delay
    o = Options(rate=100)
    rec = PairRecorder(o)
    try:
        rec.start()
        procs = [r.proc for r in rec.recorders]
        tmps = [r.tmp.path for r in rec.recorders]
        w0, c0, d0 = time.perf_counter(), time.thread_time(), run_delay()
        spin(0.3)
        nap(0.6)
        wall_s, cpu_s, delay = time.perf_counter() - w0, time.thread_time() - c0, run_delay() - d0
        cap = rec.stop()
    finally:
        rec.close()
    assert all(p.poll() is not None for p in procs)
    assert not any(os.path.exists(t) for t in tmps)
    p = read_pair(cap, o)
    me = [t for t in p.threads if t.startswith(f"Thread {threading.get_native_id()} ")]
    assert me, p.threads
    q = calibrate_both(p, me[0], wall_s, cpu_s, run_delay=delay)
    mine = q.stacks[q.stacks["thread"] == me[0]]
    assert mine["wall"].sum() == pytest.approx(wall_s)
    assert mine["cpu"].sum() == pytest.approx(cpu_s)
    cpu = _fn_totals(q, "cpu")
    assert cpu.get("spin", 0.0) == pytest.approx(0.3, rel=0.10)
    assert cpu.get("nap", 0.0) < 0.03

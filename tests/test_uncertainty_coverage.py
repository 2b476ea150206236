"""Issue 25 item 5: the sampler's stated 95% intervals hold the truth of bench/groundtruth.py's workload,
whose functions time themselves (wall: perf_counter, CPU: thread_time, per call) on two Python threads.

A content check on a few runs: every function's measured total lies in its ``total_lo``..``total_hi``,
and the interval is not vacuous. The coverage rate over many runs and backends is bench/bench_coverage.py's
(bench/RESULTS.md, "Interval coverage against ground truth")."""
from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile

import pytest

pytestmark = [pytest.mark.timed, pytest.mark.timeout(300)]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _groundtruth():
    spec = importlib.util.spec_from_file_location("groundtruth", os.path.join(ROOT, "bench", "groundtruth.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _record(gt, scenario: str, seconds: float):
    cfg = next(c for c in gt.CONFIGS if c["name"] == "sampler")
    tmp = tempfile.mkdtemp(prefix="profmagic-cov-")
    try:
        res = gt.run_config(cfg, scenario, seconds, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return res["profiles"]["sampler"], res["truth"]


# Bounds: bench_coverage (20 runs per load, 2026-12-05, load 5-13 on 2 cores) found the sampler's truth
# inside its interval in 197 of 199 wall pairs and 199 of 199 CPU pairs, the worst error 1.10 half-widths
# from the estimate (the two misses: one run's hold and wait_turn, which share the holder thread's time,
# so time moved between them misses both). So each run (10 pairs) may miss one such pair, and no truth
# lies over 2 half-widths off (3.9 sigma of a normal error; seen: 1.17 in 1 of 30 test runs here, 1.56 in
# CI, wait_turn's 1 ms of CPU). A 3 s run at 100 Hz: about 35 cycles, 70 changes per function.
@pytest.mark.parametrize("scenario", ["cpu-heavy", "balanced", "wait-heavy"])
def test_sampler_intervals_hold_each_functions_measured_total(scenario):
    gt = _groundtruth()
    gt.build_cworker()
    p, truth = _record(gt, scenario, 3.0)
    assert p.meta.get("rate") and {"wall", "cpu"} <= set(p.metrics)
    missed, halves = [], []
    for metric, col in (("wall", 0), ("cpu", 1)):
        f = p.functions(metric)
        for th in ("main", "holder"):   # the sampler sees Python threads; the C thread has no Python state
            wall = truth[th]["thread"][0]
            for fn in gt.FUNCTIONS[th]:
                row = f[[gt._name_is(n, fn) for n in f["name"]]]
                assert len(row) == 1, (fn, list(f["name"]))
                r = row.iloc[0]
                tru = truth[th]["functions"][fn][col]
                lo, est, hi = float(r["total_lo"]), float(r["total"]), float(r["total_hi"])
                where = f"{scenario} {metric} {fn}: truth {tru:.4f} s, stated {est:.4f} [{lo:.4f}, {hi:.4f}]"
                assert 0 <= lo <= est <= hi, where
                if not lo <= tru <= hi:
                    missed.append(where)
                assert abs(tru - est) <= 2 * (hi - lo) / 2, where
                if metric == "wall":
                    assert hi > lo, where
                    halves.append((hi - lo) / 2 / wall)
    assert len(missed) <= 2, missed
    # Not vacuous: bench_coverage's median wall half-width is 4-4.5 points of the thread. One function's
    # may be far wider (a sampler that got no core for 2 s widened spin's to ±2 s once), not the median.
    assert sorted(halves)[len(halves) // 2] < 0.15, halves


# The holder thread only waits: it wakes, runs a few µs and blocks again at every change, always in a
# phase the sampler's GIL-bound ticks lock onto, so splitting those intervals at their middle gave
# `hold` 2.5-3.0 points too much in every run (bench/RESULTS.md). The scheduler's stamp of when the
# thread blocked (lastran.py) places those changes: within 1.5 points here, and their widths narrow.
def test_sampler_places_changes_between_waits_by_the_schedulers_stamp():
    from profmagic import lastran
    if not lastran.LastRan().ok:
        pytest.skip("this kernel has no /proc/<pid>/task/<tid>/sched (CONFIG_SCHED_DEBUG): changes are split by CPU rates")
    gt = _groundtruth()
    gt.build_cworker()
    p, truth = _record(gt, "balanced", 3.0)
    s = p.samples
    assert "change_width" in s
    holder = [t for t in s["thread"].cat.categories if "holder" in t]
    assert len(holder) == 1, list(s["thread"].cat.categories)
    placed = s[(s["thread"] == holder[0]) & s["change_width"].notna()]
    assert len(placed) >= 10, len(placed)   # about 70 changes, a third to all of them placed
    assert (placed["change_width"] < 0.003).all(), placed["change_width"].describe()
    f = p.functions("wall")
    wall = truth["holder"]["thread"][0]
    for fn in ("hold", "wait_turn"):
        est = float(f[[gt._name_is(n, fn) for n in f["name"]]]["total"].iloc[0])
        tru = truth["holder"]["functions"][fn][0]
        assert abs(est - tru) / wall < 0.015, (fn, est, tru, wall)
    # The widths survive a save and load (speedscope's extension block).
    from profmagic import formats
    from profmagic.formats import speedscope
    from profmagic.model import Raw
    back = formats.load(Raw(speedscope.write(p), "speedscope", filename="p.speedscope.json"))
    a = s["change_width"].to_numpy()
    b = back.samples.sort_values("time", kind="stable")["change_width"].to_numpy()
    assert int((a == a).sum()) == int((b == b).sum()) == int(s["change_width"].notna().sum())

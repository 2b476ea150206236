"""The built-in sampler's overhead on CPU-bound code, and the rate it really achieves.

Paired, alternating runs of the same CPU-bound function, bare and under the sampler (the order
flips every pair so drift on a shared machine cancels); the median of the per-pair ratios is
the overhead (target <= 1.05 at 100 Hz). Writes its section of bench/RESULTS.md.

    .venv/bin/python bench/bench_sampler.py [--pairs 15] [--no-write]
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from profmagic.backends import sampler  # noqa: E402
from profmagic.backends.base import Options  # noqa: E402

HEADER = "## Built-in sampler (issue 3)"


def cpu_bound(n=3_000_000):
    """Pure-Python work with calls, about 0.25 s here."""
    def step(i):
        return (i * i) % 7
    total = 0
    for i in range(n):
        total += step(i)
    return total


def bare() -> tuple[float, float]:
    """(wall, process CPU) seconds of the workload."""
    t, c = time.perf_counter(), time.process_time()
    cpu_bound()
    return time.perf_counter() - t, time.process_time() - c


def sampled(rate: float) -> tuple[tuple[float, float], dict, float]:
    """((wall, process CPU incl. the sampler thread) of the workload, capture meta, start+stop seconds)."""
    rec = sampler.Recorder(Options(rate=rate, mode="both"))
    try:
        t0 = time.perf_counter()
        rec.start()
        t, c = time.perf_counter(), time.process_time()
        cpu_bound()
        d = time.perf_counter() - t, time.process_time() - c
        t1 = time.perf_counter()
        cap = rec.stop()
        fixed = (t - t0) + (time.perf_counter() - t1)
    finally:
        rec.close()
    return d, cap.meta, fixed


def run(pairs: int, rate: float) -> dict:
    ratios, cpu_ratios, rates, fixed, bares = [], [], [], [], []
    bare(), sampled(rate)  # warm up
    for k in range(pairs):
        if k % 2 == 0:
            b = bare()
            s, meta, f = sampled(rate)
        else:
            s, meta, f = sampled(rate)
            b = bare()
        ratios.append(s[0] / b[0])
        cpu_ratios.append(s[1] / b[1])
        rates.append(meta["rate"])
        fixed.append(f)
        bares.append(b[0])
    return {"rate": rate, "ratio": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
            "cpu_ratio": statistics.median(cpu_ratios),
            "achieved": statistics.median(rates), "fixed": statistics.median(fixed),
            "bare": statistics.median(bares), "pairs": pairs}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=21)
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args(argv)
    rows = [run(a.pairs, r) for r in (100, 1000)]
    load = os.getloadavg()[0]
    lines = [HEADER, "",
             f"Command: `.venv/bin/python bench/bench_sampler.py --pairs {a.pairs}`  ",
             f"Python {platform.python_version()}, switch interval {sys.getswitchinterval() * 1e3:g} ms, "
             f"{os.cpu_count()} cores, load average {load:.2f} at the start of the last run; "
             f"CPU-bound pure-Python workload of {rows[0]['bare']:.3f} s (median bare run).", "",
             "| requested | achieved (median) | wall-time ratio, median of pairs [min, max] | target | "
             "process-CPU ratio (median) | start+stop |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        target = "≤ 1.05" if r["rate"] == 100 else "(none)"
        ok = "" if r["rate"] != 100 else (" ✔" if r["ratio"] <= 1.05 else " ✘")
        lines.append(f"| {r['rate']:g} Hz | {r['achieved']:.1f} Hz | {r['ratio']:.3f} "
                     f"[{r['ratio_min']:.3f}, {r['ratio_max']:.3f}] | {target}{ok} | {r['cpu_ratio']:.3f} | "
                     f"{r['fixed'] * 1e3:.1f} ms |")
    lines += ["", "Process-CPU ratio: the workload's CPU plus the sampler thread's, over the bare run's; "
                  "steadier than wall time when other jobs share the cores.",
              "The achieved rate is what the recorder reports (passes ÷ duration); the GIL switch "
                  "interval caps it, so 1000 Hz is not reached.", ""]
    text = "\n".join(lines)
    print(text)
    if not a.no_write:
        from results import write_section
        write_section(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

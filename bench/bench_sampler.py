"""The built-in sampler's overhead on CPU-bound code, and the rate it really achieves.

Paired, alternating runs of the same CPU-bound function, bare and under the sampler (the order
flips every pair so drift on a shared machine cancels); the median of the per-pair ratios is
the overhead (target <= 1.05 at 100 Hz). Writes its section of bench/RESULTS.md.

    .venv/bin/python bench/bench_sampler.py [--pairs 15] [--no-write]
    .venv/bin/python bench/bench_sampler.py --reasons [--pairs 15] [--no-write]

``--reasons`` measures what the off-CPU reasons (profmagic/reasons.py) add instead, side by side:
the same CPU-bound run with two waiting threads beside it (a 10 ms sleep loop and a thread blocked
on a lock), sampled with and without ``sampler.READ_REASONS``, alternating; in the runs with
reasons, the time inside ``_Thread.reason`` against the time of the whole sampling passes; and
the runs' median pass time with reasons and without. Writes the "### sampler" part of the
reasons section.
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


REASONS_HEADER = "## Off-CPU reasons: cost (issue 24 item 1)"


def _waiting_threads():
    """Two threads beside the workload, off-CPU at every pass: their reasons are read."""
    import threading
    stop, lock = threading.Event(), threading.Lock()
    lock.acquire()

    def sleeper():
        while not stop.is_set():
            time.sleep(0.01)

    ts = [threading.Thread(target=sleeper, daemon=True), threading.Thread(target=lock.acquire, daemon=True)]
    for t in ts:
        t.start()

    def end():
        stop.set()
        lock.release()
        for t in ts:
            t.join()
    return end


def reasons_cost(pairs: int, rate: float = 100.0) -> dict:
    """Overhead ratios with and without reasons, alternating; the time inside ``_Thread.reason``
    against the time of the sampling passes of the same runs (an interval on a core is decided in
    the pass, not there); and the median pass time with and without."""
    from profmagic import reasons
    run = {"reason": 0.0, "tick": 0.0, "reasons": 0, "reads": 0, "passes": 0}
    orig_reason, orig_tick, orig_runq = sampler._Thread.reason, sampler.Recorder._tick, reasons.ProcReader.runq_delta

    def counted_runq(self):   # every /proc read of a reason starts with this one (schedstat)
        run["reads"] += 1
        return orig_runq(self)

    def timed_reason(self, f, wall, cpu, now):
        t = time.perf_counter()
        try:
            return orig_reason(self, f, wall, cpu, now)
        finally:
            run["reason"] += time.perf_counter() - t
            run["reasons"] += 1

    def timed_tick(self, me, now, wall):
        t = time.perf_counter()
        try:
            return orig_tick(self, me, now, wall)
        finally:
            d = time.perf_counter() - t
            run["tick"] += d
            run["passes"] += 1
            durations.append(d)

    durations: list[float] = []
    end = _waiting_threads()
    with_r, without, pass_on, pass_off = [], [], [], []
    total = dict.fromkeys(run, 0)
    try:
        bare(), sampled(rate)   # warm up
        sampler._Thread.reason, sampler.Recorder._tick = timed_reason, timed_tick
        reasons.ProcReader.runq_delta = counted_runq
        for k in range(pairs):
            for on in ((True, False) if k % 2 == 0 else (False, True)):
                sampler.READ_REASONS = on
                b = bare()
                run.update(dict.fromkeys(run, 0))
                durations.clear()
                s, _, _ = sampled(rate)
                (with_r if on else without).append(s[0] / b[0])
                if durations:   # the run's median pass: a pass the kernel preempted is not the sampler's
                    (pass_on if on else pass_off).append(statistics.median(durations))
                if on:
                    for key, v in run.items():
                        total[key] += v
    finally:
        sampler.READ_REASONS = True
        sampler._Thread.reason, sampler.Recorder._tick = orig_reason, orig_tick
        reasons.ProcReader.runq_delta = orig_runq
        end()
    return {"with": statistics.median(with_r), "without": statistics.median(without), "pairs": pairs,
            "share": total["reason"] / total["tick"] if total["tick"] else 0.0,
            "per_read_us": total["reason"] / total["reasons"] * 1e6 if total["reasons"] else 0.0,
            "reads_per_pass": total["reads"] / total["passes"] if total["passes"] else 0.0,
            "calls_per_pass": total["reasons"] / total["passes"] if total["passes"] else 0.0,
            "pass_on_us": statistics.median(pass_on) * 1e6, "pass_off_us": statistics.median(pass_off) * 1e6}


def main_reasons(a) -> int:
    r = reasons_cost(a.pairs)
    over_with, over_without = r["with"] - 1, r["without"] - 1
    lines = [REASONS_HEADER, "", "### sampler", "",
             f"Command: `nice -n 19 .venv/bin/python bench/bench_sampler.py --reasons --pairs {a.pairs}`  ",
             f"Measured under load from other work (load average {os.getloadavg()[0]:.1f} at the end, "
             f"{os.cpu_count()} cores), side by side in one run: the CPU-bound workload with a sleeping "
             "and a lock-blocked thread beside it, at 100 Hz, sampled with and without reasons "
             "(`sampler.READ_REASONS`), alternating, each against its own bare run.", "",
             "| | wall-time ratio to bare (median) |", "|---|---|",
             f"| sampler, reasons off | {r['without']:.3f} |", f"| sampler, reasons on | {r['with']:.3f} |", "",
             f"Time inside the reasons (`_Thread.reason`: /proc reads and carried reasons): "
             f"{r['share'] * 100:.2f} % of the time of the sampling passes of the same runs "
             f"({r['per_read_us']:.2f} µs per thread-interval that needed a reason; {r['calls_per_pass']:.2f} "
             f"such intervals and {r['reads_per_pass']:.3f} /proc reads per pass, at most one read per thread "
             f"per {sampler.READ_EVERY * 1e3:g} ms: `sampler.READ_EVERY`).  ",
             f"Sampling-pass time (median of the runs' median passes): {r['pass_on_us']:.1f} µs with reasons, "
             f"{r['pass_off_us']:.1f} µs without ({(r['pass_on_us'] / r['pass_off_us'] - 1) * 100:+.1f} %: "
             "everything the reasons add to a pass: the on-CPU test made in the pass itself, `_Thread.reason`, "
             "the two sample columns and the stack rows they split; and the machine's noise).  ",
             f"The overhead ratios differ by {(over_with - over_without) * 100:+.2f} points "
             f"(on {over_without * 100:.2f} % without reasons), within this machine's noise.", ""]
    text = "\n".join(lines)
    print(text)
    if not a.no_write:
        from results import write_section
        write_section(text)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=21)
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--reasons", action="store_true", help="the cost of the off-CPU reasons (issue 24)")
    a = ap.parse_args(argv)
    if a.reasons:
        return main_reasons(a)
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

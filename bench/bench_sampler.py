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
    """Recordings with and without reasons, alternating (the order flips every pair), each beside
    its own bare run: their wall-time ratios to bare, and every sampling pass timed where it is
    called (``Recorder._tick``, wrapped the same way in both kinds of recording: nothing inside a
    pass is timed) by the clock (perf_counter) and by the sampler thread's CPU clock. What the
    reasons add to a pass is the difference of the two kinds' pass times."""
    from profmagic import reasons
    orig_tick, orig_runq = sampler.Recorder._tick, reasons.ProcReader.runq_delta
    reads, inside = [0], [0]
    passes: list = []   # (wall, thread CPU) of each pass of the current recording
    clock, cpu_clock = time.perf_counter, time.thread_time

    def counted_runq(self):   # every /proc read of a reason in a pass starts with this one (schedstat)
        reads[0] += inside[0]
        return orig_runq(self)

    def timed_tick(self, me, now, wall):
        inside[0] = 1
        t, c = clock(), cpu_clock()
        orig_tick(self, me, now, wall)
        passes.append((clock() - t, cpu_clock() - c))
        inside[0] = 0

    end = _waiting_threads()
    ratios = {True: [], False: []}
    walls = {True: [], False: []}       # every pass but each recording's first
    cpus = {True: [], False: []}
    firsts = {True: [], False: []}      # each recording's first pass (threads met, /proc files opened)
    pair_med = []                       # per pair: median pass CPU with reasons / without
    pair_mean = []                      # per pair: mean pass CPU (every pass) with reasons - without
    fixed = {True: [], False: []}       # start + stop seconds
    n_passes = {True: 0, False: 0}
    try:
        bare(), sampled(rate)   # warm up
        sampler.Recorder._tick = timed_tick
        reasons.ProcReader.runq_delta = counted_runq
        for k in range(pairs):
            med, mean = {}, {}
            for on in ((True, False) if k % 2 == 0 else (False, True)):
                sampler.READ_REASONS = on
                b = bare()
                passes.clear()
                s, _, f = sampled(rate)
                ratios[on].append(s[0] / b[0])
                fixed[on].append(f)
                if len(passes) > 1:
                    firsts[on].append(passes[0][1])
                    walls[on] += [w for w, _ in passes[1:]]
                    cpus[on] += [c for _, c in passes[1:]]
                    n_passes[on] += len(passes)
                    med[on] = statistics.median(c for _, c in passes[1:])
                    mean[on] = statistics.fmean(c for _, c in passes)
            if len(med) == 2:
                pair_med.append(med[True] / med[False])
                pair_mean.append(mean[True] - mean[False])
    finally:
        sampler.READ_REASONS = True
        sampler.Recorder._tick, reasons.ProcReader.runq_delta = orig_tick, orig_runq
        end()
    m = statistics.median
    q = statistics.quantiles(pair_med, n=4) if len(pair_med) > 1 else [pair_med[0]] * 3
    return {"with": m(ratios[True]), "without": m(ratios[False]), "pairs": pairs,
            "wall_on": m(walls[True]) * 1e6, "wall_off": m(walls[False]) * 1e6,
            "cpu_on": m(cpus[True]) * 1e6, "cpu_off": m(cpus[False]) * 1e6,
            "mean_on": statistics.fmean(cpus[True] + firsts[True]) * 1e6,
            "mean_off": statistics.fmean(cpus[False] + firsts[False]) * 1e6,
            "first_on": m(firsts[True]) * 1e6, "first_off": m(firsts[False]) * 1e6,
            "fixed_on": m(fixed[True]) * 1e3, "fixed_off": m(fixed[False]) * 1e3,
            "mean_diff": statistics.fmean(pair_mean) * 1e6,
            "mean_ci": 1.96 * statistics.stdev(pair_mean) / len(pair_mean) ** 0.5 * 1e6 if len(pair_mean) > 1 else 0.0,
            "pair_ratio": m(pair_med), "pair_q1": q[0], "pair_q3": q[2],
            "passes": n_passes[True], "passes_off": n_passes[False],
            "reads_per_pass": reads[0] / n_passes[True] if n_passes[True] else 0.0}


def interleaved_cost(recordings: int, rate: float = 100.0) -> dict:
    """The same workload and threads, each recording's passes alternating with and without reasons
    (``sampler.READ_REASONS`` is read at each pass): both kinds of pass meet the same load, caches
    and threads, so the recordings' drift cancels. Each pass is timed by the sampler thread's CPU
    clock around ``Recorder._tick``. Reads are due by time (``READ_EVERY``), so they fall on the
    passes with reasons, half the passes: twice as many per such pass as in a recording with
    reasons throughout (the difference overstates their part)."""
    orig_tick = sampler.Recorder._tick
    cpu_clock = time.thread_time
    kind = [False]
    passes = {True: [], False: []}
    diffs = []

    def timed_tick(self, me, now, wall):
        on = kind[0] = not kind[0]
        sampler.READ_REASONS = on
        c = cpu_clock()
        orig_tick(self, me, now, wall)
        passes[on].append(cpu_clock() - c)

    end = _waiting_threads()
    try:
        sampled(rate)   # warm up
        sampler.Recorder._tick = timed_tick
        for _ in range(recordings):
            n = {k: len(v) for k, v in passes.items()}
            rec = sampler.Recorder(Options(rate=rate, mode="both"))
            try:
                sampler.READ_REASONS = True   # the threads' /proc readers are made at the start
                rec.start()
                cpu_bound()
                sampler.Recorder._tick = orig_tick
                sampler.READ_REASONS = False   # the rows are mixed: the capture is not built with reasons
                rec.stop()
            finally:
                sampler.Recorder._tick = timed_tick
                rec.close()
            got = {k: v[n[k] + 1:] for k, v in passes.items()}   # each recording's first passes aside
            if got[True] and got[False]:
                diffs.append(statistics.fmean(got[True]) - statistics.fmean(got[False]))
    finally:
        sampler.READ_REASONS = True
        sampler.Recorder._tick = orig_tick
        end()
    m = statistics.median
    return {"n_on": len(passes[True]), "n_off": len(passes[False]), "recordings": recordings,
            "med_on": m(passes[True]) * 1e6, "med_off": m(passes[False]) * 1e6,
            "mean_on": statistics.fmean(passes[True]) * 1e6, "mean_off": statistics.fmean(passes[False]) * 1e6,
            "diff": statistics.fmean(diffs) * 1e6,
            "ci": 1.96 * statistics.stdev(diffs) / len(diffs) ** 0.5 * 1e6 if len(diffs) > 1 else 0.0}


def main_reasons(a) -> int:
    rate = 100.0
    r = reasons_cost(a.pairs, rate)
    i = interleaved_cost(2 * a.pairs, rate)
    per = 1e6 / rate / 100   # µs of sampler CPU per pass -> % of one core
    load0 = os.getloadavg()[0]
    over_with, over_without = r["with"] - 1, r["without"] - 1
    pct = lambda on, off: (on / off - 1) * 100   # noqa: E731
    lines = [REASONS_HEADER, "", "### sampler", "",
             f"Command: `nice -n 19 .venv/bin/python bench/bench_sampler.py --reasons --pairs {a.pairs}`  ",
             f"Measured with {os.cpu_count()} cores shared with other work (load average {load0:.1f} at the end), "
             "side by side in one run: the CPU-bound workload with a sleeping and a lock-blocked thread "
             f"beside it, at {rate:g} Hz, sampled with and without reasons (`sampler.READ_REASONS`), alternating "
             f"({a.pairs} pairs, the order flipped every pair), each recording beside its own bare run. "
             "Every sampling pass is timed where it is called (`Recorder._tick`, wrapped alike in both "
             "kinds of recording; nothing inside a pass is timed): by the clock and by the sampler "
             "thread's CPU clock, which a preemption does not inflate.", "",
             "| per sampling pass | with reasons | without | reasons add |", "|---|---|---|---|",
             f"| thread CPU, median of {r['passes']} / {r['passes_off']} passes (each recording's first aside) | "
             f"{r['cpu_on']:.1f} µs | {r['cpu_off']:.1f} µs | {pct(r['cpu_on'], r['cpu_off']):+.1f} % |",
             f"| thread CPU, median over pairs of the recordings' median pass, ratio [quartiles] | | | "
             f"{(r['pair_ratio'] - 1) * 100:+.1f} % [{(r['pair_q1'] - 1) * 100:+.1f}, "
             f"{(r['pair_q3'] - 1) * 100:+.1f}] |",
             f"| clock time, median | {r['wall_on']:.1f} µs | {r['wall_off']:.1f} µs | "
             f"{pct(r['wall_on'], r['wall_off']):+.1f} % |",
             f"| thread CPU, mean of every pass (first ones included) | {r['mean_on']:.1f} µs | "
             f"{r['mean_off']:.1f} µs | {pct(r['mean_on'], r['mean_off']):+.1f} % |",
             f"| the same, per pair (recording with reasons - its neighbour without), mean ± 95 % | | | "
             f"{r['mean_diff']:+.1f} ± {r['mean_ci']:.1f} µs ({r['mean_diff'] / r['mean_off'] * 100:+.1f} "
             f"± {r['mean_ci'] / r['mean_off'] * 100:.1f} %) |",
             f"| a recording's first pass (median thread CPU) | {r['first_on']:.1f} µs | {r['first_off']:.1f} µs | "
             f"{pct(r['first_on'], r['first_off']):+.1f} % |", "",
             f"Passes alternating with and without reasons inside the same {i['recordings']} recordings "
             "(the same load, caches and threads for both; the reads, due by time, all fall on the half with "
             "reasons, so their part counts twice), thread CPU:", "",
             "| per sampling pass | with reasons | without | reasons add |", "|---|---|---|---|",
             f"| median of {i['n_on']} / {i['n_off']} passes | {i['med_on']:.1f} µs | {i['med_off']:.1f} µs | "
             f"{pct(i['med_on'], i['med_off']):+.1f} % |",
             f"| mean | {i['mean_on']:.1f} µs | {i['mean_off']:.1f} µs | {pct(i['mean_on'], i['mean_off']):+.1f} % |",
             f"| per recording (each one's first passes aside), mean ± 95 % | | | {i['diff']:+.2f} ± {i['ci']:.2f} µs "
             f"({i['diff'] / i['mean_off'] * 100:+.1f} ± {i['ci'] / i['mean_off'] * 100:.1f} %) |", "",
             f"Start + stop of a recording (median): {r['fixed_on']:.2f} ms with reasons, {r['fixed_off']:.2f} ms "
             "without (with reasons, the start reads each thread's wait and the stop each live thread's "
             "last run-queue time).  ",
             f"/proc reads: {r['reads_per_pass']:.3f} per pass (at most one per thread per "
             f"{sampler.READ_EVERY * 1e3:g} ms: `sampler.READ_EVERY`; counted by a wrapper of "
             "`ProcReader.runq_delta`, the only thing wrapped on one side only).", "",
             "| | wall-time ratio to bare (median) |", "|---|---|",
             f"| sampler, reasons off | {r['without']:.3f} |", f"| sampler, reasons on | {r['with']:.3f} |", "",
             f"The overhead ratios differ by {(over_with - over_without) * 100:+.2f} points "
             f"(on {over_without * 100:.2f} % without reasons): this machine's noise is larger than that.", "",
             "As a share of the workload's time, from the passes: reasons add "
             f"{r['mean_diff']:+.1f} ± {r['mean_ci']:.1f} µs of the sampler's CPU per {1e3 / rate:g} ms "
             f"interval, {r['mean_diff'] / per:+.2f} ± {r['mean_ci'] / per:.2f} % of one core (per pair; "
             f"{i['diff'] / per:+.2f} ± {i['ci'] / per:.2f} % from the interleaved passes, which take every "
             "read). The sampler holds the GIL through a pass, so a Python-bound cell waits about as long: "
             "this is what the reasons add to its time.", ""]
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

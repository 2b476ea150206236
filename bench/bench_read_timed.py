"""Cost of reading py-spy's timed format (chrometrace) against its speedscope output, for one recording.

Two py-spy processes record the same 60 s ground-truth workload (bench/groundtruth.py, "balanced") at
once, one writing chrometrace, one speedscope; then each file is read in this process, alternately,
best of --reps, with tracemalloc's peak in a separate pass.

Run:  .venv/bin/python bench/bench_read_timed.py [--duration 60] [--reps 5] [--no-write]
"""
from __future__ import annotations

import argparse
import gc
import os
import shutil
import sys
import tempfile
import time
import tracemalloc

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import groundtruth as gt  # noqa: E402
from results import write_section  # noqa: E402


def timed(fn, reps):
    best = float("inf")
    for _ in range(reps):
        gc.collect()
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def peak(fn):
    gc.collect()
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--scenario", default="balanced")
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args(argv)
    from profmagic.formats import chrome_trace, speedscope
    gt.build_cworker()
    cfg = next(c for c in gt.CONFIGS if c["name"] == "py-spy timed")
    tmp = tempfile.mkdtemp(prefix="profmagic-readcost-")
    t0 = time.perf_counter()
    try:
        res = gt.run_config(cfg, a.scenario, a.duration, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    recorded = time.perf_counter() - t0
    timed_p = res["profiles"][gt.TIMED]
    ss_p = res["profiles"]["py-spy --idle (same run as timed)"]
    ct, ss = timed_p.raw.data, ss_p.raw.data
    opts = dict(timed_p.raw.options)   # what backends.pyspy reads it with: labels, window, ends, rate

    def read_ct():
        return chrome_trace.read(ct, source="py-spy chrometrace", **opts)

    def read_ss():
        return speedscope.read(ss, source="py-spy speedscope")
    results = {"chrometrace": [], "speedscope": []}
    for _ in range(a.reps):  # alternate, so that load on the machine hits both alike
        results["chrometrace"].append(timed(read_ct, 1))
        results["speedscope"].append(timed(read_ss, 1))
    best = {k: min(v) for k, v in results.items()}
    peaks = {"chrometrace": peak(read_ct), "speedscope": peak(read_ss)}
    import json
    events = len(json.loads(ct))
    p_ct, p_ss = read_ct(), read_ss()
    ratio = best["chrometrace"] / best["speedscope"]
    cmd = "cd /work/main && .venv/bin/python bench/bench_read_timed.py"
    if a.duration != 60.0 or a.reps != 5 or a.scenario != "balanced":
        cmd += f" --duration {a.duration:g} --reps {a.reps} --scenario {a.scenario}"
    L = ["## Reading py-spy's timed format: cost (issue 18)", "",
         f"Command: `{cmd}` ({time.strftime('%Y-%m-%d %H:%M')}, 2 cores shared with other test runs, python "
         f"{sys.version.split()[0]}; recording took {recorded:.0f} s). One {a.duration:g} s recording of the "
         f"ground-truth workload ({a.scenario}) by two py-spy processes at once, both `--idle` at "
         f"{gt.RATE:g} Hz: one writes chrometrace, one speedscope. Reading times are the best of {a.reps}, "
         "alternating the two; peak memory is tracemalloc's peak during one read.", "",
         "| file | bytes | events or samples | read (best) | read (all runs) | peak memory | samples in the Profile |",
         "|---|---|---|---|---|---|---|",
         f"| chrometrace (`chrome_trace.read`) | {len(ct):,} | {events:,} events | {best['chrometrace']:.3f} s | "
         + " ".join(f"{x:.3f}" for x in results["chrometrace"])
         + f" | {peaks['chrometrace'] / 2**20:.1f} MiB | {len(p_ct.samples):,} stretches, {p_ct.sample_count:,} samples (estimated) |",
         f"| speedscope (`speedscope.read`) | {len(ss):,} | {p_ss.sample_count:,} samples | "
         f"{best['speedscope']:.3f} s | " + " ".join(f"{x:.3f}" for x in results["speedscope"])
         + f" | {peaks['speedscope'] / 2**20:.1f} MiB | {p_ss.sample_count:,} samples |", "",
         f"Reading the timed format takes {ratio:.2f}x the time of the speedscope file of the same recording. "
         "py-spy's chrometrace has one B and one E event per frame that a stack change opens or closes, so its "
         "size follows how often stacks change (here every 13–60 ms, and on every line change inside a "
         "function, since py-spy keeps line numbers), not the sample count."]
    text = "\n".join(L) + "\n"
    print(text)
    if not a.no_write:
        write_section(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

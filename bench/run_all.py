"""Run every benchmark, one after the other, each writing its section of bench/RESULTS.md through
bench/results.py.

    .venv/bin/python bench/run_all.py            # the full figures (tens of minutes), into bench/RESULTS.md
    .venv/bin/python bench/run_all.py --quick    # small parameters, under 5 minutes: checks that every
                                                 # bench runs and writes; into build/bench-quick/RESULTS.md
    .venv/bin/python bench/run_all.py --only bench_sampler,groundtruth

--quick writes to a copy of RESULTS.md, never to RESULTS.md itself: quick figures are not results.
Exit status 1 when a bench failed (the others still run).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# name -> (arguments for the full run, arguments for --quick). Each writes its section unless told not to.
BENCHES = {
    "bench_sampler": ([], ["--pairs", "2"]),
    "bench_overhead": (["--write"], ["--write", "--rounds", "1"]),
    "bench_eustack": ([], ["--pairs", "1", "--rates", "50"]),
    "bench_perf_script": (["--runs", "5", "--opt", "none", "--opt", "tid"], ["--mb", "5", "--runs", "1"]),
    "bench_load": ([], ["--reps", "1", "--scale", "0.05"]),
    "groundtruth": ([], ["--duration", "0.5"]),
    "bench_merge": ([], ["--quick"]),
    "bench_report": ([], ["--runs", "1", "--stacks", "20000"]),
    "bench_read_timed": ([], ["--duration", "5", "--reps", "1"]),
    "bench_async": (["--write"], ["--write", "--rounds", "1"]),
    "bench_memray": (["--write"], ["--write", "--rounds", "1"]),
    "bench_cluster": ([], ["--sizes", "2", "--pairs", "1", "--no-ray", "--workers-on-paper", "10"]),
    "bench_display": ([], ["--stacks", "200000"]),
    "bench_fuzz": (["--write-results"], ["--write-results", "--per-format", "100", "--rseeds", "0",
                                         "--skip-dense"]),
    "bench_perf": (["--write"], ["--write", "--rounds", "1", "--skip", "names"]),
    "bench_pyspy_clock": ([], ["--recordings", "1"]),
    "bench_pyspy_error": ([], ["--recordings", "1", "--seconds", "1"]),
    "bench_perf_maps": (["--write"], ["--write", "--seconds", "2", "--runs", "1"]),
    "bench_frozen": ([], ["200000"]),
    "bench_record_signals": ([], ["--runs", "6"]),
    "bench_long_session": (["--unbounded"], ["--cells", "30", "--every", "10", "--live", "5"]),
    "bench_first_icicle": ([], ["--runs", "1", "--apps", "lab"]),
    "bench_coverage": ([], ["--runs", "1", "--duration", "1"]),
    "bench_waits": (["--write"], ["--rounds", "1"]),
    "bench_perf_pynames": (["--write"], ["--rounds", "1"]),
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small parameters; write a scratch copy of RESULTS.md")
    ap.add_argument("--only", help="comma-separated bench names (default: all)")
    a = ap.parse_args(argv)
    names = a.only.split(",") if a.only else list(BENCHES)
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        ap.error(f"unknown bench {unknown}; known: {', '.join(BENCHES)}")
    env = dict(os.environ)
    if a.quick:
        out_dir = os.path.join(ROOT, "build", "bench-quick")
        os.makedirs(out_dir, exist_ok=True)
        scratch = os.path.join(out_dir, "RESULTS.md")
        shutil.copyfile(os.path.join(HERE, "RESULTS.md"), scratch)
        env["PROFMAGIC_BENCH_RESULTS"] = scratch
        print(f"quick run: sections go to {scratch}; bench/RESULTS.md is not touched", flush=True)
    if "bench_perf_script" in names and not env.get("FLAMEGRAPH_GIT"):
        print("note: $FLAMEGRAPH_GIT is not set, so bench_perf_script times profmagic alone "
              "(set it to a git clone of github:brendangregg/FlameGraph to compare with stackcollapse-perf.pl)")
    done = []
    t_all = time.perf_counter()
    for name in names:
        full, quick = BENCHES[name]
        cmd = [sys.executable, os.path.join(HERE, name + ".py"), *(quick if a.quick else full)]
        print(f"\n=== {name}: {' '.join(cmd[1:])}", flush=True)
        t0 = time.perf_counter()
        rc = subprocess.run(cmd, cwd=ROOT, env=env).returncode
        done.append((name, rc, time.perf_counter() - t0))
        print(f"=== {name}: exit {rc} in {done[-1][2]:.0f} s", flush=True)
    print(f"\n{'bench':20s} {'exit':>4s} {'seconds':>8s}")
    for name, rc, s in done:
        print(f"{name:20s} {rc:4d} {s:8.0f}")
    print(f"{'all':20s} {'':4s} {time.perf_counter() - t_all:8.0f}")
    return 1 if any(rc for _, rc, _ in done) else 0


if __name__ == "__main__":
    raise SystemExit(main())

"""eu-stack sampler: achieved rate and the target's slowdown (paired with unprofiled runs).

The target is a child Python process that waits for a line on stdin, then times a fixed pure-Python
workload plus a C-like one (zlib) and prints the seconds. Each pair runs it once unprofiled and once
under profmagic's eu-stack recorder at the given rate, side by side; the ratio is per pair.

    .venv/bin/python bench/bench_eustack.py [--pairs 5] [--rates 20,50,100] [--no-write]

    .venv/bin/python bench/bench_eustack.py --reasons [--pairs 5] [--no-write]

Writes its section of bench/RESULTS.md through bench/results.py unless --no-write. ``--reasons``
measures what the off-CPU reasons (profmagic/reasons.py) cost instead: the helper reads no file
more for them (schedstat's run-queue field comes with the CPU counter it already reads), so the
target's slowdown cannot change; reading a capture does more, timed here with and without the
reasons, alternating, on one capture of the workload with a sleeping and a lock-blocked thread.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from profmagic.backends import eustack  # noqa: E402
from profmagic.backends.base import Options  # noqa: E402

TARGET = """\
import sys, time, threading, zlib
data = bytes(range(256)) * 4000
def work():
    s = 0
    for i in range(3_000_000):
        s += i % 7
    for _ in range(40):
        zlib.compress(data, 6)
sys.stdin.readline()
t = time.perf_counter()
work()
print(time.perf_counter() - t, flush=True)
"""


def run_once(rate: float | None, code: str = TARGET, backend=eustack, **options) -> tuple[float, object]:
    """Run ``code`` in a child (it waits for a line on stdin, then prints its seconds), under
    ``backend``'s recorder at ``rate`` (None: bare). Returns (seconds, the profile or None)."""
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    rec = None
    try:
        if rate:
            rec = backend.Recorder(Options(pid=child.pid, rate=rate, **options))
            rec.start()
        child.stdin.write(b"go\n")
        child.stdin.flush()
        secs = float(child.stdout.readline())
        return secs, backend.read(rec.stop(), Options(rate=rate)) if rec else None
    finally:
        if rec:
            rec.close()
        child.stdin.close()
        child.wait()
        child.stdout.close()


WAITERS = TARGET.replace("sys.stdin.readline()\n", """\
lock = threading.Lock(); lock.acquire()
threading.Thread(target=lock.acquire, daemon=True).start()
def nap():
    while True:
        time.sleep(0.01)
threading.Thread(target=nap, daemon=True).start()
sys.stdin.readline()
""")


def main_reasons(a) -> None:
    from profmagic.formats import eu_stack
    secs, p = run_once(100.0, WAITERS)
    data = p.raw.read()
    real = eu_stack._reasons

    def none(blocks, on_cpu, source):   # what the reader did before the reasons: nothing
        import numpy as np
        return ["cpu"] * len(blocks), np.zeros(len(blocks))
    times = {True: [], False: []}
    for k in range(a.pairs * 2):
        for on in ((True, False) if k % 2 == 0 else (False, True)):
            eu_stack._reasons = real if on else none
            t = time.perf_counter()
            eu_stack.read(data, source="bench")
            times[on].append(time.perf_counter() - t)
    eu_stack._reasons = real
    w, wo = statistics.median(times[True]), statistics.median(times[False])
    blocks = len(p.samples)
    lines = ["## Off-CPU reasons: cost (issue 24 item 1)", "", "### eu-stack", "",
             f"Command: `nice -n 19 .venv/bin/python bench/bench_eustack.py --reasons --pairs {a.pairs}`  ",
             f"Measured under load from other work (load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs), "
             "side by side in one run.", "",
             "- The helper (the target's slowdown): no file read more per snapshot; the run-queue time is the "
             "second field of the schedstat it already reads for CPU, written as `runq_ns=`. Its cost on the "
             "target is the same as before: 0 % of eu-stack's overhead by construction.",
             f"- Reading a capture ({blocks} thread snapshots, {len(set(p.samples['thread']))} threads, "
             f"{secs:.2f} s workload at 100 Hz): {wo * 1e3:.1f} ms without the reasons, {w * 1e3:.1f} ms with "
             f"(median of {a.pairs * 2} alternating reads each): {(w / wo - 1) * 100:+.1f} % of the read, "
             f"{(w - wo) / blocks * 1e6:.1f} µs per snapshot.", ""]
    text = "\n".join(lines)
    print(text)
    if not a.no_write:
        from results import write_section
        write_section(text)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--rates", default="20,50,100")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--reasons", action="store_true", help="the cost of the off-CPU reasons (issue 24)")
    a = ap.parse_args()
    if a.reasons:
        return main_reasons(a)
    print(f"eu-stack {eustack._version()}, {os.cpu_count()} CPUs, {a.pairs} pairs per rate")
    cmd = ".venv/bin/python bench/bench_eustack.py" + (f" --pairs {a.pairs}" if a.pairs != 5 else "") + \
        (f" --rates {a.rates}" if a.rates != "20,50,100" else "")
    lines = ["## Native backends (issue 5)", "",
             "eu-stack sampler (profmagic's helper loop: `eu-stack -q -p PID` per snapshot, one `eu-addr2line` pass",
             "at the end), on a child Python process doing a fixed CPU-bound workload; each pair runs it",
             f"unprofiled and profiled side by side. {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} "
             f"at the start; eu-stack {eustack._version()}; {time.strftime('%Y-%m-%d')}.", "",
             f"Command: `{cmd}`", "",
             "| target rate (Hz) | achieved rate (Hz, median) | slowdown (median ratio profiled/unprofiled) "
             "| ratios | unprofiled s (median) |",
             "|---|---|---|---|---|"]
    print("\n".join(lines[-2:]))
    for rate in [float(r) for r in a.rates.split(",")]:
        ratios, rates, base = [], [], []
        for _ in range(a.pairs):
            b, _ = run_once(None)
            s, p = run_once(rate)
            ratios.append(s / b)
            rates.append(p.meta["rate"])
            base.append(b)
        lines.append(f"| {rate:g} | {statistics.median(rates):.1f} | {statistics.median(ratios):.3f} | "
                     f"{', '.join(f'{r:.2f}' for r in ratios)} | {statistics.median(base):.3f} |")
        print(lines[-1], flush=True)
    if not a.no_write:
        from results import write_section
        write_section("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

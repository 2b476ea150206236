"""What hiding stray mappings in perf.data costs (``profmagic/backends/perf_maps.py``), beside the
``perf script`` that follows it on the same file.

A child spins in pure Python with 9 pages of libc mapped a second time, read-only (as memray's
symbolizer leaves it); ``perf record`` (the recorder's options: cpu-clock, DWARF stacks of 32 KB)
records it for ``--seconds`` at ``--rate`` Hz. Then, on copies of that one perf.data, paired per run:
``hide_stray_maps`` and ``perf script``. The patch reads every record header; perf script unwinds
every sample.

    .venv/bin/python bench/bench_perf_maps.py [--seconds 10] [--rate 999] [--runs 3] [--write]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from results import write_section  # noqa: E402

from profmagic.backends import perf, perf_maps  # noqa: E402

CHILD = """\
import mmap
libc = next(ln.split()[-1] for ln in open("/proc/self/maps") if "/libc.so" in ln or "/libc-" in ln)
f = open(libc, "rb")
stray = mmap.mmap(f.fileno(), 9 * 4096, mmap.MAP_PRIVATE, mmap.PROT_READ, offset=0x1a000)
print("ready", flush=True)
def spin():
    while True:
        sum(range(1000))
spin()
"""


def record(seconds: float, rate: int, out: str) -> None:
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    try:
        child.stdout.readline()
        subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-F", str(rate), "--call-graph",
                        f"dwarf,{perf.STACK_BYTES}", "--no-bpf-event", "--no-buildid-cache", "-p", str(child.pid),
                        "-o", out, "--", "sleep", str(seconds)], check=True, capture_output=True)
    finally:
        child.kill()
        child.wait()
        child.stdout.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rate", type=int, default=999)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="profmagic-bench-perf-maps-")
    try:
        src = os.path.join(d, "perf.data")
        t0 = time.perf_counter()
        load = os.getloadavg()[0]
        record(a.seconds, a.rate, src)
        size = os.path.getsize(src)
        patch, script, hidden = [], [], []
        for _ in range(a.runs):
            work = os.path.join(d, "work.data")
            shutil.copyfile(src, work)
            t = time.perf_counter()
            hidden = perf_maps.hide_stray_maps(work)
            patch.append(time.perf_counter() - t)
            t = time.perf_counter()
            subprocess.run(["perf", "script", "-F", perf.SCRIPT_FIELDS, "-i", work], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            script.append(time.perf_counter() - t)
            print(f"patch {patch[-1] * 1e3:.1f} ms, perf script {script[-1]:.2f} s", flush=True)
        ratio = statistics.median(p / s for p, s in zip(patch, script))
        text = "\n".join([
            "## Hiding stray mappings in perf.data (perf_maps.py)", "",
            f"Command: `.venv/bin/python bench/bench_perf_maps.py --seconds {a.seconds:g} --rate {a.rate} "
            f"--runs {a.runs} --write` ({time.strftime('%Y-%m-%d %H:%M')}, 2 shared cores, load average "
            f"{load:.1f} at the start, perf {perf.version()}; {time.perf_counter() - t0:.0f} s).", "",
            f"A {size / 2**20:.0f} MB perf.data ({a.seconds:g} s of a spinning child at {a.rate} Hz, DWARF stacks), "
            f"{len(hidden)} stray mapping(s) hidden ({', '.join(h['file'] for h in hidden)}). Paired per run:", "",
            "| | median | min | max |", "|---|---|---|---|",
            f"| `hide_stray_maps` | {statistics.median(patch) * 1e3:.1f} ms | {min(patch) * 1e3:.1f} ms | "
            f"{max(patch) * 1e3:.1f} ms |",
            f"| `perf script` | {statistics.median(script):.2f} s | {min(script):.2f} s | {max(script):.2f} s |",
            f"| patch / perf script | {ratio:.2%} | | |", ""])
        print(text)
        if a.write:
            write_section(text)
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()

"""How far off py-spy's timed trace is put on this process's clock (issue 18).

py-spy's chrometrace timestamps count from its own start; ``backends.pyspy`` puts them on
time.monotonic() through the moment py-spy said it samples (its first sample). Here the recorded
thread switches between two functions at known moments; the first event of each function after
its true start is late by the wait for py-spy's next sample (exponential, mean 1/rate) plus py-spy's
hand-over delay, never early. So per recording, the smallest lateness is the offset's error (plus a
little), and the median shows the usual lateness.

Run:  .venv/bin/python bench/bench_pyspy_clock.py [--recordings 8] [--no-write]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from results import write_section  # noqa: E402

SWITCHES = 10   # A then B, 50 ms each


def fa(s):
    t = time.perf_counter()
    while time.perf_counter() - t < s:
        pass


def fb(s):
    t = time.perf_counter()
    while time.perf_counter() - t < s:
        pass


def one(rate: float) -> list[float]:
    """Lateness (ms) of each function's first event after each true switch, on the recorder's clock."""
    from profmagic.backends import pyspy
    from profmagic.backends.base import Options
    o = Options(rate=rate, mode="wall", extra={"timing": "timed"})
    rec = pyspy.recorder(o)
    try:
        rec.start()
        switches = []
        for _ in range(SWITCHES):
            switches.append(("fa", time.monotonic()))
            fa(0.05)
            switches.append(("fb", time.monotonic()))
            fb(0.05)
        cap = rec.stop()
    finally:
        rec.close()
    doc = json.loads(cap.data)
    first = min(e["ts"] for e in doc if e["ph"] == "B")
    begins = [(e["name"], e["ts"]) for e in doc if e["ph"] == "B" and e["name"] in ("fa", "fb")]
    late = {"ready": [], "spawn": [], "used": []}
    for name, t in switches:
        ready, spawn = first + (t - rec.ready_at) * 1e6, (t - rec.spawned_at) * 1e6
        for how, at in (("ready", ready), ("spawn", spawn), ("used", min(ready, spawn))):   # as pyspy.trace_options
            after = [ts for n, ts in begins if n == name and ts >= at - 40_000]   # its previous call began 100 ms before
            if after:
                late[how].append((min(after) - at) / 1e3)
    return late


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recordings", type=int, default=8)
    ap.add_argument("--rate", type=float, default=100.0)
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args(argv)
    load0 = os.getloadavg()[0]
    rows = [one(a.rate) for _ in range(a.recordings)]
    cmd = "cd /work/main && .venv/bin/python bench/bench_pyspy_clock.py"
    if a.recordings != 8 or a.rate != 100.0:
        cmd += f" --recordings {a.recordings} --rate {a.rate:g}"
    L = ["## py-spy's timed trace on this process's clock (issue 18)", "",
         f"Command: `{cmd}` ({time.strftime('%Y-%m-%d %H:%M')}, 2 cores shared with other test runs, load average "
         f"{load0:.1f} to {os.getloadavg()[0]:.1f}, python {sys.version.split()[0]}). {a.recordings} recordings "
         f"at {a.rate:g} Hz of a thread switching between two busy functions every 50 ms ({2 * SWITCHES} switches "
         "each), through `backends.pyspy` with `timing=\"timed\"`. Each switch's time.monotonic() is put on the "
         "trace's clock three ways: through the moment py-spy said it samples (its first sample), through the "
         "moment it was started, and the earlier of the two (what the recorder uses for the run's bounds and "
         "thread ends). The function's first event after the switch is late by py-spy's next sample (mean "
         f"{1e3 / a.rate:g} ms, exponential) plus its hand-over delay, never early: a negative lateness is the "
         "mapping's error.", "",
         "| recording | first sample: smallest / median lateness (ms) | start: smallest / median | earlier of the two: "
         "smallest / median |", "|---|---|---|---|"]
    for i, r in enumerate(rows, 1):
        L.append(f"| {i} | " + " | ".join(f"{min(r[h]):+.1f} / {statistics.median(r[h]):+.1f}"
                                          for h in ("ready", "spawn", "used")) + " |")
    worst = {h: min(min(r[h]) for r in rows) for h in ("ready", "spawn", "used")}
    L += ["", "Most negative lateness (the mapping's worst error): " + ", ".join(
        f"{h} {worst[h]:+.1f} ms" for h in ("ready", "spawn", "used")) + " (the columns' order); 1% of a 5 s run "
          "is 50 ms."]
    text = "\n".join(L) + "\n"
    print(text)
    if not a.no_write:
        write_section(text)


if __name__ == "__main__":
    sys.exit(main())

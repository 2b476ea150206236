"""What --system costs (issue 24 item 2): perf --mode both with and without every CPU's wakeups.

Each round runs the same child (two threads handing a token back and forth through
threading.Event for SECONDS: thousands of wakeups) bare, under perf --mode both, and under perf
--mode both --system, in a rotating order. Per configuration: the child's handoffs per second
against the bare run of the round (ratio), the recording's stop-to-profile time, and the wakeup
records the script text holds. Measured under load from other work on a 2-core VM: ratios are
paired within a round.

    nice -n 19 .venv/bin/python bench/bench_waits.py [--rounds 5] [--write]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from results import write_section   # noqa: E402

from profmagic.backends import perf   # noqa: E402
from profmagic.backends.base import Options   # noqa: E402

SECONDS = 2.0
CHILD = r"""
import json, sys, threading, time
sys.stdin.readline()
a, b, n, end = threading.Event(), threading.Event(), [0], time.perf_counter() + float(sys.argv[1])
def other():
    while True:
        a.wait(); a.clear()
        if n[0] < 0: return
        b.set()
t = threading.Thread(target=other); t.start()
while time.perf_counter() < end:
    a.set(); b.wait(); b.clear(); n[0] += 1
k = n[0]; n[0] = -1; a.set(); t.join()
print(json.dumps({"handoffs": k / float(sys.argv[1])}), flush=True)
"""


def run(config: str) -> dict:
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(SECONDS)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    rec = None
    try:
        if config != "bare":
            o = Options(pid=p.pid, rate=100, mode="both", system=config == "system")
            rec = perf.Recorder(o)
            rec.start()
        p.stdin.write("go\n")
        p.stdin.flush()
        out = json.loads(p.stdout.readline())
        if rec is not None:
            t0 = time.perf_counter()
            cap = rec.stop()
            prof = perf.read(cap, o)
            out["stop_to_profile"] = time.perf_counter() - t0
            out["wakeups"] = cap.data.count(b" sched:sched_waking:") + cap.data.count(b" sched:sched_wakeup:")
            out["woken"] = int(prof.samples["ended"].notna().sum())
        return out
    finally:
        if rec is not None:
            rec.close()
        p.kill()
        p.wait()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--write", action="store_true", help="write the table to bench/RESULTS.md")
    args = ap.parse_args()
    configs = ["bare", "both", "system"]
    got: dict = {c: [] for c in configs}
    for r in range(args.rounds):
        order = configs[r % 3:] + configs[:r % 3]
        res = {c: run(c) for c in order}
        for c in configs:
            res[c]["ratio"] = res["bare"]["handoffs"] / res[c]["handoffs"]
            got[c].append(res[c])
    names = {"both": "perf --mode both", "system": "perf --mode both --system"}
    rows = []
    for c in configs:
        runs = got[c]
        med = lambda k: statistics.median(x[k] for x in runs) if k in runs[0] else float("nan")  # noqa: E731
        print(f"{c:7s} slowdown x{med('ratio'):.2f}  handoffs/s {med('handoffs'):,.0f}  "
              f"stop->profile {med('stop_to_profile'):.2f} s  wakeup records {med('wakeups'):,.0f}  "
              f"waits with a waker {med('woken'):,.0f}")
        if c in names:
            rows.append(f"| {names[c]} | x{med('ratio'):.2f} | {med('stop_to_profile'):.1f} s | "
                        f"{med('wakeups'):,.0f} | {med('woken'):,.0f} |")
    if args.write:
        load = os.getloadavg()[0]
        print(write_section(f"""## perf --system: what every CPU's wakeups cost (issue 24 item 2)

`nice -n 19 .venv/bin/python bench/bench_waits.py --rounds {args.rounds} --write` (load average {load:.1f}
at the end); ratios paired within each round (bare, perf --mode both, perf --mode both --system in
rotating order), medians of {args.rounds} rounds. The child hands a token between two threads through
threading.Event for {SECONDS:g} s.

| config | slowdown (bare / profiled handoffs) | stop to Profile | wakeup records | samples with a waker |
|---|---|---|---|---|
""" + "\n".join(rows) + """

`--system` records every CPU's `sched:sched_waking` with its kernel call graph (`perf record -a`):
every process's wakeups, not only this one's. It is for naming another process's waker (and a
timer's wakeup on an idle CPU), not for everyday use; it is not filtered by the wakee (a tracepoint
filter on the wakee's tid would miss threads born during the recording).
"""))

if __name__ == "__main__":
    main()

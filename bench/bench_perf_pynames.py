"""What perf's Python stack poller costs the target (issue 24: names on CPython 3.11, backends/perf_pynames.py).

Each round runs the same 3.11 child bare, under perf --mode both with the poller off
(``extra={"pynames": False}``: perf's own cost) and with it on (the default on 3.11), in a rotating
order, on two children each: one runs a Python busy loop for SECONDS (iterations per second), the
other two threads handing a token back and forth through threading.Event (handoffs per second: threads
that switch thousands of times a second). Per configuration: the child's rates against the bare
run of the round (ratio), the poller's reads and their mean duration, and the share of the Python
threads' switch-outs the reader named. Measured on a 2-core VM loaded by other work: ratios are paired
within a round; the poller's own CPU competes with the child's for the 2 cores.

    nice -n 19 .venv/bin/python bench/bench_perf_pynames.py [--rounds 5] [--write]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from results import write_section   # noqa: E402

from profmagic.backends import perf   # noqa: E402
from profmagic.backends.base import Options   # noqa: E402

SECONDS = 2.0
PY311 = sys.executable if sys.version_info[:2] == (3, 11) else shutil.which("python3.11")
CHILD = r"""
import json, sys, threading, time
sys.stdin.readline()
seconds, work = float(sys.argv[1]), sys.argv[2]
end = time.perf_counter() + seconds
if work == "loops":
    i = 0
    while time.perf_counter() < end:
        i += 1
    print(json.dumps({"loops": i / seconds}), flush=True)
else:
    a, b, n = threading.Event(), threading.Event(), [0]
    def other():
        while True:
            a.wait(); a.clear()
            if n[0] < 0: return
            b.set()
    t = threading.Thread(target=other); t.start()
    while time.perf_counter() < end:
        a.set(); b.wait(); b.clear(); n[0] += 1
    k = n[0]; n[0] = -1; a.set(); t.join()
    print(json.dumps({"handoffs": k / seconds}), flush=True)
"""
CONFIGS = ["bare", "both", "pynames"]


def run(config: str, work: str) -> dict:
    p = subprocess.Popen([PY311, "-c", CHILD, str(SECONDS), work], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    rec = None
    try:
        if config != "bare":
            o = Options(pid=p.pid, rate=100, mode="both", extra={"pynames": config == "pynames"})
            rec = perf.Recorder(o)
            rec.start()
        p.stdin.write("go\n")
        p.stdin.flush()
        out = json.loads(p.stdout.readline())
        if rec is not None:
            cap = rec.stop()
            if config == "pynames" and work == "handoffs":
                names = perf.read(cap, o).meta.get("python_names") or {}
                if "counts" not in names:
                    print(f"no snapshots in this run: {names}", flush=True)
                    return {**out, "named": float("nan"), "reads": 0, "read_ms": float("nan")}
                c = names["counts"]
                out["named"] = c["off_named"] / c["off"] if c["off"] else float("nan")
                m = re.search(r"(\d+) reads of ([\d.]+) ms", names["from"])
                out["reads"], out["read_ms"] = int(m.group(1)), float(m.group(2))
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
    got: dict = {c: [] for c in CONFIGS}
    for r in range(args.rounds):
        order = CONFIGS[r % 3:] + CONFIGS[:r % 3]
        res = {c: {} for c in CONFIGS}
        for work in ("loops", "handoffs"):
            for c in order:
                res[c].update(run(c, work))
        for c in CONFIGS:
            for k in ("loops", "handoffs"):
                res[c][k + "_ratio"] = res["bare"][k] / res[c][k]
                res[c][k + "_vs_both"] = res["both"][k] / res[c][k]
            got[c].append(res[c])
        print(f"round {r + 1}: " + "  ".join(f"{c} loops x{res[c]['loops_ratio']:.2f} handoffs "
                                             f"x{res[c]['handoffs_ratio']:.2f}" for c in CONFIGS), flush=True)

    def med(c, k):
        return statistics.median(x[k] for x in got[c]) if k in got[c][0] else float("nan")
    names = {"both": "perf --mode both, poller off", "pynames": "perf --mode both, poller on (default on 3.11)"}
    rows = []
    for c in ("both", "pynames"):
        extra = (f"handoffs child: {med(c, 'reads'):,.0f} reads of {med(c, 'read_ms'):.2f} ms; "
                 f"{med(c, 'named'):.0%} of its switch-outs named (most last microseconds: no snapshot "
                 "falls inside)") if c == "pynames" else "-"
        rows.append(f"| {names[c]} | x{med(c, 'loops_ratio'):.3f} | x{med(c, 'handoffs_ratio'):.3f} | "
                    f"x{med(c, 'loops_vs_both'):.3f} | x{med(c, 'handoffs_vs_both'):.3f} | {extra} |")
    print("\n".join(rows))
    if args.write:
        load = os.getloadavg()[0]
        print(write_section(f"""## perf on CPython 3.11: what the Python stack poller costs the target (issue 24)

`nice -n 19 .venv/bin/python bench/bench_perf_pynames.py --rounds {args.rounds} --write` (Python
{sys.version.split()[0]} child, load average {load:.1f} at the end, other helpers' tests running on the 2
cores); ratios paired within each round (bare, perf --mode both with the poller off, with it on, in
rotating order), medians of {args.rounds} rounds. Two children, {SECONDS:g} s each: a Python busy loop alone,
and two threads handing a token through threading.Event; perf at 100 Hz, the poller at 100 Hz.

| config | busy loop slowdown (bare / profiled) | handoff slowdown | busy loop, poller on / off | handoffs, poller on / off | poller |
|---|---|---|---|---|---|
""" + "\n".join(rows) + """

The poller never stops the target (it reads /proc/PID/mem); what it costs is its own CPU (reads x
duration per second of a core) taken from the 2 cores the child shares with it and perf.
"""))


if __name__ == "__main__":
    main()

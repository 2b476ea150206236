"""Native wall time (issue 16): perf --mode both against eu-stack, on the same workloads.

1. Accuracy against bench/groundtruth.py's truth, its three mixes (cpu-heavy, balanced, wait-heavy):
   the worst per-function error in points, wall and CPU, and each thread's seconds against its
   measured time, for groundtruth's "perf both" and "eu-stack" configurations.
2. Cost: the target's slowdown at 100 Hz, paired. Each round runs the same child workload bare,
   under perf --mode both and under eu-stack, in a rotating order; ratio = profiled / bare run of the
   round. Two workloads: bench_eustack.py's CPU-bound one (pure Python, then zlib), and a switchy
   one (two threads handing a token back and forth, with a little work each turn: thousands of
   context switches, each one a sched_switch record with its stack for perf).
3. Python names: of the samples in a C busy loop called from Python (ctypes), the share whose stack
   also names the calling Python function, per Python version, for perf (trampoline: -X perf) and
   eu-stack (the helper reads the frame chain).

    .venv/bin/python bench/bench_perf.py [--rounds 7] [--write]
"""
from __future__ import annotations

import argparse
import os
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

import bench_eustack  # noqa: E402
import groundtruth as gt  # noqa: E402
from results import write_section  # noqa: E402

from native.pynames import CTYPES_OUTER, PYTHONS, share_above  # noqa: E402
from profmagic.backends import eustack, perf  # noqa: E402
from profmagic.backends.base import Options  # noqa: E402

RATE = 100.0
SWITCHY = textwrap.dedent("""\
    import sys, threading, time
    sys.stdin.readline()
    a, b = threading.Event(), threading.Event()
    N = 3000
    def work():
        s = 0
        for i in range(300):
            s += i * i
    def pong():
        for _ in range(N):
            a.wait(); a.clear(); work(); b.set()
    t = threading.Thread(target=pong); t.start()
    t0 = time.perf_counter()
    for _ in range(N):
        work(); a.set(); b.wait(); b.clear()
    t.join()
    print(time.perf_counter() - t0, flush=True)
    """)
# The same hand-offs, each thread timing its own work and waits: the truth of the wall split.
SPLIT = textwrap.dedent("""\
    import json, sys, threading, time
    W, N = (int(x) for x in sys.argv[1:3]) if len(sys.argv) > 2 else (300, 3000)
    sys.stdin.readline()
    a, b = threading.Event(), threading.Event()
    work_s, wait_s = [0.0, 0.0], [0.0, 0.0]
    def work(k):
        t = time.perf_counter()
        s = 0
        for i in range(W):
            s += i * i
        work_s[k] += time.perf_counter() - t
    def hold(ev, k):
        t = time.perf_counter()
        ev.wait()
        wait_s[k] += time.perf_counter() - t
        ev.clear()
    def pong():
        for _ in range(N):
            hold(a, 1); work(1); b.set()
    t = threading.Thread(target=pong); t.start()
    t0 = time.perf_counter()
    for _ in range(N):
        work(0); a.set(); hold(b, 0)
    t.join()
    print(json.dumps({"seconds": time.perf_counter() - t0, "work": sum(work_s), "wait": sum(wait_s)}), flush=True)
    """)
WAITS = {"hold", "Event.wait", "Condition.wait"}
WORKLOADS = {"cpu-bound (bench_eustack's)": bench_eustack.TARGET, "switchy (2 threads, 6000 hand-offs)": SWITCHY}


# -- 1. accuracy --------------------------------------------------------------------------------
def accuracy(scenarios) -> list[dict]:
    rows = []
    for scenario in scenarios:
        for cfg in gt.CONFIGS:
            if cfg["name"] not in ("perf both", "eu-stack"):
                continue
            tmp = tempfile.mkdtemp(prefix="profmagic-bench-perf-")
            try:
                res = gt.run_config(cfg, scenario, gt.DURATION, tmp)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            for label, p in res["profiles"].items():
                for metric in ("wall", "cpu"):
                    for r in gt.score(p, res["truth"], metric):
                        rows.append({**r, "scenario": scenario, "backend": label, "metric": metric,
                                     "rate": p.meta.get("rate"), "samples": p.sample_count,
                                     "lost": p.meta.get("lost_events")})
            print(f"accuracy: {scenario} {cfg['name']} done", flush=True)
    return rows


def accuracy_table(rows) -> list[str]:
    import pandas as pd
    df = pd.DataFrame(rows)
    fn = df[df["function"] != "(thread)"].assign(err=lambda d: (d["est"] - d["truth"]).abs())
    th = df[df["function"] == "(thread)"].assign(pct=lambda d: 100 * (d["est"] / d["truth"] - 1).abs())
    out = ["| backend | scenario | worst wall error (pp) | worst CPU error (pp) | thread wall off by (max %) "
           "| thread CPU off by (max %, thread: truth s) | rate (Hz) | perf's lost-event records |",
           "|---|---|---|---|---|---|---|---|"]
    for (b, s), g in fn.groupby(["backend", "scenario"], sort=False):
        t = th[(th["backend"] == b) & (th["scenario"] == s)]
        tw, tc = t[t["metric"] == "wall"], t[t["metric"] == "cpu"]
        worst_c = tc.loc[tc["pct"].idxmax()] if len(tc) else None
        out.append(f"| {b} | {s} | {g[g['metric'] == 'wall']['err'].max():.2f} | "
                   f"{g[g['metric'] == 'cpu']['err'].max():.2f} | {tw['pct'].max():.2f} | "
                   + (f"{worst_c['pct']:.1f} ({worst_c['thread']}: {worst_c['truth']:.3f} s)" if worst_c is not None
                      else "-") + f" | {g['rate'].iloc[0] or float('nan'):.1f} | "
                   + ("-" if pd.isna(g["lost"].iloc[0]) else f"{int(g['lost'].iloc[0])}") + " |")
    return out


# -- 2. cost ------------------------------------------------------------------------------------
def cost(rounds: int) -> list[str]:
    out = ["| workload | bare s (median) | perf --mode both: ratio median [min, max] | eu-stack: ratio median [min, max] "
           "| perf ratio / eu-stack ratio (median of rounds) |", "|---|---|---|---|---|"]
    for name, code in WORKLOADS.items():
        ratios = {"perf": [], "eu-stack": []}
        bare = []
        order = [None, "perf", "eu-stack"]
        for r in range(rounds):
            secs = {}
            for backend in order[r % 3:] + order[:r % 3]:
                mod = {"perf": perf, "eu-stack": eustack}.get(backend)
                secs[backend] = bench_eustack.run_once(RATE if mod else None, code, mod or eustack,
                                                       **({"mode": "both"} if mod is perf else {}))[0]
            bare.append(secs[None])
            for b in ("perf", "eu-stack"):
                ratios[b].append(secs[b] / secs[None])
            print(f"cost: {name} round {r + 1}: bare {secs[None]:.3f} s, perf {ratios['perf'][-1]:.3f}, "
                  f"eu-stack {ratios['eu-stack'][-1]:.3f}", flush=True)
        fmt = lambda xs: f"{statistics.median(xs):.3f} [{min(xs):.2f}, {max(xs):.2f}]"  # noqa: E731
        pair = statistics.median(p / e for p, e in zip(ratios["perf"], ratios["eu-stack"]))
        out.append(f"| {name} | {statistics.median(bare):.3f} | {fmt(ratios['perf'])} | {fmt(ratios['eu-stack'])} "
                   f"| {pair:.3f} |")
    return out


# -- 4. where perf's cost goes on switch-heavy code (issue 27) -------------------------------------
def split(p) -> float:
    """The profile's work share in % of work + waits (SPLIT's functions; wall, Python frames)."""
    work = wait = 0.0
    for st, w in zip(p.stacks["stack"], p.stacks["wall"]):
        names = {p.frames.at[f, "name"] for f in st if p.frames.at[f, "kind"] == "python"}
        if "work" in names:
            work += w
        elif names & WAITS:
            wait += w
    return 100 * work / (work + wait) if work + wait else float("nan")


def raw_run(py: list[str], code: str, args: list[str] | None, tmp: str) -> dict:
    """``code`` in a child of ``py`` under a plain ``perf record ARGS -p PID`` (None: bare), enabled
    before the go. The child's seconds and CPU (user, system: the kernel's stack copies at each switch
    run in the child), perf's own CPU (its reader-writer) and perf.data's size."""
    import json
    child = subprocess.Popen([*py, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    rec = fds = None
    try:
        if args is not None:
            ctl, ack = os.path.join(tmp, "ctl"), os.path.join(tmp, "ack")
            for f in (ctl, ack):
                if os.path.exists(f):
                    os.unlink(f)
                os.mkfifo(f)
            fds = os.open(ctl, os.O_RDWR), os.open(ack, os.O_RDWR | os.O_NONBLOCK)
            rec = subprocess.Popen(["perf", "record", *args, "--mmap-pages", str(perf.MMAP_PAGES), "--no-bpf-event",
                                    "--no-buildid-cache", "-D", "-1", f"--control=fifo:{ctl},{ack}",
                                    "-p", str(child.pid), "-o", os.path.join(tmp, "perf.data")],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            os.write(fds[0], b"enable\n")
            buf, deadline = b"", time.monotonic() + 20
            while b"ack" not in buf and time.monotonic() < deadline:
                if select.select([fds[1]], [], [], 0.5)[0]:
                    buf += os.read(fds[1], 64)
            assert b"ack" in buf, "perf did not start"
        child.stdin.write(b"go\n")
        child.stdin.flush()
        line = child.stdout.readline()
        child.stdin.close()
        _, _, ru = os.wait4(child.pid, 0)
        child.returncode = 0
        out = {"s": json.loads(line)["seconds"], "user": ru.ru_utime, "sys": ru.ru_stime}
        if rec is not None:
            _, _, pru = os.wait4(rec.pid, 0)
            rec.returncode = 0
            out.update(perf_cpu=pru.ru_utime + pru.ru_stime, mb=os.path.getsize(os.path.join(tmp, "perf.data")) / 1e6)
        return out
    finally:
        child.stdout.close()
        for fd in fds or ():
            os.close(fd)
        if child.returncode is None:
            child.kill()
            child.wait()
        if rec is not None and rec.returncode is None:
            rec.kill()
            rec.wait()


def breakdown_variants(rate: float) -> dict:
    """One part added per row, up to the default and the lean mode (``lean_switches``), plain
    ``perf record`` with backends/perf.py's flags."""
    clock = f"cpu-clock/period={int(1e9 // rate)}/"
    dwarf = ["--call-graph", f"dwarf,{perf.STACK_BYTES}"]
    sw = ["--switch-events", "-k", "CLOCK_MONOTONIC"]
    kb = perf.SHALLOW_SWITCH_STACK
    switch = f"sched:sched_switch/call-graph=dwarf,stack-size={kb}/"
    base = ["-e", clock, *sw, *dwarf]
    return {
        "bare": None,
        "cpu-clock + switch records (--switch-events)": base,
        "+ sched_switch, no call graph": [*base, "-e", "sched:sched_switch/call-graph=no/"],
        f"+ sched_switch, {kb // 1024} KB user stack only (--user-callchains): **lean switches**":
            [*base, "-e", switch, "--user-callchains"],
        f"+ sched_switch, {kb // 1024} KB user stack and its kernel call graph":
            [*base, "-e", switch],
        "+ sched_waking with its kernel call graph: **the default**":
            [*base, "-e", switch, "-e", "sched:sched_waking/call-graph=fp/"],
        "lean + sched_waking without call graph (wakers kept, interrupts' not told)":
            [*base, "-e", switch, "-e", "sched:sched_waking/call-graph=no/", "--user-callchains"],
    }


def breakdown(py: list[str], rounds: int) -> list[str]:
    variants = breakdown_variants(RATE)
    names_ = list(variants)
    res = {n: [] for n in names_}
    tmp = tempfile.mkdtemp(prefix="profmagic-bench-perf-raw-")
    try:
        for r in range(rounds):
            for n in names_[r % len(names_):] + names_[:r % len(names_)]:
                res[n].append(raw_run(py, SPLIT, variants[n], tmp))
            print(f"breakdown round {r + 1}: " + ", ".join(f"{x[-1]['s'] / res['bare'][-1]['s']:.2f}"
                                                        for x in res.values()), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    med = statistics.median
    bare = res["bare"]
    out = ["| perf record adds | target wall: ratio median [min, max] | target wall: best of the rounds / bare's best "
           "| target CPU (user + system): ratio median "
           "| target user CPU s | target system CPU s (kernel side: events, stack copies) | perf's own CPU s "
           "(reads the ring buffers, writes perf.data) | (target + perf CPU) / bare target CPU | perf.data MB "
           "| target CPU (user + system) added per hand-off (µs, medians) |", "|---|---|---|---|---|---|---|---|---|---|"]
    cpu = lambda x: x["user"] + x["sys"]  # noqa: E731
    for n in names_:
        xs = res[n]
        rat = [x["s"] / b["s"] for x, b in zip(xs, bare)]
        crat = [cpu(x) / cpu(b) for x, b in zip(xs, bare)]
        out.append(f"| {n} | {med(rat):.3f} [{min(rat):.2f}, {max(rat):.2f}] | "
                   f"{min(x['s'] for x in xs) / min(b['s'] for b in bare):.3f} | {med(crat):.3f} | "
                   f"{med(x['user'] for x in xs):.3f} | {med(x['sys'] for x in xs):.3f} | "
                   + (f"{med(x['perf_cpu'] for x in xs):.3f} | "
                      f"{med((cpu(x) + x['perf_cpu']) / cpu(b) for x, b in zip(xs, bare)):.3f} | "
                      f"{med(x['mb'] for x in xs):.1f} | "
                      f"{1e6 * (med(cpu(x) for x in xs) - med(cpu(b) for b in bare)) / (2 * 3000):.1f} |"
                      if variants[n] else "- | 1.000 | - | - |"))
    return out


def offcpu_by_leaf(p) -> dict:
    """% of the profile's off-CPU wall (wall - CPU) by the stack's innermost Python function; a
    labelled row (events lost, ...) by its label, a stack without Python by "(no Python frame)"."""
    out, total = {}, 0.0
    for st, w, c in zip(p.stacks["stack"], p.stacks["wall"], p.stacks["cpu"].fillna(0)):
        names = [p.frames.at[f, "name"] for f in st]
        py = [n for f, n in zip(st, names) if p.frames.at[f, "kind"] == "python"]
        key = py[-1] if py else ("[label]" if names and names[0].startswith("[") else "(no Python frame)")
        out[key] = out.get(key, 0.0) + (w - c)
        total += w - c
    return {k: 100 * v / total for k, v in out.items()} if total else {}


KINDS = [("bare", None), ("default", {}), ("lean switches", {"lean_switches": True})]


def cheaper(py: list[str], rounds: int, args: tuple = (), rate: float = RATE) -> list[str]:
    """Bare, --mode both by default and with lean switches, through backends/perf.py, paired: the
    target's slowdown and the wall split each profile gives, against the target's own."""
    import json
    kinds = KINDS
    res = {k: [] for k, _ in kinds}
    for r in range(rounds):
        for k, extra in kinds[r % 3:] + kinds[:r % 3]:
            child = subprocess.Popen([*py, "-c", SPLIT, *map(str, args)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE)
            rec = None
            try:
                if extra is not None:
                    rec = perf.Recorder(Options(pid=child.pid, rate=rate, mode="both", extra=extra))
                    rec.start()
                child.stdin.write(b"go\n")
                child.stdin.flush()
                truth = json.loads(child.stdout.readline())
                child.stdin.close()
                _, _, ru = os.wait4(child.pid, 0)
                child.returncode = 0
                row = {"s": truth["seconds"], "cpu": ru.ru_utime + ru.ru_stime,
                       "truth": 100 * truth["work"] / (truth["work"] + truth["wait"])}
                if rec:
                    p = perf.read(rec.stop(), Options(rate=rate))
                    off = p.samples[p.samples["reason"] != "cpu"]
                    row.update(split=split(p), cost=p.meta["cost"], lost=p.meta.get("lost_events") or 0,
                               off=offcpu_by_leaf(p), woken=int(p.samples["woken_by"].notna().sum()),
                               reasons={k: 100 * v / off["wall"].sum()
                                        for k, v in off.groupby("reason")["wall"].sum().items()})
                res[k].append(row)
            finally:
                if rec:
                    rec.close()
                if child.returncode is None:
                    child.kill()
                    child.wait()
                child.stdout.close()
        print(f"cheaper round {r + 1}: " + ", ".join(f"{k} {v[-1]['s'] / res['bare'][-1]['s']:.2f}"
                                                   f" cpu {v[-1]['cpu'] / res['bare'][-1]['cpu']:.2f}"
                                                   + (f" split {v[-1]['split']:.1f}/{v[-1]['truth']:.1f}"
                                                      if 'split' in v[-1] else "") for k, v in res.items()),
              flush=True)
    med = statistics.median
    bare = res["bare"]
    prof = [k for k, _ in kinds[1:]]
    every = {c for k in prof for x in res[k] for c in x["off"]}
    keys = sorted((c for c in every if max(med(x["off"].get(c, 0.0) for x in res[k]) for k in prof) >= 1),
                  key=lambda c: -med(x["off"].get(c, 0.0) for x in res[prof[0]]))
    for k in prof:
        for x in res[k]:
            x["off"]["other"] = sum(v for c, v in x["off"].items() if c not in keys)
    keys.append("other")
    why = sorted({c for k in prof for x in res[k] for c in x["reasons"]})
    out = ["| --mode both | target wall: ratio median [min, max] "
           "| target wall: best of the rounds / bare's best | target CPU: ratio median [min, max] "
           "| work share of work + waits: profile, median [min, max] "
           "| the target's own, same runs (median) | profile − own, median [worst] (points) "
           "| perf's lost-event records (median) | samples with a waker (median) | "
           + " | ".join(f"off-CPU wall in `{c}` (median %)" for c in keys) + " | "
           + " | ".join(f"off-CPU wall, reason `{c}` (median %)" for c in why) + " |",
           "|---|---|---|---|---|---|---|---|---|" + "---|" * (len(keys) + len(why))]
    for k in prof:
        xs = res[k]
        rat = [x["s"] / b["s"] for x, b in zip(xs, bare)]
        crat = [x["cpu"] / b["cpu"] for x, b in zip(xs, bare)]
        sp = [x["split"] for x in xs]
        out.append(f"| {k} | {med(rat):.3f} [{min(rat):.2f}, {max(rat):.2f}] | "
                   f"{min(x['s'] for x in xs) / min(b['s'] for b in bare):.3f} | "
                   f"{med(crat):.3f} [{min(crat):.2f}, {max(crat):.2f}] | "
                   f"{med(sp):.1f} [{min(sp):.1f}, {max(sp):.1f}] | {med(x['truth'] for x in xs):.1f} | "
                   f"{med(x['split'] - x['truth'] for x in xs):+.1f} [{max(abs(x['split'] - x['truth']) for x in xs):.1f}] | "
                   f"{med(x['lost'] for x in xs):.0f} | {med(x['woken'] for x in xs):.0f} | "
                   + " | ".join(f"{med(x['off'].get(c, 0.0) for x in xs):.1f}" for c in keys) + " | "
                   + " | ".join(f"{med(x['reasons'].get(c, 0.0) for x in xs):.1f}" for c in why) + " |")
    a, b = res[prof[1]], res[prof[0]]
    d = [(x["split"] - x["truth"]) - (y["split"] - y["truth"]) for x, y in zip(a, b)]
    out += ["", f"Lean minus default, round by round: error against the target's own split, median {med(d):+.2f} "
            f"points [{min(d):+.2f}, {max(d):+.2f}]; target CPU lean / default median "
            f"{med(x['cpu'] / y['cpu'] for x, y in zip(a, b)):.3f}, wall {med(x['s'] / y['s'] for x, y in zip(a, b)):.3f}.",
            "", f"What the header says (meta[\"cost\"], shown as its Cost note; last lean run): {a[-1]['cost']}"]
    return out


# -- 3. Python names -------------------------------------------------------------------------------
def names(so: str, seconds: float = 4.0) -> list[str]:
    out = ["| Python | backend | samples in the C loop | share that also names `outer` above it | how |",
           "|---|---|---|---|---|"]
    for version, found in PYTHONS.items():
        if not found:
            out.append(f"| {version} | - | - | - | no Python {version} here |")
            continue
        for backend in ("perf", "eu-stack"):
            flags = ["-X", "perf"] if backend == "perf" and version != "3.11" else []
            child = subprocess.Popen([found[-1], *flags, "-c", CTYPES_OUTER, so], stdout=subprocess.PIPE, text=True)
            rec = None
            try:
                child.stdout.readline()
                mod = perf if backend == "perf" else eustack
                rec = mod.Recorder(Options(pid=child.pid, rate=RATE, mode="cpu" if backend == "perf" else "both"))
                rec.start()
                time.sleep(seconds)
                p = mod.read(rec.stop(), Options(rate=RATE))
            finally:
                if rec:
                    rec.close()
                child.kill()
                child.wait()
                child.stdout.close()
            share, n = share_above(p)
            how = {"perf": ("no names: 3.11 has no perf trampoline" if version == "3.11" else
                            "trampoline (-X perf): py:: frames from /tmp/perf-PID.map"),
                   "eu-stack": f"frame chain read from memory (readings used: {p.meta.get('python_stacks')})"}[backend]
            out.append(f"| {version} | {backend} | {n} | {share:.1%} | {how} |")
            print(f"names: {version} {backend}: {share:.1%} of {n}", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--scenarios", default=",".join(gt.SCENARIOS))
    ap.add_argument("--skip", default="", help="comma list of parts to skip: accuracy,cost,names,switches")
    ap.add_argument("--switch-rounds", type=int, default=9)
    ap.add_argument("--switch-rate", type=float, default=RATE,
                    help="switches: the backend's rate in the fine and coarse tables (Hz)")
    ap.add_argument("--switch-parts", default="breakdown,fine,coarse",
                    help="switches: which tables (a quick look in a quiet moment: --switch-parts breakdown)")
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args()
    skip = set(a.skip.split(","))
    gt.build_cworker()
    t0 = time.perf_counter()
    load = os.getloadavg()[0]
    from native.cbuild import build_cthread
    so = build_cthread(tempfile.mkdtemp(prefix="profmagic-bench-perf-so-"))
    lines = ["## Native wall time: perf --mode both against eu-stack (issue 16)", "",
             f"Command: `.venv/bin/python bench/bench_perf.py --rounds {a.rounds} --write` "
             f"({time.strftime('%Y-%m-%d %H:%M')}, 2 shared cores, load average {load:.1f} at the start; "
             f"perf {perf.version()}, eu-stack {eustack._version()}, {RATE:g} Hz asked)."]
    if "accuracy" not in skip:
        rows = accuracy(a.scenarios.split(","))
        lines += ["", "### Accuracy against bench/groundtruth.py's truth (5 s per mix; a function's error in points "
                  "as groundtruth.py scores it: wall, its share of the thread's profiled wall; CPU, its CPU seconds "
                  "as a share of the thread's measured wall)", ""] + accuracy_table(rows)
    if "cost" not in skip:
        lines += ["", f"### Cost: the target's slowdown at {RATE:g} Hz, paired ({a.rounds} rounds; each round runs the "
                  "workload bare, under perf --mode both and under eu-stack, in rotating order)", ""] + cost(a.rounds)
    if "names" not in skip:
        lines += ["", "### Python names: samples in a C busy loop called from Python (ctypes, `outer()` -> "
                  "`cthread_busy`) whose stack also names `outer` above the C frame", ""] + names(so)
    if "switches" not in skip:
        switches(a)
    if not skip >= {"accuracy", "cost", "names"}:
        main_section(a, lines, t0)


def switches(a) -> None:
    """Issue 27's section: where perf --mode both's cost goes on switch-heavy code, and the cheaper mode."""
    t0 = time.perf_counter()
    py = PYTHONS.get("3.12") or PYTHONS.get("3.13")
    if not py:
        print("switches: needs Python 3.12 or 3.13 (perf trampoline)")
        return
    py = [py[-1], "-X", "perf"]
    load = os.getloadavg()[0]
    cmd = f".venv/bin/python bench/bench_perf.py --skip accuracy,cost,names --switch-rounds {a.switch_rounds}" + \
        (f" --switch-parts {a.switch_parts}" if a.switch_parts != "breakdown,fine,coarse" else "") + \
        (f" --switch-rate {a.switch_rate:g}" if a.switch_rate != RATE else "") + \
        (" --write" if a.write else "")
    lines = ["## perf on switch-heavy code (issue 27)", "",
             f"Command: `nice -n 19 {cmd}` ({time.strftime('%Y-%m-%d %H:%M')}, 2 cores shared with the work of "
             f"other sessions, load average {load:.1f} at the start, LOAD_END at the end: measured under load, so "
             f"only the side-by-side ratios mean anything; perf {perf.version()}, `-e cpu-clock` at {RATE:g} Hz in the "
             f"plain recordings, {a.switch_rate:g} Hz through the backend). Target: "
             f"two threads of `{os.path.basename(py[0])} -X perf` (perf trampoline) handing a token back and forth "
             "3,000 times, each turn ~30 µs of Python work (bench_perf.py's SPLIT; it times its own work and "
             "waits). Every round runs every variant once, in rotating order; ratio = variant / the round's "
             "bare run."]
    parts = set(a.switch_parts.split(","))
    if "breakdown" in parts:
        lines += ["", f"### Where the time goes ({a.switch_rounds} rounds; plain `perf record` with the backend's "
                  "flags, one part added per row)", ""] + breakdown(py, a.switch_rounds)
    if "fine" in parts:
        lines += ["", f"### Lean switches against the default, through backends/perf.py ({a.switch_rounds} "
                  f"rounds, {a.switch_rate:g} Hz)", ""] + cheaper(py, a.switch_rounds, rate=a.switch_rate)
    if "coarse" in parts:
        lines += ["", f"### The same on coarser turns, where 100 Hz can measure the split ({a.switch_rounds} "
                  f"rounds, {a.switch_rate:g} Hz; SPLIT with 30,000 iterations of work a turn (~1-2 ms), 400 turns "
                  "a thread)", ""] + cheaper(py, a.switch_rounds, (30000, 400), a.switch_rate)
    lines += ["", f"({time.perf_counter() - t0:.0f} s)"]
    text = "\n".join(lines).replace("LOAD_END", f"{os.getloadavg()[0]:.1f}") + "\n"
    print(text)
    if a.write:
        write_section(text)


def main_section(a, lines, t0) -> None:
    lines += ["", f"({time.perf_counter() - t0:.0f} s)", "",
              "Reading. perf's wall time is exact by construction (switch in/out times), and its CPU per "
              "thread its time on a core scaled to what the kernel charged it (schedstat at the recording's "
              "ends), as CLOCK_THREAD_CPUTIME_ID, the truth here, counts it. These children exit before the "
              "recording ends, so their CPU is their time on a core, which also holds time the VM's vCPU was "
              "stolen (this host shows ~1 % steal in /proc/stat) and part of perf's stack copies. perf's "
              "cost grows with the target's context switches (one sched_switch record with a 32 KB stack "
              "copy each); eu-stack's with its snapshot rate (it stops every thread per snapshot). On 2 "
              "cores shared with other jobs the bare runs themselves vary by 2x: the medians are rough."]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.write:
        write_section(text)


if __name__ == "__main__":
    main()

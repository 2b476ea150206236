"""memray (issue 20), in a real kernel: accuracy against tracemalloc, cost against the bare cell and
against time alone (paired), reading cost, and cell end -> view through %%profile (aggregated, the
default; --allocated; --memory beside the sampler) beside memray's own %%memray_flamegraph.

The cell is the issue's: alloc() keeps 20,000 x 1 kB bytearrays alive, strs() makes 100,000 short
strings and drops them before the peak. Accuracy and cost drive the recorders directly (start, the
cell, stop, read, close), as the Session does; cell end -> view goes through the magic.
Usage: .venv/bin/python bench/bench_memray.py [--rounds N] [--write]   (issue 27: cost per option, then
       the sampled tracker's tables)
       .venv/bin/python bench/bench_memray.py --sampled [--rounds N] [--write]   (issue 27 item 5 only:
       --memory's sampled tracker per interval beside memray and tracemalloc)
       .venv/bin/python bench/bench_memray.py --issue20 [--rounds N] [--write]
(issue 20's tables, which memray traced Python's allocators for: --memory-exact since issue 27)

Issue 27 (``options``): each memray option's cost on allocation-heavy and compute cells, side by side
with the bare cell in the same run, and its bytes at the high-water mark against tracemalloc's peak.
"""
from __future__ import annotations

import argparse
import ast
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
from results import write_section  # noqa: E402  (bench/ is on the path as the script's folder)
import workloads  # noqa: E402

SETUP = workloads.MEMORY_SOURCE + r'''
import time, tracemalloc, os, glob, re
import profmagic
from profmagic import backends
from profmagic.backends import memory, memray as mb, sampler, pyspy
from profmagic.session import make_options

def bare():
    t = time.perf_counter(); keep = cell(); return time.perf_counter() - t

def recorded(make, read):
    """(cell s, whole s, after-the-cell s, profile): start, the cell, stop, read, close."""
    t0 = time.perf_counter()
    rec = make()
    rec.start()
    try:
        t1 = time.perf_counter(); keep = cell(); t2 = time.perf_counter()
        p = read(rec.stop())
    finally:
        rec.close()
    t3 = time.perf_counter()
    return t2 - t1, t3 - t0, t3 - t2, p

def memray_only(**extra):
    o = make_options(**extra)
    return lambda: mb.Recorder(o), lambda cap: mb.read(cap, o)

def time_only(module, **kw):
    o = make_options(**kw)
    return lambda: module.Recorder(o), lambda cap: module.read(cap, o)

def time_and_memory(module, **kw):
    o = make_options(**kw)
    return (lambda: memory.TimeAndMemory(module.NAME, backends.recorder(module, o), o),
            lambda cap: memory.read_both(module, cap, o))

CONFIGS = {
    "memray (aggregated, the default)": memray_only(memory_exact=True),
    "memray --allocated": memray_only(allocated=True, memory_exact=True),
    "memray --allocated, Python allocators untraced": memray_only(allocated=True, python_allocators=False),
    "sampler --mode both (time only)": time_only(sampler, mode="both"),
    "sampler --mode both --memory": time_and_memory(sampler, mode="both"),
    "py-spy --idle (time only)": time_only(pyspy, idle=True),
    "py-spy --idle --memory": time_and_memory(pyspy, idle=True),
}

def cost(name, rounds):
    out = []
    for _ in range(rounds):
        b1 = bare(); c, whole, after, p = recorded(*CONFIGS[name]); b2 = bare()
        out.append((c / ((b1 + b2) / 2), whole, after, (b1 + b2) / 2))
    return out

def paired(time_name, both_name, rounds):
    """Cell time with time and memory / with time alone, alternating."""
    out = []
    for _ in range(rounds):
        t1 = recorded(*CONFIGS[time_name])[0]; b = recorded(*CONFIGS[both_name])[0]
        t2 = recorded(*CONFIGS[time_name])[0]
        out.append(b / ((t1 + t2) / 2))
    return out

def accuracy(**extra):
    o = make_options(**extra)
    c, whole, after, p = recorded(*memray_only(**extra))
    fn = p.functions().set_index("name")
    allocated = (p.functions("allocated").set_index("name").loc["strs", "total"]
                 if "allocated" in p.metrics else None)
    tracemalloc.start(); keep = alloc(); tm = tracemalloc.get_traced_memory()[0]; tracemalloc.stop()
    return {"alloc": int(fn.loc["alloc", "total"]), "tracemalloc": tm, "strs_bytes": int(fn["total"].get("strs", 0)),
            "strs_allocated": None if allocated is None else int(allocated),
            "records": p.meta.get("records"), "after": after}

def reading(rounds):
    """Seconds to read the capture of the cell: in this process, and in a child (untrusted files)."""
    from profmagic.formats import memray as mf
    c, whole, after, p = recorded(*memray_only(allocated=True, memory_exact=True))
    data = p.raw.read()
    inproc, child = [], []
    for _ in range(rounds):
        t = time.perf_counter(); mf.read(data, "b", isolate=False); inproc.append(time.perf_counter() - t)
        t = time.perf_counter(); mf.read(data, "b", isolate=True); child.append(time.perf_counter() - t)
    return p.meta["records"], len(data), sorted(inproc)[len(inproc) // 2], sorted(child)[len(child) // 2]

'''
OURS = {"%%profile --backend memray (aggregated)": "--backend memray --memory-exact",
        "%%profile --backend memray --allocated": "--backend memray --allocated --memory-exact",
        "%%profile --backend sampler --memory": "--backend sampler --memory --memory-exact"}
OURS_CELL = "%%profile {opts}\nkeep = cell()\nT_END = time.perf_counter()\n"

MEMRAY_MAGIC = r'''%%memray_flamegraph {opts}
keep = cell()
T_END = time.perf_counter()
'''


def med(xs):
    return statistics.median(xs)


def numpy_extra() -> None:
    """Where memray's bytes at the peak of the numpy cell exceed tracemalloc's: the allocations alive
    at memray's high-water mark, grouped by their native stack (every allocation recorded)."""
    import collections
    import tempfile
    import tracemalloc
    import memray
    ns: dict = {}
    exec(OPTIONS_SETUP, ns)   # the workloads the kernel runs, here in this process
    numeric = ns["numeric"]
    numeric()   # warm: numpy's and OpenBLAS's first-use allocations are not the cell's
    tracemalloc.start()
    numeric()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    with tempfile.TemporaryDirectory() as d:
        f = os.path.join(d, "capture.bin")
        with memray.Tracker(f, native_traces=True, file_format=memray.FileFormat.ALL_ALLOCATIONS):
            numeric()
        r = memray.FileReader(f)
        by = collections.Counter()
        for rec in r.get_high_watermark_allocation_records(merge_threads=True):
            st = rec.native_stack_trace()
            by[" < ".join(fn for fn, _, _ in st[:4])] += rec.size
        print(f"tracemalloc's peak {peak:,} B; memray's {r.metadata.peak_memory:,} B "
              f"({r.metadata.peak_memory / peak - 1:+.1%}); alive at memray's peak, by native stack:")
        for where, n in by.most_common(5):
            print(f"  {n:>12,} B  {where}")


HOOK_TIMING = r'''
from profmagic.backends import memsample
m = memsample.module()
on = sys.argv[1] == "on"
if on:
    m.start(interval=32768.0, raw=False, numpy=False)
t = time.perf_counter()
for _ in range(20):
    loop()      # the Python-loop cell of OPTIONS_SETUP: an int made and freed at every step
print((time.perf_counter() - t) / 20)
if on:
    m.stop()
'''


def hook_cost(runs: int = 5) -> None:
    """The sampled tracker's own cost on the Python-loop cell, outside a kernel: the loop timed 20
    times in one process with the tracker on, and in another without, ``runs`` pairs alternating."""
    import subprocess
    root = os.path.dirname(HERE)
    times = {"off": [], "on": []}
    for _ in range(runs):
        for side in ("off", "on"):
            code = f"import sys; sys.path.insert(0, {root!r})\n" + OPTIONS_SETUP + HOOK_TIMING
            out = subprocess.run([sys.executable, "-c", code, side], capture_output=True, text=True, check=True)
            times[side].append(float(out.stdout))
    off, on = statistics.median(times["off"]), statistics.median(times["on"])
    print(f"loop alone {off * 1e3:.1f} ms, with the tracker {on * 1e3:.1f} ms: {on / off:.3f}x (medians of {runs})")


FILL_TIMING = r'''
import shutil, statistics, tempfile
import memray
rounds = int(sys.argv[1])

class TrackerAlone:
    """memray's own default (untraced, aggregated, pymalloc not filled) as a recorder, for its cost."""
    def start(self):
        self.dir = tempfile.mkdtemp()
        self.tracker = memray.Tracker(self.dir + "/c.bin", file_format=memray.FileFormat.AGGREGATED_ALLOCATIONS)
        self.tracker.__enter__()
    def stop(self):
        self.tracker.__exit__(None, None, None); return 0
    def close(self): shutil.rmtree(self.dir, ignore_errors=True)

WAYS = {"memray's Tracker alone (no fill)": (TrackerAlone, lambda _: None),
        "profmagic's memray recorder, filled (the default)": memray_cfg(),
        "profmagic's memray recorder, fill off": memray_cfg(fill=False),
        "a no-op profile function": (NoopProfile, lambda _: None)}
for name in ("alloc-heavy: issue 20's cell", "small objects", "records (dicts)", "compute: Python loop"):
    f = repeated(WORKLOADS[name], REPEAT.get(name, 1))
    bare_run(f)
    ratios = {w: [] for w in WAYS}
    for _ in range(rounds):
        for w, (make, read) in WAYS.items():
            b1 = bare_run(f); t = recorded_run(f, make, read)[0]; b2 = bare_run(f)
            ratios[w].append(t / ((b1 + b2) / 2))
    print(json.dumps({"workload": name, "bare": bare_run(f), "ratios": ratios}), flush=True)
'''


def fill_cost(a) -> None:
    """memray's default outside a kernel: its Tracker alone, our recorder with and without filling
    pymalloc's free space, and a no-op profile function, each paired with bare runs around it."""
    import json
    import subprocess
    root = os.path.dirname(HERE)
    python = a.python or sys.executable
    code = f"import sys, json; sys.path.insert(0, {root!r})\n" + OPTIONS_SETUP + FILL_TIMING
    load0 = os.getloadavg()[0]
    out = subprocess.run([python, "-c", code, str(a.rounds)], capture_output=True, text=True, check=True)
    rows = [json.loads(ln) for ln in out.stdout.splitlines() if ln.startswith("{")]
    version = subprocess.run([python, "-c", "import sys; print(sys.version.split()[0])"], capture_output=True,
                             text=True, check=True).stdout.strip()
    ways = list(rows[0]["ratios"])
    lines = [f"Python {version}, a plain process (no kernel), 2 shared cores (load average {load0:.1f} at the start, "
             f"{os.getloadavg()[0]:.1f} at the end). Each round times, for every way, the bare workload, the way, the "
             f"bare workload again; the ratio is over the mean of the two bare runs; {a.rounds} rounds, median "
             "(min–max). Runs per timing as in the kernel bench (REPEAT).", "",
             "| way | " + " | ".join(r["workload"] for r in rows) + " |", "|---|" + "---|" * len(rows)]
    for w in ways:
        lines.append(f"| {w} | " + " | ".join(
            f"{statistics.median(r['ratios'][w]):.2f} ({min(r['ratios'][w]):.2f}–{max(r['ratios'][w]):.2f})"
            for r in rows) + " |")
    lines.append("| (bare s) | " + " | ".join(f"{r['bare']:.3f}" for r in rows) + " |")
    table = "\n".join(lines)
    print(table)
    if a.write:
        write_section(f"\n## memray outside a kernel: what the fill costs (issue 27 item 5, Python {version})\n\n"
                      f"Command: `.venv/bin/python bench/bench_memray.py --fill-cost --rounds {a.rounds}"
                      f"{' --python ' + a.python if a.python else ''} --write`.\n\n{table}\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--write", action="store_true", help="write the tables to their section of bench/RESULTS.md")
    ap.add_argument("--issue20", action="store_true", help="issue 20's tables instead of issue 27's")
    ap.add_argument("--sampled", action="store_true",
                    help="issue 27 item 5: profmagic's sampled allocation tracker beside memray and tracemalloc")
    ap.add_argument("--numpy-extra", action="store_true",
                    help="where memray's peak of the numpy cell exceeds tracemalloc's (native stacks)")
    ap.add_argument("--hook-cost", action="store_true",
                    help="the sampled tracker's cost on the Python-loop cell, outside a kernel")
    ap.add_argument("--fill-cost", action="store_true",
                    help="memray's default outside a kernel: its Tracker alone, ours filled and not, a no-op profile function")
    ap.add_argument("--python", help="with --fill-cost: the interpreter to measure (memray installed in it)")
    a = ap.parse_args()
    if a.fill_cost:
        return fill_cost(a)
    if a.hook_cost:
        return hook_cost()
    if a.numpy_extra:
        return numpy_extra()
    if a.sampled:
        return sampled(a)
    if not a.issue20:
        options(a)
        return sampled(a)
    from kernel import Kernel
    import tempfile
    work = tempfile.mkdtemp(prefix="bench-memray-")   # %%memray_flamegraph writes memray-results/ in the cwd
    load0 = os.getloadavg()[0]
    k = Kernel()
    try:
        r = k.run(SETUP + f"\nos.chdir({work!r})\n%load_ext memray\n%load_ext profmagic\n")
        assert r.status == "ok" and r.error is None, r.text() + str(r.error)
        k.run("bare(); bare()")

        def value(expr, timeout=900):
            r = k.run(f"print(repr({expr}))", timeout=timeout)
            if r.error:
                raise RuntimeError(f"{expr}: {r.error['ename']}: {r.error['evalue']}")
            return ast.literal_eval(r.stdout.strip().splitlines()[-1])

        acc = {name: value(f"accuracy({kw})") for name, kw in (
            ("memray (aggregated, the default)", "memory_exact=True"),
            ("memray --allocated", "allocated=True, memory_exact=True"),
            ("memray --allocated, Python allocators untraced", "allocated=True, python_allocators=False"))}
        costs = {name: value(f"cost({name!r}, {a.rounds})") for name in value("list(CONFIGS)")}
        pairs = {name: value(f"paired({t!r}, {b!r}, {a.rounds})") for name, (t, b) in {
            "sampler": ("sampler --mode both (time only)", "sampler --mode both --memory"),
            "py-spy --idle": ("py-spy --idle (time only)", "py-spy --idle --memory")}.items()}
        records, size, read_in, read_child = value(f"reading({a.rounds})")
        # Cell end -> a view, through the magics: ours, and memray's own (default, Python allocators traced).
        ours = {}
        for name, opts in OURS.items():
            times = []
            for _ in range(a.rounds):
                r = k.run(OURS_CELL.format(opts=opts), timeout=900)
                assert r.error is None, r.text()
                times.append(value("time.perf_counter() - T_END"))
            html = [d["text/html"] for d in r.data + r.updates if "profmagic-static" in d.get("text/html", "")]
            ours[name] = (times, html[-1] if html else "")
        theirs = {}
        for opts in ("", "--trace-python-allocators"):
            times = []
            for _ in range(a.rounds):
                r = k.run("T_MAGIC = time.perf_counter()")
                r = k.run(MEMRAY_MAGIC.format(opts=opts) + "\n", timeout=900)
                assert r.error is None, r.text()
                times.append(value("time.perf_counter() - T_END"))
            html = [d["text/html"] for d in r.data if "text/html" in d]
            theirs[opts or "(default)"] = (times, html[-1] if html else "")
        files = value("sorted(glob.glob('memray-results/*/*.html'))")
        external = value(f"sorted(set(re.findall(r'<script[^>]*src=\"(https?://[^\"/]+)', open({files[-1]!r}).read())))")
        html_size = value(f"os.path.getsize({files[-1]!r})")
    finally:
        k.close()

    load1 = os.getloadavg()[0]
    lines = [f"Cell: alloc() keeps 20,000 × 1 kB bytearrays; strs() makes and drops 100,000 short strings. "
             f"Python {sys.version.split()[0]}, real ipykernel, 2 shared cores; {a.rounds} rounds, medians. "
             f"Load average {load0:.1f} at the start, {load1:.1f} at the end (other work on the machine: the "
             "seconds are inflated by as much; the ratios are paired).", "",
             "### Accuracy (bytes at alloc() against tracemalloc's live bytes after alloc())", "",
             "| recording | alloc() bytes | tracemalloc | error | strs() bytes at the peak | strs() allocated | records |",
             "|---|---|---|---|---|---|---|"]
    for name, x in acc.items():
        err = (x["alloc"] - x["tracemalloc"]) / x["tracemalloc"] * 100
        lines.append(f"| {name} | {x['alloc']:,} | {x['tracemalloc']:,} | {err:+.2f}% | {x['strs_bytes']:,} | "
                     f"{'n/a (not recorded)' if x['strs_allocated'] is None else format(x['strs_allocated'], ',')} | "
                     f"{x['records']:,} |")
    lines += ["", "### Cost (each round: bare, recorded, bare; ratio against the mean of the two bare runs)", "",
              "| recording | cell ratio (median, min–max) | whole s | after the cell s (stop + read) | bare s |",
              "|---|---|---|---|---|"]
    for name, res in costs.items():
        cr = [x[0] for x in res]
        lines.append(f"| {name} | {med(cr):.2f} ({min(cr):.2f}–{max(cr):.2f}) | {med(x[1] for x in res):.2f} | "
                     f"{med(x[2] for x in res):.2f} | {med(x[3] for x in res):.3f} |")
    lines += ["", "Time and memory in one run against time alone (cell time; each round: time, both, time):", "",
              "| time backend | both / time alone (median, min–max) |", "|---|---|"]
    for name, res in pairs.items():
        lines.append(f"| {name} | {med(res):.2f} ({min(res):.2f}–{max(res):.2f}) |")
    lines += ["", f"Reading an --allocated capture ({records:,} records, {size:,} bytes compressed): "
              f"{read_in:.2f} s in the kernel's process, {read_child:.2f} s in a child process (how files that "
              f"profmagic did not just record are read); {read_in / records * 1e6:.1f} µs per record.", "",
              "### Cell end → view, through %%profile and beside memray's own %%memray_flamegraph", "",
              "| | cell end → view s (median, min–max) | what the saved notebook holds | offline |", "|---|---|---|---|"]
    for name, (times, html) in ours.items():
        lines.append(f"| {name} | {med(times):.2f} ({min(times):.2f}–{max(times):.2f}) | the static twin (SVG "
                     f"icicle, memory strip and table, {len(html):,} bytes of HTML, {html.count('<script')} scripts) "
                     "inline, and the widget | yes: the static twin needs no kernel and no network |")
    for opts, (times, html) in theirs.items():
        lines.append(f"| %%memray_flamegraph {opts} | {med(times):.2f} ({min(times):.2f}–{max(times):.2f}) | "
                     f"an IFrame pointing at {'a file beside the notebook' if 'iframe' in html.lower() else '?'} "
                     f"({html_size:,} bytes of HTML) | no: the notebook holds no flame graph, and the HTML loads "
                     f"scripts from {len(external)} host(s) ({', '.join(external)}) |")
    lines += ["", "Both magics record the aggregated format by default (memray aggregates while tracking) and read it "
              "in milliseconds; profmagic traces Python's allocators (each object, not pymalloc's arenas: see "
              "Accuracy), which slows the cell itself. `--allocated` keeps every allocation for `allocated` and "
              "`allocations`, and pays for it after the cell (the reading above)."]
    table = "\n".join(lines)
    print(table)
    if a.write:
        write_section(f"\n## memray (issue 20)\n\nCommand: `.venv/bin/python bench/bench_memray.py --rounds "
                      f"{a.rounds} --write`.\n{table}\n")


# -- issue 27: what each memray option costs and changes ------------------------------------------
OPTIONS_SETUP = workloads.MEMORY_SOURCE + r'''
import gc, sys, time, tracemalloc
import numpy as np
from profmagic import backends
from profmagic.backends import memory, memray as mb, sampler
from profmagic.session import make_options

def small():     # 200,000 tuples of an int and a short str, kept
    return [(i, str(i)) for i in range(200_000)]

def parse(n):
    for i in range(n):
        yield {"id": i, "name": f"user{i}", "score": i % 97}

def records():   # notebook 01's load_all: 200,000 dicts of three keys, kept
    return list(parse(200_000))

def numeric():   # compute in numpy: few Python calls, buffers above pymalloc's 512 bytes
    a = np.random.default_rng(0).random((500, 500))
    for _ in range(6):
        a = a @ a
        a /= a.max()
    return float(a.sum())

def loop():      # compute in Python, no calls: a float made at every step
    s = 0.0
    for i in range(1_500_000):
        s += i * 0.5
    return s

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)

def calls():     # compute in Python, a call at every step
    return fib(26)

WORKLOADS = {"alloc-heavy: issue 20's cell": cell, "small objects": small, "records (dicts)": records,
             "compute: numpy": numeric, "compute: Python loop": loop, "compute: Python calls": calls}
# Runs of each workload per timed cell (the previous result dropped before the next), for cells of
# 0.1 s or more: the peak is one run's.
REPEAT = {"alloc-heavy: issue 20's cell": 8, "small objects": 3, "compute: Python calls": 4}
# The compute cells are timed against a 1.2x bound, so they run as many times as makes the bare cell
# last MIN_COMPUTE s (counted once per workload): at 20-60 ms a cell, this machine's noise was +-0.1.
# Not the allocating cells: their peak is the highest of the runs' estimates, which leans high with more.
MIN_COMPUTE = 0.5

def repeats(workload):
    n = REPEAT.get(workload, 1)
    if workload.startswith("compute:"):
        f = WORKLOADS[workload]
        f(); t = time.perf_counter(); f(); one = time.perf_counter() - t
        n = max(n, -(-MIN_COMPUTE // max(one, 1e-6)))
    return int(n)

def repeated(f, n):
    def run():
        keep = None
        for _ in range(n):
            keep = None
            keep = f()
        return keep
    return run

class NoopProfile:
    """A profile function that does nothing (Python's sys.setprofile), for reference: what any profile
    hook costs on Python 3.11 (memray sets one, in C, to follow Python stacks)."""
    def start(self): sys.setprofile(lambda *a: None)
    def stop(self): sys.setprofile(None); return 0
    def close(self): sys.setprofile(None)

class Tracemalloc:
    """tracemalloc (one frame) as a recorder, for its cost; its capture is the peak."""
    def start(self): tracemalloc.start()
    def stop(self):
        peak = tracemalloc.get_traced_memory()[1]; tracemalloc.stop(); return peak
    def close(self):
        if tracemalloc.is_tracing(): tracemalloc.stop()

def memray_cfg(**extra):
    o = make_options(**extra)
    return lambda: mb.Recorder(o), lambda cap: mb.read(cap, o)

def both_cfg(**extra):
    o = make_options(mode="both", memory=True, **extra)
    return (lambda: memory.TimeAndMemory("sampler", backends.recorder(sampler, o), o),
            lambda cap: memory.read_both(sampler, cap, o))

def time_cfg():
    o = make_options(mode="both")
    return lambda: sampler.Recorder(o), lambda cap: sampler.read(cap, o)

def sampled_cfg(**extra):
    from profmagic.backends import memsample
    o = make_options(**extra)
    return lambda: memsample.Recorder(o), lambda cap: memsample.read(cap, o)

OPTION_CONFIGS = {
    "--backend memray (the default: pymalloc by blocks, aggregated)": memray_cfg(),
    "the default without filling pymalloc's free space first": memray_cfg(fill=False),
    "--memory-exact (trace_python_allocators)": memray_cfg(memory_exact=True),
    "--native (native_traces)": memray_cfg(native=True),
    "--subprocesses (follow_fork, so every allocation)": memray_cfg(subprocesses=True),
    "--allocated (every allocation: ALL_ALLOCATIONS)": memray_cfg(allocated=True),
    "--allocated --memory-exact": memray_cfg(allocated=True, memory_exact=True),
    "tracemalloc (1 frame), for reference": (Tracemalloc, lambda peak: peak),
    "a no-op profile function (sys.setprofile), for reference": (NoopProfile, lambda _: None),
    "sampler --mode both (time alone)": time_cfg(),
    "sampler --mode both --memory (the default)": both_cfg(),
    "sampler --mode both --memory --memory-exact": both_cfg(memory_exact=True),
}
# issue 27 item 5: profmagic's sampled allocation tracker (backends/memsample.py), per mean interval.
SAMPLED_CONFIGS = {
    **{f"sampled tracker, {k} KiB": sampled_cfg(memory_interval=k * 1024) for k in (8, 32, 128)},
    "sampled tracker, 32 KiB, RAW domain too": sampled_cfg(memory_interval=32 * 1024, memory_raw=True),
    "--backend memray (the default: pymalloc by blocks, aggregated)": memray_cfg(),
    "tracemalloc (1 frame), for reference": (Tracemalloc, lambda peak: peak),
    "sampler --mode both (time alone)": time_cfg(),
    "sampler --mode both --memory, sampled tracker": both_cfg(memory_tracker="sampled"),
    "sampler --mode both --memory, memray": both_cfg(memory_tracker="memray"),
}
# The function whose bytes each workload keeps (inclusive), against tracemalloc's bytes kept by one run.
KEEPER = {"alloc-heavy: issue 20's cell": "alloc", "small objects": "small", "records (dicts)": "records"}

def kept(workload):
    """Bytes one run of the workload's keeping function leaves alive, by tracemalloc."""
    f = globals()[KEEPER[workload]]
    gc.collect(); tracemalloc.start(); keep = f(); n = tracemalloc.get_traced_memory()[0]; tracemalloc.stop()
    return n

def bare_run(f):
    gc.collect(); t = time.perf_counter(); keep = f(); return time.perf_counter() - t

def recorded_run(f, make, read):
    """(cell s, stop s, read s, bytes at the peak or None, start s)."""
    gc.collect()
    t0 = time.perf_counter()
    rec = make(); rec.start()
    try:
        t1 = time.perf_counter(); keep = f(); t2 = time.perf_counter()
        cap = rec.stop(); t3 = time.perf_counter()
        p = read(cap); t4 = time.perf_counter()
    finally:
        rec.close()
    del keep
    nbytes = p if p is None or isinstance(p, int) else (p.total("bytes") if "bytes" in p.metrics else None)
    fn = None
    if not (p is None or isinstance(p, int)) and "bytes" in p.metrics and KEEPER.get(CURRENT):
        t = p.functions("bytes")
        fn = int(t["total"].get(KEEPER[CURRENT], 0))
        half = (p.meta.get("memory") or p.meta).get("memory_sampling")
        if half:   # the 95% half-width the profile states for this function's figure
            from profmagic.formats import memsample
            fn = (fn, float(memsample.halfwidth(fn, half["interval"])))
    RUN_EXTRA.append(fn)
    return t2 - t1, t3 - t2, t4 - t3, nbytes, t1 - t0

CURRENT = None
RUN_EXTRA = []
REPEATS = {}   # workload -> runs per timed cell, as option_costs chose them

def option_costs(workload, rounds, configs="OPTION_CONFIGS"):
    """Per config: [(cell / mean of the bare runs around it, stop s, read s, bytes at the peak, bare s,
    start s, the keeping function's bytes at the peak (and stated half-width))]."""
    global CURRENT
    CURRENT = workload
    cfgs = globals()[configs]
    n = repeats(workload)
    REPEATS[workload] = n
    f = repeated(WORKLOADS[workload], n)
    bare_run(f)
    out = {name: [] for name in cfgs}
    for _ in range(rounds):
        for name, (make, read) in cfgs.items():
            b1 = bare_run(f); c, stop, rd, nbytes, start = recorded_run(f, make, read); b2 = bare_run(f)
            out[name].append((c / ((b1 + b2) / 2), stop, rd, None if nbytes != nbytes else nbytes, (b1 + b2) / 2,
                              start, RUN_EXTRA.pop()))
    return out

def reader_profile():
    """cProfile of reading the default's capture of the alloc-heavy cell: the top functions by own time."""
    import cProfile, pstats, io
    make, read = OPTION_CONFIGS["--backend memray (the default: pymalloc by blocks, aggregated)"]
    rec = make(); rec.start()
    try:
        keep = cell(); cap = rec.stop()
        pr = cProfile.Profile(); pr.enable(); read(cap); pr.disable()
    finally:
        rec.close()
    st = pstats.Stats(pr)
    rows = sorted(((v[2], f"{k[2]} ({os.path.basename(k[0])})") for k, v in st.stats.items()), reverse=True)[:5]
    return st.total_tt, [(round(t, 4), name) for t, name in rows]
'''


def cell_runs(runs: tuple) -> str:
    """The tables' words for how many runs of its workload each timed cell made (the kernel's choice)."""
    n, least = runs
    return ("runs of its workload per timed cell: " + ", ".join(f"{w} {k}" for w, k in n.items())
            + f" (the compute cells: as many as make the bare cell last {least} s).")


def options(a) -> None:
    from kernel import Kernel
    load0 = os.getloadavg()[0]
    k = Kernel()
    try:
        r = k.run(OPTIONS_SETUP + "\nimport os\n%load_ext profmagic\n")
        assert r.status == "ok" and r.error is None, r.text() + str(r.error)

        def value(expr, timeout=1800):
            r = k.run(f"print(repr({expr}))", timeout=timeout)
            if r.error:
                raise RuntimeError(f"{expr}: {r.error['ename']}: {r.error['evalue']}")
            return ast.literal_eval(r.stdout.strip().splitlines()[-1])

        names = value("list(WORKLOADS)")
        res = {w: value(f"option_costs({w!r}, {a.rounds})") for w in names}
        version = value("mb.fmt.version()")
        read_total, read_top = value("reader_profile()")
        runs = value("(REPEATS, MIN_COMPUTE)")
    finally:
        k.close()
    load1 = os.getloadavg()[0]
    configs = list(next(iter(res.values())))
    tm = "tracemalloc (1 frame), for reference"
    lines = [f"memray {version}, Python {sys.version.split()[0]}, a real ipykernel, 2 shared cores, measured under "
             f"load from other work (load average {load0:.1f} at the start, {load1:.1f} at the end). Each round "
             "runs, for every configuration, the bare cell, the recorded cell, the bare cell again: the ratio is "
             f"the recorded cell's time over the mean of the two bare runs around it; {a.rounds} rounds, "
             "median (min–max). Workloads in the bench's OPTIONS_SETUP; " + cell_runs(runs), "",
             "### Cell time recorded / cell time alone", "",
             "| recording | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for c in configs:
        cells = []
        for w in names:
            r = [x[0] for x in res[w][c]]
            cells.append(f"{med(r):.2f} ({min(r):.2f}–{max(r):.2f})")
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    lines.append("| (bare cell s, median) | " + " | ".join(
        f"{med(x[4] for x in res[w][configs[0]]):.3f}" for w in names) + " |")
    lines += ["", "### Bytes at the high-water mark against tracemalloc's peak (same cell, same run)", "",
              "| recording | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for c in configs:
        if c == tm or "time alone" in c or "no-op" in c:
            continue
        cells = []
        for w in names:
            peak = med(x[3] for x in res[w][tm])
            got = [x[3] for x in res[w][c] if x[3] is not None]
            if peak < 1_000_000 or not got:
                cells.append(f"{med(got) if got else 0:,.0f} B (tracemalloc {peak:,.0f} B)")
            else:
                cells.append(f"{(med(got) - peak) / peak * 100:+.1f}%")
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    lines.append("| tracemalloc's peak, bytes | " + " | ".join(f"{med(x[3] for x in res[w][tm]):,.0f}" for w in names) + " |")
    w0 = names[0]
    lines += ["", f"### Where the time goes around the cell ({w0}; start: the recorder starts, with pymalloc's "
              "free space filled first in the default; stop: memray's tracker exits and its file is read into "
              "memory; read: our reader and transforms)", "",
              "| recording | start s | stop s | read s |", "|---|---|---|---|"]
    for c in configs:
        if c == tm or "no-op" in c:
            continue
        lines.append(f"| {c} | {med(x[5] for x in res[w0][c]):.3f} | {med(x[1] for x in res[w0][c]):.3f} | "
                     f"{med(x[2] for x in res[w0][c]):.3f} |")
    lines += ["", f"cProfile of reading the default's capture of the alloc-heavy cell: {read_total:.3f} s in all; "
              "most own time in: " + "; ".join(f"{n} {t:.3f} s" for t, n in read_top) + "."]
    table = "\n".join(lines)
    print(table)
    if a.write:
        write_section(f"\n## memray: cost per option (issue 27)\n\nCommand: `nice -n 19 .venv/bin/python "
                      f"bench/bench_memray.py --rounds {a.rounds} --write`.\n{table}\n")

def sampled(a) -> None:
    """Cost, bytes at the peak and per-function bytes of the sampled tracker (backends/memsample.py)
    per mean interval, side by side with memray's default and tracemalloc in one run."""
    from kernel import Kernel
    load0 = os.getloadavg()[0]
    k = Kernel()
    try:
        r = k.run(OPTIONS_SETUP + "\nimport os\n%load_ext profmagic\n")
        assert r.status == "ok" and r.error is None, r.text() + str(r.error)

        def value(expr, timeout=1800):
            r = k.run(f"print(repr({expr}))", timeout=timeout)
            if r.error:
                raise RuntimeError(f"{expr}: {r.error['ename']}: {r.error['evalue']}")
            return ast.literal_eval(r.stdout.strip().splitlines()[-1])

        k.run("from profmagic.backends import memsample; memsample.module()")   # built before timing
        names = value("list(WORKLOADS)")
        res = {w: value(f"option_costs({w!r}, {a.rounds}, 'SAMPLED_CONFIGS')") for w in names}
        truth = {w: value(f"kept({w!r})") for w in value("list(KEEPER)")}
        version = value("mb.fmt.version()")
        runs = value("(REPEATS, MIN_COMPUTE)")
    finally:
        k.close()
    load1 = os.getloadavg()[0]
    configs = list(next(iter(res.values())))
    tm = "tracemalloc (1 frame), for reference"
    lines = [f"Python {sys.version.split()[0]}, memray {version}, a real ipykernel, 2 shared cores "
             f"(load average {load0:.1f} at the start, {load1:.1f} at the end). Each round runs, for "
             "every configuration, the bare cell, the recorded cell, the bare cell again; the ratio is the recorded "
             f"cell's time over the mean of the two bare runs around it; {a.rounds} rounds, median (min–max). "
             "Workloads as in \"memray: cost per option\" (the bench's OPTIONS_SETUP); " + cell_runs(runs), "",
             "### Cell time recorded / cell time alone", "",
             "| recording | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for c in configs:
        cells = []
        for w in names:
            r = [x[0] for x in res[w][c]]
            cells.append(f"{med(r):.2f} ({min(r):.2f}–{max(r):.2f})")
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    both = {"sampled tracker": "sampler --mode both --memory, sampled tracker", "memray": "sampler --mode both --memory, memray"}
    for label, c in both.items():
        lines.append(f"| --memory ({label}) / time alone (medians' ratio) | " + " | ".join(
            f"{med(x[0] for x in res[w][c]) / med(x[0] for x in res[w]['sampler --mode both (time alone)']):.2f}"
            for w in names) + " |")
    lines.append("| (bare cell s, median) | " + " | ".join(f"{med(x[4] for x in res[w][configs[0]]):.3f}" for w in names) + " |")
    lines += ["", "### Bytes at the high-water mark against tracemalloc's peak (same cell, same run; median, min–max "
              "over the rounds)", "", "| recording | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for c in configs:
        if c == tm or "time alone" in c:
            continue
        cells = []
        for w in names:
            peak = med(x[3] for x in res[w][tm])
            got = [x[3] for x in res[w][c] if x[3] is not None]
            if peak < 1_000_000 or not got:
                cells.append(f"{med(got) if got else 0:,.0f} B (tracemalloc {peak:,.0f} B)")
            else:
                e = [(g - peak) / peak * 100 for g in got]
                cells.append(f"{med(e):+.1f}% ({min(e):+.1f}…{max(e):+.1f})")
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    lines.append("| tracemalloc's peak, bytes | " + " | ".join(f"{med(x[3] for x in res[w][tm]):,.0f}" for w in names) + " |")
    lines += ["", "### The keeping function's bytes at the peak against tracemalloc's bytes kept by one run", "",
              "Each cell: the error of every round; for the sampled tracker, in brackets, how many rounds fell "
              "within the 95% interval the profile states (`memsample.halfwidth`).", "",
              "| recording | " + " | ".join(f"{w} ({KEEPER_NAMES[w]}(), {truth[w]:,} B)" for w in truth) + " |",
              "|---|" + "---|" * len(truth)]
    for c in configs:
        if c == tm or "time alone" in c:
            continue
        cells = []
        for w in truth:
            vals = [x[6] for x in res[w][c] if x[6] is not None]
            if not vals:
                cells.append("n/a")
                continue
            errs = [((v[0] if isinstance(v, (list, tuple)) else v) - truth[w]) / truth[w] * 100 for v in vals]
            inside = [abs(v[0] - truth[w]) <= v[1] for v in vals if isinstance(v, (list, tuple))]
            cells.append(", ".join(f"{e:+.1f}%" for e in errs) + (f" ({sum(inside)}/{len(inside)} within)" if inside else ""))
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    table = "\n".join(lines)
    print(table)
    if a.write:
        write_section(f"\n## Sampled allocation tracker (issue 27 item 5)\n\nCommand: `nice -n 19 .venv/bin/python "
                      f"bench/bench_memray.py --sampled --rounds {a.rounds} --write`.\n{table}\n")


KEEPER_NAMES = {"alloc-heavy: issue 20's cell": "alloc", "small objects": "small", "records (dicts)": "records"}

if __name__ == "__main__":
    main()

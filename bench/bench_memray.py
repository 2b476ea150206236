"""memray (issue 20), in a real kernel: accuracy against tracemalloc, cost against the bare cell and
against time alone (paired), reading cost, and cell end -> view through %%profile (aggregated, the
default; --allocated; --memory beside the sampler) beside memray's own %%memray_flamegraph.

The cell is the issue's: alloc() keeps 20,000 x 1 kB bytearrays alive, strs() makes 100,000 short
strings and drops them before the peak. Accuracy and cost drive the recorders directly (start, the
cell, stop, read, close), as the Session does; cell end -> view goes through the magic.
Usage: .venv/bin/python bench/bench_memray.py [--rounds N] [--write]
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
from profmagic.backends import memray as mb, sampler, pyspy
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
    return (lambda: mb.TimeAndMemory(module.NAME, backends.recorder(module, o), o),
            lambda cap: mb.read_both(module, cap, o))

CONFIGS = {
    "memray (aggregated, the default)": memray_only(),
    "memray --allocated": memray_only(allocated=True),
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
    c, whole, after, p = recorded(*memray_only(allocated=True))
    data = p.raw.read()
    inproc, child = [], []
    for _ in range(rounds):
        t = time.perf_counter(); mf.read(data, "b", isolate=False); inproc.append(time.perf_counter() - t)
        t = time.perf_counter(); mf.read(data, "b", isolate=True); child.append(time.perf_counter() - t)
    return p.meta["records"], len(data), sorted(inproc)[len(inproc) // 2], sorted(child)[len(child) // 2]

'''
OURS = {"%%profile --backend memray (aggregated)": "--backend memray",
        "%%profile --backend memray --allocated": "--backend memray --allocated",
        "%%profile --backend sampler --memory": "--backend sampler --memory"}
OURS_CELL = "%%profile {opts}\nkeep = cell()\nT_END = time.perf_counter()\n"

MEMRAY_MAGIC = r'''%%memray_flamegraph {opts}
keep = cell()
T_END = time.perf_counter()
'''


def med(xs):
    return statistics.median(xs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--write", action="store_true", help="write the tables to their section of bench/RESULTS.md")
    a = ap.parse_args()
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
            ("memray (aggregated, the default)", ""), ("memray --allocated", "allocated=True"),
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


if __name__ == "__main__":
    main()

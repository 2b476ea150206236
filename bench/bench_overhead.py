"""%%profile overhead in a real kernel: paired ratios against the bare cell.

For each backend, alternate runs of the bare cell and of the same cell under ``%%profile -q``:
- cell ratio   = the cell's own wall time under the profiler / the bare cell's (the profiler's cost)
- magic fixed  = whole %%profile call − the cell's own wall time (start, stop, read, transforms)
- total ratio  = whole %%profile call / bare cell
Two paired comparisons more, each alternating its two variants with bare runs in one loop:
- the default (both clocks) against the old CPU-only default (``--mode cpu``), py-spy and sampler;
- the live view on against off (``--no-live``), sampler and py-spy.
Usage: .venv/bin/python bench/bench_overhead.py [--rounds N] [--write]
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

CELL = "s = 0\nfor i in range(4_000_000):\n    s += i * i\n"   # CPU-bound, fixed work
SETUP = f'''
%load_ext profmagic
import time, statistics
CELL = {CELL!r}
CODE = compile(CELL, "<bench-cell>", "exec")
def bare():
    t = time.perf_counter(); exec(CODE, {{}}); return time.perf_counter() - t
def profiled(backend, extra="-q"):
    t = time.perf_counter()
    get_ipython().run_cell_magic("profile", f"-b {{backend}} {{extra}}", CELL)
    total = time.perf_counter() - t
    return total, globals()["_profile"].meta["cell_wall"]
def pairs(backend, extra, rounds):
    out = []
    for _ in range(rounds):
        b1 = bare(); total, cell = profiled(backend, "-q " + extra); b2 = bare()
        base = (b1 + b2) / 2
        out.append((cell / base, total - cell, total / base, base))
    return out
def versus(backend, a, b, rounds):
    """Per round: bare, variant a, variant b, bare; (cell ratio a, cell ratio b, fixed a, fixed b)."""
    out = []
    for _ in range(rounds):
        b1 = bare(); ta, ca = profiled(backend, a); tb, cb = profiled(backend, b); b2 = bare()
        base = (b1 + b2) / 2
        out.append((ca / base, cb / base, ta - ca, tb - cb))
    return out
'''
VERSUS = [("default both clocks vs the old CPU-only default", "py-spy", "-q", "-q --mode cpu"),
          ("default both clocks vs the old CPU-only default", "sampler", "-q", "-q --mode cpu"),
          ("live view on vs off", "sampler", "", "--no-live"),
          ("live view on vs off", "py-spy", "", "--no-live")]
BACKENDS = [("py-spy", "--idle"), ("py-spy", ""), ("sampler", "--mode both"), ("pyinstrument", "--mode wall"),
            ("cprofile", "--mode wall")]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--write", action="store_true", help="write the table to its section of bench/RESULTS.md")
    a = ap.parse_args()
    from kernel import Kernel
    k = Kernel()
    try:
        r = k.run(SETUP)
        assert r.status == "ok", r.text()
        k.run("bare(); bare()")  # warm up
        rows = []
        for backend, extra in BACKENDS:
            r = k.run(f"print(repr(pairs({backend!r}, {extra!r}, {a.rounds})))", timeout=600)
            if r.error:
                rows.append((backend, extra, None, r.error["evalue"]))
                continue
            res = ast.literal_eval(r.stdout.strip().splitlines()[-1])
            rows.append((backend, extra, res, ""))
        paired = []
        for what, backend, a_opts, b_opts in VERSUS:
            r = k.run(f"print(repr(versus({backend!r}, {a_opts!r}, {b_opts!r}, {a.rounds})))", timeout=900)
            paired.append((what, backend, a_opts, b_opts,
                           None if r.error else ast.literal_eval(r.stdout.strip().splitlines()[-1])))
    finally:
        k.close()
    lines = ["| backend | options | cell ratio (median, min–max) | magic fixed s (median) | total ratio (median) | bare s |",
             "|---|---|---|---|---|---|"]
    for backend, extra, res, err in rows:
        if res is None:
            lines.append(f"| {backend} | {extra} | error: {err} | | | |")
            continue
        cr = [x[0] for x in res]
        lines.append(f"| {backend} | {extra or '(default)'} | {statistics.median(cr):.3f} ({min(cr):.3f}–{max(cr):.3f}) "
                     f"| {statistics.median(x[1] for x in res):.3f} | {statistics.median(x[2] for x in res):.3f} "
                     f"| {statistics.median(x[3] for x in res):.3f} |")
    lines += ["", "| comparison | backend | A | B | cell ratio A (median) | cell ratio B (median) | A/B per round "
              "(median, min–max) | magic fixed s A / B (median) |", "|---|---|---|---|---|---|---|---|"]
    for what, backend, a_opts, b_opts, res in paired:
        if not res:
            lines.append(f"| {what} | {backend} | {a_opts} | {b_opts} | error | | | |")
            continue
        ab = [x[0] / x[1] for x in res]
        lines.append(f"| {what} | {backend} | `{a_opts or '(none)'}` | `{b_opts}` | "
                     f"{statistics.median(x[0] for x in res):.3f} | {statistics.median(x[1] for x in res):.3f} | "
                     f"{statistics.median(ab):.3f} ({min(ab):.3f}–{max(ab):.3f}) | "
                     f"{statistics.median(x[2] for x in res):.3f} / {statistics.median(x[3] for x in res):.3f} |")
    table = "\n".join(lines)
    print(table)
    if a.write:
        text = (f"\n## %%profile overhead (issues 3, 14, 19)\n\n"
                f"Command: `.venv/bin/python bench/bench_overhead.py --rounds {a.rounds} --write` "
                f"(real ipykernel, Python {sys.version.split()[0]}, 2 shared cores, 100 Hz).\n"
                f"Cell: a CPU-bound loop of fixed work. Each round: bare, profiled, bare; ratios against the "
                f"mean of the two bare runs.\n"
                f"cell ratio = the cell's wall time under the profiler / bare; magic fixed = whole %%profile "
                f"call − the cell's own wall time (start, attach, stop, read, transforms); "
                f"total ratio = whole call / bare.\n\n{table}\n")
        write_section(text)


if __name__ == "__main__":
    main()

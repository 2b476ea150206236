"""%%profile overhead in a real kernel (issue 3): paired ratios against the bare cell.

For each backend, alternate runs of the bare cell and of the same cell under ``%%profile -q``:
- cell ratio   = the cell's own wall time under the profiler / the bare cell's (the profiler's cost)
- magic fixed  = whole %%profile call − the cell's own wall time (start, stop, read, transforms)
- total ratio  = whole %%profile call / bare cell
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
def profiled(backend, extra=""):
    t = time.perf_counter()
    p = get_ipython().run_cell_magic("profile", f"-b {{backend}} -q {{extra}}", CELL)
    total = time.perf_counter() - t
    return total, p.meta["cell_wall"]
def pairs(backend, extra, rounds):
    out = []
    for _ in range(rounds):
        b1 = bare(); total, cell = profiled(backend, extra); b2 = bare()
        base = (b1 + b2) / 2
        out.append((cell / base, total - cell, total / base, base))
    return out
'''
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
    table = "\n".join(lines)
    print(table)
    if a.write:
        text = (f"\n## %%profile overhead (issue 3)\n\n"
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

"""Await attribution (issue 14): a cell that awaits co_a, co_b and co_c (0.1, 0.2 and 0.3 s of
asyncio.sleep) one after the other, under the sampler (which reads the awaiting chain at each
sample) and py-spy (whose idle-loop time is split over the waits profmagic measured). Each
coroutine's share of the cell thread's wall time against its measured share (the coroutine times
itself inside the cell).
Usage: .venv/bin/python bench/bench_async.py [--rounds N] [--write]
"""
from __future__ import annotations

import argparse
import ast
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
from results import write_section  # noqa: E402

SETUP = '''
%load_ext profmagic
import asyncio, time
SPENT = {}
async def timed(name, s):
    t = time.perf_counter(); await asyncio.sleep(s); SPENT[name] = time.perf_counter() - t
async def co_a(): await timed("co_a", 0.1)
async def co_b(): await timed("co_b", 0.2)
async def co_c(): await timed("co_c", 0.3)
def shares():
    f = _profile.functions('wall').set_index('name')
    cell = _profile.stacks['thread'] == _profile.meta['cell_thread']
    whole = float(_profile.stacks.loc[cell, 'wall'].sum())
    wall = _profile.meta['cell_wall']
    return {n: (float(f.at[n, 'total']) / whole if n in f.index else 0.0, SPENT[n] / wall) for n in ('co_a', 'co_b', 'co_c')}
'''


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args()
    from kernel import Kernel
    k = Kernel()
    rows = []
    try:
        assert k.run(SETUP).status == "ok"
        for backend in ("sampler", "py-spy"):
            errs = {n: [] for n in ("co_a", "co_b", "co_c")}
            for _ in range(a.rounds):
                r = k.run(f"%%profile -b {backend} -q\nawait co_a()\nawait co_b()\nawait co_c()\n")
                assert r.status == "ok", r.text()
                got = ast.literal_eval(k.run("print(repr(shares()))").stdout.strip().splitlines()[-1])
                for n, (share, truth) in got.items():
                    errs[n].append(100 * (share - truth))
            rows.append((backend, errs))
    finally:
        k.close()
    lines = ["| backend | coroutine | share error, pp (median, min–max) |", "|---|---|---|"]
    for backend, errs in rows:
        for n, e in errs.items():
            lines.append(f"| {backend} | {n} | {statistics.median(e):+.1f} ({min(e):+.1f} – {max(e):+.1f}) |")
    table = "\n".join(lines)
    print(table)
    if a.write:
        write_section(f"\n## Await attribution (issue 14)\n\nCommand: `.venv/bin/python bench/bench_async.py "
                      f"--rounds {a.rounds} --write` (real ipykernel, Python {sys.version.split()[0]}). A cell awaits "
                      "co_a, co_b, co_c (0.1, 0.2, 0.3 s of asyncio.sleep) in turn; each coroutine's share of the "
                      "cell thread's wall time against the share it measured itself. The sampler reads the awaiting "
                      "coroutine chain at each sample; for py-spy the event loop's idle time is split over the waits "
                      f"profmagic measured.\n\n{table}\n")


if __name__ == "__main__":
    main()

"""Long sessions (issue 27 item 4): a real Jupyter kernel (jupyter_client) runs many ``%%profile -b
sampler`` cells of a small job, each showing its report (static twin + live widget, its Icicle tab
built), and the kernel's RSS is read from /proc every ``--every`` cells.

    .venv/bin/python bench/bench_long_session.py [--cells 300] [--every 25] [--live 20] [--unbounded]

``--live N`` sets ``profmagic.report.keep.LIVE`` (default: the shipped default); ``--unbounded`` also
runs the same session with LIVE = 10**9: every report holds its profile and its widgets, as before
issue 27 (the other fixes of issue 27 item 4 stay in).
No ``gc.collect()`` is called during the session; one at the end is reported separately.
``--memray``: instead, ``%%profile --backend memray`` cells that keep 2,000 small objects each, with
pymalloc's free space filled before each recording as shipped, and with that fill turned off in the
kernel (its own section).
Writes its section of bench/RESULTS.md through bench/results.py unless --no-write.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

SECTION = "## Long sessions (issue 27 item 4)"
SETUP = '''\
%load_ext profmagic
import gc, time
from profmagic.report import keep

def leaf(n):
    s = 0
    for i in range(n):
        s += i * i
    return s

def middle(n):
    return leaf(n) + leaf(n // 2)

def job():
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.1:
        middle(20000)
'''
CELL = "%%profile -b sampler\njob()"
MEMRAY_SETUP = "def tiny():\n    return [bytearray(100) for _ in range(2000)]\n"
MEMRAY_CELL = "%%profile --backend memray -q\nkeep = tiny()"
NO_FILL = "import profmagic.backends.memray as _m\n_m.fill_pymalloc = lambda keep=None, **kw: keep\n"
MEMRAY_SECTION = "## Long sessions: memray cells (issue 27 item 4)"
COUNT = "import gc\nfrom profmagic.model import Profile\nprint(sum(isinstance(o, Profile) for o in gc.get_objects()))"


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def session(cells: int, every: int, live: int | None, setup: str = "", cell: str = CELL) -> dict:
    from kernel import Kernel
    with tempfile.TemporaryDirectory(prefix="bench-long-") as cwd:
        k = Kernel(cwd=cwd)
        try:
            r = k.run(SETUP + setup + (f"keep.LIVE = {live}\n" if live is not None else ""))
            assert r.error is None, r.text()
            n_live = k.value("keep.LIVE")
            k.run(cell)   # one cell first: imports and first-use caches are not growth
            base = rss_mb(k.pid)
            rows, t0 = [(0, base)], time.perf_counter()
            for i in range(1, cells + 1):
                r = k.run(cell)
                assert r.error is None and (cell != CELL or any("application/vnd.jupyter.widget-view+json" in d
                                               for d in r.data + r.updates)), (i, r.text())
                if i % every == 0:
                    rows.append((i, rss_mb(k.pid)))
            seconds = time.perf_counter() - t0
            uncollected = int(k.run(COUNT).stdout.split()[-1])   # gc.get_objects: no collection yet
            k.run("gc.collect()")
            collected = rss_mb(k.pid)
            profiles = int(k.run(COUNT).stdout.split()[-1])
        finally:
            k.close()
    return {"live": n_live, "rows": rows, "seconds": seconds, "after_gc": collected, "profiles": profiles,
            "uncollected": uncollected}


def first_after(res: dict) -> int:
    """The first sampled cell once LIVE reports were shown and one more sampling step passed."""
    rows = res["rows"]
    return next(c for c, _ in rows if c >= res["live"] + rows[1][0] or c == rows[-1][0])


def growth(res: dict, start: int) -> float:
    rss = dict(res["rows"])
    return rss[res["rows"][-1][0]] - rss[start]


def emit(lines: list[str], a) -> int:
    text = "\n".join(lines) + "\n"
    print(text)
    if not a.no_write:
        from results import write_section
        write_section(text)
    return 0


def memray_sessions(a, argv) -> int:
    runs = [(name, session(a.cells, a.every, a.live, MEMRAY_SETUP + extra, MEMRAY_CELL))
            for name, extra in (("fill as shipped", ""), ("fill off", NO_FILL))]
    cmd = " ".join(["python bench/bench_long_session.py"] + [x for x in (argv if argv is not None else sys.argv[1:]) if x != "--no-write"])
    lines = [MEMRAY_SECTION, "",
             (f"`{cmd}`: one real kernel per column runs `{MEMRAY_CELL.splitlines()[0]}` cells that keep "
              f"2,000 bytearrays of 100 bytes (`keep = tiny()`, the previous cell's freed), after one warm-up cell; "
              f"RSS from /proc every {a.every} cells, no `gc.collect()`. 'fill off' replaces `fill_pymalloc` with a "
              f"no-op in the kernel: memray then misses what lands in pymalloc's free space. "
              f"{os.cpu_count()} CPUs, shared with other work."), "",
             "| after cell | " + " | ".join(f"RSS (MB), {name}" for name, _ in runs) + " |", "|---|" + "---|" * len(runs)]
    for j, (c, _) in enumerate(runs[0][1]["rows"]):
        lines.append(f"| {c} | " + " | ".join(f"{res['rows'][j][1]:.1f}" for _, res in runs) + " |")
    lines.append("")
    for name, res in runs:
        rows = dict(res["rows"])
        last = res["rows"][-1][0]
        lines.append(f"- {name}: {rows[last] - rows[0]:+.1f} MB over {last} cells, {rows[last] - rows[last - 100]:+.1f} MB "
                     f"over the last 100; {res['seconds'] / last:.2f} s per cell.")
    return emit(lines, a)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=300)
    ap.add_argument("--every", type=int, default=25)
    ap.add_argument("--live", type=int, default=None, help="keep.LIVE (default: profmagic's)")
    ap.add_argument("--unbounded", action="store_true", help="also run with every report holding its profile")
    ap.add_argument("--memray", action="store_true", help="memray cells, with and without pymalloc's fill")
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args(argv)
    if a.memray:
        return memray_sessions(a, argv)
    runs = [("bounded", session(a.cells, a.every, a.live))]
    if a.unbounded:
        runs.append(("unbounded", session(a.cells, a.every, 10 ** 9)))
    cmd = " ".join(["python bench/bench_long_session.py"] + [x for x in (argv if argv is not None else sys.argv[1:]) if x != "--no-write"])
    head = "| after cell | " + " | ".join(f"RSS (MB), {name}: LIVE = {res['live']:,}" for name, res in runs) + " |"
    lines = [SECTION, "",
             (f"`{cmd}`: one real kernel (jupyter_client) runs `%%profile -b sampler` cells of a 0.1 s job "
              f"(three functions), each displaying its report (static twin + live widget with its Icicle tab), "
              f"after one warm-up cell; RSS from /proc every {a.every} cells, no `gc.collect()` during the "
              f"session. {os.cpu_count()} CPUs, shared with other work."), "",
             head, "|---|" + "---|" * len(runs)]
    for j, (c, _) in enumerate(runs[0][1]["rows"]):
        lines.append(f"| {c} | " + " | ".join(f"{res['rows'][j][1]:.1f}" for _, res in runs) + " |")
    lines.append("")
    start = first_after(runs[0][1])
    for name, res in runs:
        rows = res["rows"]
        flat = growth(res, start)
        lines.append(f"- {name} (LIVE = {res['live']:,}): growth over {rows[-1][0]} cells {rows[-1][1] - rows[0][1]:+.1f} MB "
                     f"(limit +150 MB); from cell {start} to {rows[-1][0]}: {flat:+.1f} MB; after a final "
                     f"`gc.collect()` {res['after_gc'] - rows[0][1]:+.1f} MB; Profile objects alive "
                     f"{res['uncollected']} before that collection, {res['profiles']} after; "
                     f"{res['seconds'] / (len(rows) - 1) / a.every:.2f} s per cell.")
    return emit(lines, a)


if __name__ == "__main__":
    sys.exit(main())

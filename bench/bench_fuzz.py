"""Hostile-input benchmarks for the readers (issue 21).

    .venv/bin/python bench/bench_fuzz.py [--per-format N] [--rseeds 0,1,2] [--skip-fuzz] [--skip-dense]
                                         [--before REV] [--timeout S] [--write-results]
                                         [--shapes] [--scale 10]

1. Mutation fuzz: N mutations of each of pstats, speedscope, folded and perf script per random seed,
   every mutated file through profmagic.load() in worker processes (tests/fuzz.py, the engine CI
   runs with 500 per format and seed 0). Reports crashes (negative exit codes), hangs, exceptions
   other than ProfileFormatError, the time and the workers' peak RSS.
2. Dense pstats call graphs: each file loaded by profmagic.load() in a fresh process; the CPU time
   of the load (imports excluded) and the process's peak RSS (ru_maxrss from os.wait4). With
   ``--before REV`` the same files are loaded by profmagic as of git revision REV (extracted with
   ``git archive``) in the same run, side by side; a run over ``--timeout`` seconds is killed.
   The files (bench/data/, gitignored, reused):
     * import.pstats: cProfile of a real program (importing pandas, a groupby, JSON);
     * dense330.pstats: 330 functions, each called by every earlier one (54,285 caller entries);
     * layered.pstats: 400 layers of 12 functions, each called by all 12 of the layer above (12^400 paths).
3. ``--shapes`` (issue 28): every shape of tests/fuzz.py (chains, nesting, threads, counts, archives, typed
   meta, surrogates) at ``--scale`` times the attack's size, each in a child of its own under RLIMIT_AS
   1 GiB, killed after 60 s; the worst wall and CPU time and peak RSS per reader.
"""
from __future__ import annotations

import argparse
import marshal
import os
import random
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATA = os.path.join(HERE, "data")
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, HERE)

import fuzz  # noqa: E402
from results import write_section  # noqa: E402

LOAD = r'''
import os, sys, time
sys.path.insert(0, sys.argv[2])
import profmagic
t = time.process_time()
p = profmagic.load(sys.argv[1])
cpu = time.process_time() - t
print(cpu, len(p.stacks), sum(map(len, p.stacks["stack"])), profmagic.__file__)
'''


def dense(n: int) -> bytes:
    r = random.Random(1)
    keys = [(f"/app/mod{i % 17}.py", 10 + i, f"func_{i}") for i in range(n)]
    stats = {}
    for j, k in enumerate(keys):
        callers = {}
        for i in range(j):
            c = r.randint(1, 50)
            callers[keys[i]] = (c, c, r.random() * 1e-3, r.random() * 1e-2)
        nc = sum(v[0] for v in callers.values()) or 1
        stats[k] = (nc, nc, r.random() * 1e-2, r.random(), callers)
    return marshal.dumps(stats)


def layered(width: int, layers: int) -> bytes:
    r = random.Random(1)
    keys = [[(f"/app/layer{li}.py", 10 + i, f"f{li}_{i}") for i in range(width)] for li in range(layers)]
    stats = {}
    for li, row in enumerate(keys):
        for k in row:
            callers = {}
            for up in (keys[li - 1] if li else []):
                c = r.randint(1, 50)
                callers[up] = (c, c, r.random() * 1e-3, r.random() * 1e-2)
            nc = sum(v[0] for v in callers.values()) or 1
            stats[k] = (nc, nc, r.random() * 1e-2, r.random(), callers)
    return marshal.dumps(stats)


def real_program(path: str) -> None:
    code = ("import cProfile, sys\npr = cProfile.Profile(); pr.enable()\n"
            "import pandas, json, decimal, email.mime.text, http.client, xml.dom.minidom, asyncio\n"
            "pandas.DataFrame({'a': range(1000)}).groupby('a').sum().to_json()\n"
            "pr.disable(); pr.dump_stats(sys.argv[1])\n")
    subprocess.run([sys.executable, "-c", code, path], check=True)


def files() -> dict[str, str]:
    os.makedirs(DATA, exist_ok=True)
    out = {}
    for name, make in (("import.pstats", None), ("dense330.pstats", lambda: dense(330)),
                       ("layered.pstats", lambda: layered(12, 400))):
        path = out[name] = os.path.join(DATA, name)
        if not os.path.exists(path):
            if make is None:
                real_program(path)
            else:
                with open(path, "wb") as f:
                    f.write(make())
    return out


def load_in_child(path: str, code_root: str, timeout: float) -> dict:
    """CPU seconds of profmagic.load(path) and the child's peak RSS, with profmagic from ``code_root``."""
    proc = subprocess.Popen([sys.executable, "-c", LOAD, path, code_root], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    killed = False
    while True:
        pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() - t0 > timeout:
            proc.kill()
            killed = True
        time.sleep(0.05)
    out, err = proc.stdout.read(), proc.stderr.read()
    row = {"rss_mb": ru.ru_maxrss / 1024, "killed": killed, "wall": time.monotonic() - t0}
    if not killed:
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(err[-2000:])
        cpu, stacks, frames, where = out.split()
        assert where.startswith(code_root), (where, code_root)
        row.update(cpu=float(cpu), stacks=int(stacks), frames=int(frames))
    return row


def checkout(rev: str) -> tempfile.TemporaryDirectory:
    """profmagic as of git revision ``rev``, in a temporary folder."""
    folder = tempfile.TemporaryDirectory(prefix="profmagic-before-")
    archive = subprocess.run(["git", "-C", ROOT, "archive", rev, "profmagic"], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", folder.name], input=archive.stdout, check=True)
    return folder


def cell(row: dict | None, timeout: float) -> str:
    if row is None:
        return "–"
    if row["killed"]:
        return f"killed at {timeout:.0f} s, {row['rss_mb']:,.0f} MB so far"
    return f"{row['cpu']:.2f} s CPU, {row['rss_mb']:,.0f} MB, {row['stacks']:,} stacks, {row['frames']:,} frames"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-format", type=int, default=2500)
    ap.add_argument("--rseeds", default="0,1,2,3")
    ap.add_argument("--skip-fuzz", action="store_true")
    ap.add_argument("--skip-dense", action="store_true")
    ap.add_argument("--before", default=None, help="git revision to compare the dense pstats loads with")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--write-results", action="store_true")
    ap.add_argument("--shapes", action="store_true", help="only the issue-28 shapes")
    ap.add_argument("--scale", type=float, default=10.0)
    args = ap.parse_args()
    if args.shapes:
        return finish([shapes(args.scale)], args.write_results)
    load1 = os.getloadavg()[0]
    sections = []
    if not args.skip_fuzz:
        seed_dir = tempfile.TemporaryDirectory(prefix="profmagic-fuzz-seeds-")
        seeds = fuzz.make_seeds(seed_dir.name)
        lines = ["## Reader mutation fuzz (issue 21)", "",
                 f"`.venv/bin/python bench/bench_fuzz.py --per-format {args.per_format} --rseeds {args.rseeds}`", "",
                 "Each mutated file through `profmagic.load()` in worker processes (tests/fuzz.py); seeds are "
                 "real cProfile, py-spy (speedscope, raw) and perf script output made by the run.", "",
                 "| seed | mutations | crashes | hangs | other exceptions | profile / format error | time | "
                 "worker peak RSS |", "|---|---|---|---|---|---|---|---|"]
        for rseed in map(int, args.rseeds.split(",")):
            r = fuzz.run(seeds, args.per_format, rseed=rseed)
            ok = sum(v for (_, o), v in r.outcomes.items() if o == "profile")
            bad = sum(v for (_, o), v in r.outcomes.items() if o == "format-error")
            row = [f"| {rseed} | {r.mutations + len(r.crashes) + len(r.hangs):,} | {len(r.crashes)} | "
                   f"{len(r.hangs)} | {len(r.others)} | {ok:,} / {bad:,} | {r.seconds:.0f} s | {r.max_rss_mb:.0f} MB |"]
            row += [f"|  | failure (format, mutation, ...): {f} | | | | | | |" for f in r.failures()]
            lines += row
            print("\n".join(row), flush=True)
        sections.append(lines)
    if args.skip_dense:
        return finish(sections, args.write_results)
    before = checkout(args.before) if args.before else None
    lines = ["## Dense pstats call graphs (issue 21)", "",
             "`.venv/bin/python bench/bench_fuzz.py --skip-fuzz"
             + (f" --before {args.before}" if args.before else "") + f" --timeout {args.timeout:.0f}`", "",
             "`profmagic.load()` of each file in a fresh process: CPU time of the load, the process's peak RSS, "
             "the stacks and frames rebuilt.", "",
             "| file | size | " + (f"before ({args.before}) | " if before else "") + "now |",
             "|---|---|" + ("---|" if before else "") + "---|"]
    for name, path in files().items():
        now = load_in_child(path, ROOT, args.timeout)
        old = load_in_child(path, before.name, args.timeout) if before else None
        lines.append(f"| {name} | {os.path.getsize(path) / 2**20:.2f} MB | "
                     + (f"{cell(old, args.timeout)} | " if before else "") + f"{cell(now, args.timeout)} |")
        print(lines[-1], flush=True)
    load2 = os.getloadavg()[0]
    lines += ["", f"Load average {load1:.1f} at the start, {load2:.1f} at the end (2 cores); CPU times are "
              "less affected by other work than wall times."]
    sections.append(lines)
    finish(sections, args.write_results)


def shapes(scale: float) -> list[str]:
    load1 = os.getloadavg()[0]
    rows = []
    for name, (_, _, size, _) in fuzz.SHAPES.items():
        rows += fuzz.run_shapes([name], scale if size > 1 else 1.0)
        r = rows[-1]
        print(f"{name}: {r['outcome']} {r['seconds']:.2f} s, {r['cpu'] or 0:.2f} s CPU, {r['rss_mb']:.0f} MB, "
              f"{r['message'][:100]}", flush=True)
    worst: dict[str, dict] = {}
    for r in rows:
        w = worst.setdefault(r["reader"], {"shapes": 0, "bad": [], "wall": (0, ""), "cpu": (0, ""), "rss": (0, "")})
        w["shapes"] += 1
        if r["outcome"] not in ("profile", "format-error"):
            w["bad"].append(f"{r['name']}: {r['outcome']} {r['message'][:80]}")
        for k, v in (("wall", r["seconds"]), ("cpu", r["cpu"] or 0), ("rss", r["rss_mb"])):
            if v >= w[k][0]:
                w[k] = (v, r["name"])
    lines = ["## Reader work bounds: the issue-28 shapes", "",
             f"`.venv/bin/python bench/bench_fuzz.py --shapes --scale {scale:g} --write-results`", "",
             f"Every shape of tests/fuzz.py (chains, nesting, threads, counts, archives at {scale:g}x the size "
             "of issue 28's attacks; typed meta and surrogates as they are) through `profmagic.load()` in a child "
             "of its own under RLIMIT_AS 1 GiB (killed after 60 s). Worst per reader; the child's peak RSS "
             "includes Python, numpy and pandas (about 80 MB).", "",
             "| reader | shapes | not a profile or a format error | worst wall | worst CPU | worst peak RSS |",
             "|---|---|---|---|---|---|"]
    for reader, w in sorted(worst.items()):
        lines.append(f"| {reader} | {w['shapes']} | {'; '.join(w['bad']) or 0} | {w['wall'][0]:.2f} s ({w['wall'][1]}) "
                     f"| {w['cpu'][0]:.2f} s ({w['cpu'][1]}) | {w['rss'][0]:.0f} MB ({w['rss'][1]}) |")
    lines += ["", f"Load average {load1:.1f} at the start, {os.getloadavg()[0]:.1f} at the end (2 cores, shared with "
              "other work: wall times wait for a core, CPU times do not)."]
    return lines


def finish(sections: list[list[str]], write: bool) -> None:
    print("\n\n".join("\n".join(s) for s in sections))
    if write:
        for s in sections:
            write_section("\n".join(s))


if __name__ == "__main__":
    main()

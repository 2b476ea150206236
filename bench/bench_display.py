"""Display-scale benchmark (issue 21, item 13): how long the report of a profile with millions of
distinct stacks takes to build, its Sandwich and Table tabs, and whether memory is released.

    .venv/bin/python bench/bench_display.py [--stacks 2000000] [--no-write]
    .venv/bin/python bench/bench_display.py --stacks 200000,2000000 --before REV   # issue 27 item 1
    .venv/bin/python bench/bench_display.py --line-table [--before REV]   # the Source view's table; prints only


The profile is made in memory (no file): STACKS distinct (thread, stack) rows over 8 threads and
5,000 functions, depth 10-40: a random call tree of 2,000 nodes gives each stack its head (as real
programs share their top frames) and a random tail of 5-30 frames makes it distinct. Wall and CPU
weights on every row. Each figure is measured in a fresh child process, the time of the step
alone (imports and building the profile excluded); RSS is read from /proc/self/status.
Kernel side only: what the kernel spends before the front end receives the first view.

With ``--before REV``, the profmagic package of git revision REV (exported to a temporary
directory) is measured too, each step alternating with this tree's, and the section "Array call
tree (issue 27 item 1)" is written instead.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)


def _status_mb(field: str) -> float:
    """A size line of /proc/self/status ("VmRSS", "VmHWM"), in MB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def rss_mb() -> float:
    return _status_mb("VmRSS")


def hwm_mb() -> float:
    return _status_mb("VmHWM")


def kernel_seconds() -> float:
    """The process's system (kernel) CPU seconds: page faults of fresh memory land here."""
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_stime


def make_profile(n: int, seed: int = 5):
    import numpy as np
    import pandas as pd
    from profmagic.model import Profile, make_frames
    rng = np.random.default_rng(seed)
    nfn = 5000
    frames = make_frames([f"func_{i}" for i in range(nfn)], [f"/app/pkg{i % 40}/mod_{i % 97}.py" for i in range(nfn)],
                         [1 + i % 800 for i in range(nfn)], ["python"] * nfn)
    # A random head tree of 2,000 nodes (parent < child), each node a function.
    parent = np.r_[-1, rng.integers(0, np.arange(1, 2000))]
    node_fn = rng.integers(0, nfn, 2000)
    heads = []
    for node in range(2000):
        path, x = [], node
        while x >= 0:
            path.append(int(node_fn[x]))
            x = int(parent[x])
        heads.append(tuple(path[::-1]))
    head_of = rng.integers(0, 2000, n)
    tail_len = rng.integers(5, 31, n)
    tails = (rng.zipf(1.2, int(tail_len.sum())) % nfn).tolist()
    stacks, pos = [], 0
    for h, k in zip(head_of.tolist(), tail_len.tolist()):
        stacks.append(heads[h] + tuple(tails[pos:pos + k]))
        pos += k
    samples = rng.integers(1, 4, n)
    threads = np.array([f"worker-{i}" for i in range(8)], dtype=object)[rng.integers(0, 8, n)]
    df = pd.DataFrame({"thread": threads, "stack": pd.Series(stacks, dtype=object), "samples": samples})
    df["wall"] = samples * 0.01
    df["cpu"] = df["wall"] * rng.uniform(0, 1, n)
    return Profile(frames, df, None, {"backend": "synthetic", "rate": 100.0}, None, "wall")


STEPS = ("flatten", "first view", "Sandwich", "Table", "del")


def child(n: int, step: str) -> dict:
    from profmagic import report
    import ipywidgets  # noqa: F401 (imported before the baseline, as in a kernel)
    start = rss_mb()
    p = make_profile(n)
    gc.collect()
    base = rss_mb()
    out = {"rows": len(p.stacks), "entries": int(p.stacks["stack"].map(len).sum()), "rss_profile": base,
           "rss_start": start}
    t0, c0, k0 = time.perf_counter(), time.process_time(), kernel_seconds()
    if step == "flatten":      # the floor of every view: the stack tuples turned into one frame array
        from profmagic import flatstacks
        flatstacks.flat(p)
    elif step == "first view":   # what a Profile's display builds: the static twin, then the widget
        html = report.static_html(p)
        r = report.Report(p)
        out["bytes"] = len(html) + len(json.dumps(r.panes[0].children[0].outputs[0]["data"]))
    elif step == "Sandwich":
        r = report.Report(p)
        t0, c0, k0 = time.perf_counter(), time.process_time(), kernel_seconds()
        r.tabs.selected_index = r.TABS.index("Sandwich")
        r.sw_list.value = r.sw_list.options[0][1]          # pick the first function: callers and callees
    elif step == "Table":
        r = report.Report(p)
        t0, c0, k0 = time.perf_counter(), time.process_time(), kernel_seconds()
        r.tabs.selected_index = r.TABS.index("Table")
    elif step == "line_table":   # analysis.line_table four times: two files, one thread, one function
        from profmagic import analysis
        files = p.frames["file"].value_counts().index          # the files of most frames first
        fid = int(p.function_ids()[p.frames.index[p.frames["file"] == files[0]][0]])
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")                                         # VmHWM from here: the calls' peak
        calls = (("first", (files[0],)), ("other file", (files[1],)), ("thread", (files[0], p.threads[0])),
                 ("function", (files[0], None, fid)))
        for name, args in calls:
            t, c = time.perf_counter(), time.process_time()
            analysis.line_table(p, *args)
            out[name] = (time.perf_counter() - t, time.process_time() - c)
        out["peak_mb"] = hwm_mb() - base
        gc.collect()
        out["kept_mb"] = rss_mb() - base
    out["seconds"], out["cpu"], out["sys"] = time.perf_counter() - t0, time.process_time() - c0, kernel_seconds() - k0
    if step == "del":   # as the display of a profile held in a variable: its report holds it weakly
        html = report.static_html(p)
        r = report.Report(p, hold=False)
        for i in range(len(r.TABS)):
            r.tabs.selected_index = i
        out["rss_shown"] = rss_mb()
        del p, html
        gc.collect()
        out["rss_after_del"] = rss_mb()
        out["seconds"] = out["cpu"] = float("nan")
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--stacks", default="2000000", help="stacks of the profile; a comma-separated list with --before")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--before", metavar="REV", help="also measure git revision REV's profmagic")
    ap.add_argument("--line-table", action="store_true", help="time analysis.line_table and its peak RSS; prints only")
    ap.add_argument("--child", nargs=2, metavar=("N", "STEP"))
    ap.add_argument("--root", help=argparse.SUPPRESS)   # a child imports profmagic from here
    a = ap.parse_args()
    if a.child:
        if a.root:
            sys.path.insert(0, a.root)
        out = child(int(a.child[0]), a.child[1])
        import profmagic
        out["profmagic"] = os.path.dirname(profmagic.__file__)
        print(json.dumps(out))
        return 0
    if a.line_table:
        return line_table(a)
    if a.before:
        return compare(a)
    a.stacks = int(a.stacks)
    res = {}
    for step in STEPS:
        # In a temp dir: a report writes a download over 10 MB into the working directory.
        with tempfile.TemporaryDirectory(prefix="profmagic-bench-display-") as work:
            r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", str(a.stacks), step],
                               capture_output=True, text=True, cwd=work)
        if r.returncode:
            print(r.stderr[-3000:], file=sys.stderr)
            return 1
        res[step] = json.loads(r.stdout.strip().splitlines()[-1])
        print(step, res[step], flush=True)
    first = res["first view"]
    lines = ["## Display scale (issue 21)", "",
             f"Command: `.venv/bin/python bench/bench_display.py --stacks {a.stacks}` ({time.strftime('%Y-%m-%d')}, "
             f"2 shared cores, load average {os.getloadavg()[0]:.1f} at the end). A synthetic profile of "
             f"{first['rows']:,} distinct (thread, stack) rows, {first['entries']:,} frames in all, 5,000 functions, "
             "wall and CPU on every row, made in memory (see the script). Kernel-side seconds, each in a fresh process.",
             "", "| step | wall s | CPU s (the process's own) | target |", "|---|---|---|---|",
             f"| first view (static twin + live widget with its icicle; {first['bytes'] / 1e6:.2f} MB sent) | "
             f"{first['seconds']:.2f} | {first['cpu']:.2f} | ≤ 5 s |",
             f"| Sandwich tab: function list (a page of {500}) and one function's callers/callees | "
             f"{res['Sandwich']['seconds']:.2f} | {res['Sandwich']['cpu']:.2f} | ≤ 5 s |",
             f"| Table tab | {res['Table']['seconds']:.2f} | {res['Table']['cpu']:.2f} | ≤ 5 s |",
             f"| (part of each: the {first['rows']:,} stack tuples made one frame array, once per profile) | "
             f"{res['flatten']['seconds']:.2f} | {res['flatten']['cpu']:.2f} | |", "",
             f"Memory (RSS): {res['del']['rss_start']:,.0f} MB before the profile, {res['del']['rss_profile']:,.0f} MB "
             f"with it built, {res['del']['rss_shown']:,.0f} MB after its display and every tab, "
             f"{res['del']['rss_after_del']:,.0f} MB after `del` and `gc.collect()` (the report holds a profile "
             "kept in a variable weakly; every object of the profile is freed, the allocator keeps some pages).",
             "", "How: the stacks are made one frame array once per profile (the model keeps a tuple per stack, so "
             "this is a pass over every frame in Python, the floor of every view); a view's call tree is built "
             "level by level with an early cut (nodes under 1/32,000 of the view are not built, and the cut is "
             "lowered until the result equals pruning the full tree); Sandwich lists a page of 500 functions with "
             "totals for those only; the static twin's table gives self time only for a profile this large; the "
             "speedscope JSON is built on request.", ""]
    text = "\n".join(lines)
    print(text)
    if not a.no_write:
        from results import write_section
        write_section(text)
    return 0


def run_child(n: int, step: str, root: str | None = None) -> dict:
    """One step in a fresh process (in a temp dir: a report writes a download over 10 MB into the
    working directory); ``root``: where it imports profmagic from."""
    with tempfile.TemporaryDirectory(prefix="profmagic-bench-display-") as work:
        cmd = [sys.executable, os.path.abspath(__file__), "--child", str(n), step] + (["--root", root] if root else [])
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=work)
    if r.returncode:
        raise RuntimeError(r.stderr[-3000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def export(rev: str, dest: str) -> str:
    """The profmagic package of git revision ``rev``, written under ``dest``; its commit id."""
    import io
    import tarfile
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", rev], check=True, capture_output=True,
                            text=True).stdout.strip()
    tar = subprocess.run(["git", "-C", ROOT, "archive", "--format=tar", commit, "profmagic"], check=True,
                         capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        t.extractall(dest, filter="data")
    return commit


def compare(a) -> int:
    sizes = [int(x) for x in str(a.stacks).split(",")]
    steps = ("flatten", "first view", "Sandwich", "Table")
    res: dict = {}
    with tempfile.TemporaryDirectory(prefix="profmagic-bench-before-") as old:
        commit = export(a.before, old)
        head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--", "profmagic/views", "profmagic/model.py"],
                               capture_output=True, text=True).stdout.strip()
        load0 = os.getloadavg()[0]
        for n in sizes:
            for step in steps:
                for side, root in (("before", old), ("now", None)):
                    r = run_child(n, step, root)
                    assert r["profmagic"].startswith(old) == (side == "before"), r["profmagic"]
                    res[(n, step, side)] = r
                    print(n, step, side, {k: r[k] for k in ("seconds", "cpu", "sys")}, flush=True)
        load1 = os.getloadavg()[0]
    now = f"{head}" + (" with uncommitted changes to the views" if dirty else "")
    lines = ["## Array call tree (issue 27 item 1)", "",
             f"Command: `nice -n 19 .venv/bin/python bench/bench_display.py --stacks {a.stacks} --before {a.before}` "
             f"({time.strftime('%Y-%m-%d %H:%M')}; 2 cores shared with other work, load average {load0:.1f} at the "
             f"start, {load1:.1f} at the end). before = profmagic of {commit}, now = {now}. The profile of "
             "\"Display scale\" above; each step in a fresh process, before and now alternating; kernel-side "
             "seconds of the step alone (building the profile excluded). CPU seconds are the process's own, "
             "less disturbed by the other work than wall seconds.", "",
             "| stacks (frames) | step | before: wall s | before: CPU s (kernel) | now: wall s | now: CPU s (kernel) "
             "| target (wall) |", "|---|---|---|---|---|---|---|"]
    for n in sizes:
        entries = res[(n, "flatten", "now")]["entries"]
        target = "≤ 1 s" if n <= 200_000 else "≤ 5 s"
        for step in steps:
            b, c = res[(n, step, "before")], res[(n, step, "now")]
            label = {"flatten": "(part of each: stack tuples to one frame array)",
                     "first view": "first view (static twin + widget)", "Sandwich": "Sandwich tab + one function",
                     "Table": "Table tab"}[step]
            lines.append(f"| {n:,} ({entries:,}) | {label} | {b['seconds']:.2f} | {b['cpu']:.2f} ({b['sys']:.2f}) | "
                         f"{c['seconds']:.2f} | {c['cpu']:.2f} ({c['sys']:.2f}) | {'' if step == 'flatten' else target} |")
    text = "\n".join(lines + [""])
    print(text)
    if not a.no_write:
        from results import write_section
        write_section(text)
    return 0


def line_table(a) -> int:
    """``analysis.line_table`` on the profile of STACKS stacks, in fresh processes: each call's
    seconds, the peak RSS above the built profile over the four calls and what stays after them;
    with ``--before REV`` that revision's too, alternating. Printed, not written."""
    n = int(a.stacks)
    with tempfile.TemporaryDirectory(prefix="profmagic-bench-before-") as old:
        sides = [("now", None)]
        if a.before:
            sides.insert(0, (f"before ({export(a.before, old)})", old))
        for _ in range(2):
            for side, root in sides:
                r = run_child(n, "line_table", root)
                print(f"{side}: {r['rows']:,} stacks, {r['entries']:,} frames; wall (CPU) seconds: "
                      + ", ".join(f"{k} {r[k][0]:.2f} ({r[k][1]:.2f})" for k in ("first", "other file", "thread",
                                                                                 "function"))
                      + f"; peak +{r['peak_mb']:.0f} MB, kept +{r['kept_mb']:.0f} MB", flush=True)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    raise SystemExit(main())

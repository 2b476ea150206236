"""Load-time and peak-memory benchmark for profmagic.load() against bare baselines (issue 2).

    .venv/bin/python bench/bench_load.py [--reps N] [--scale F] [--no-write] [--parsers]

Generates under bench/data/ (gitignored, reused when present):
  * big.speedscope.json: 1,000,000 samples over 8 threads, py-spy shaped (unit seconds, nulls for col),
    5,000 distinct frames, depth 10-30. Each thread is a random walk on one fixed random call tree, so
    stacks repeat as in a real profile: distinct stacks are far fewer than samples (printed).
  * big.folded: 200,000 distinct stacks (every one a different node of a larger random call tree).

Each measurement runs in a fresh subprocess; the parent reads that child's peak RSS (ru_maxrss from
os.wait4) and the child reports the time of the load alone (file read included, imports excluded).
The candidate and its baseline alternate, several repetitions; the figures are median ratios.
--parsers (issue 27 item 2) instead loads distinct.speedscope.json: 1,000,000 samples over 8 threads,
each sample a different stack (depth uniform in 12-38, 10 roots, 5,000 frames), and times the
JSON parsers side by side with profmagic.load, each in its own fresh child: json.loads, orjson.loads,
msgspec.json.decode (untyped, and typed to speedscope's shape with samples as tuples). A parser
that is not installed is left out (PYTHONPATH may point at a directory holding it). Writes the section "Reading at parser speed".
Baselines: json.loads(open(f, 'rb').read()) for speedscope; open(f, 'rb').read().split(b'\\n') for folded.
--scale F scales both inputs (bench/run_all.py --quick uses 0.05). Writes its section of bench/RESULTS.md
through bench/results.py unless --no-write.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")
ROOT = os.path.dirname(HERE)
SPEEDSCOPE = os.path.join(DATA, "big.speedscope.json")
DISTINCT = os.path.join(DATA, "distinct.speedscope.json")
N_DISTINCT = 1_000_000
CHROME = os.path.join(DATA, "distinct.trace.json")
GECKO = os.path.join(DATA, "distinct.gecko.json")
FORMAT_STACKS = 5_000
FOLDED = os.path.join(DATA, "big.folded")
N_SAMPLES, N_FRAMES, N_THREADS = 1_000_000, 5_000, 8
N_FOLDED = 200_000
MIN_DEPTH, MAX_DEPTH = 10, 30


def configure(scale: float) -> None:
    """Input sizes and file names for ``scale`` (1 = the figures in RESULTS.md)."""
    global SPEEDSCOPE, FOLDED, DISTINCT, CHROME, GECKO, N_SAMPLES, N_FOLDED, N_DISTINCT
    N_SAMPLES, N_FOLDED, N_DISTINCT = int(1_000_000 * scale), int(200_000 * scale), int(1_000_000 * scale)
    tag = "" if scale == 1 else f"-x{scale:g}"
    DISTINCT = os.path.join(DATA, f"distinct{tag}.speedscope.json")
    CHROME, GECKO = os.path.join(DATA, f"distinct{tag}.trace.json"), os.path.join(DATA, f"distinct{tag}.gecko.json")
    SPEEDSCOPE = os.path.join(DATA, f"big{tag}.speedscope.json")
    FOLDED = os.path.join(DATA, f"big{tag}.folded")


def call_tree(rng: random.Random, n_nodes: int, branching=(1, 1, 1, 2, 2)):
    """A random call tree: parent and frame per node, breadth first, children per node drawn from branching."""
    parent, frame, depth = [-1], [rng.randrange(N_FRAMES)], [1]
    children: list[list[int]] = [[]]
    i = 0
    while len(parent) < n_nodes and i < len(parent):
        if depth[i] < MAX_DEPTH:
            for _ in range(rng.choice(branching)):
                if len(parent) >= n_nodes:
                    break
                parent.append(i)
                frame.append(rng.randrange(N_FRAMES))
                depth.append(depth[i] + 1)
                children.append([])
                children[i].append(len(parent) - 1)
        i += 1
    return parent, frame, depth, children


def path(node, parent, frame):
    out = []
    while node >= 0:
        out.append(frame[node])
        node = parent[node]
    return out[::-1]


def deep_start(rng, children, depth):
    node = 0
    while depth[node] < MIN_DEPTH:
        node = rng.choice(children[node])
    return node


def make_speedscope(path_out: str) -> dict:
    rng = random.Random(2)
    parent, frame, depth, children = call_tree(rng, 40_000)
    per_thread = N_SAMPLES // N_THREADS
    texts: dict[int, str] = {}
    distinct = set()
    frames = [{"name": f"func_{i}", "file": f"/app/pkg/mod_{i % 97}.py", "line": 1 + i % 800, "col": None}
              for i in range(N_FRAMES)]
    with open(path_out, "w") as f:
        f.write('{"$schema":"https://www.speedscope.app/file-format-schema.json","profiles":[')
        for t in range(N_THREADS):
            node = deep_start(rng, children, depth)
            parts = []
            for _ in range(per_thread):
                r = rng.random()
                if r < 0.2 and children[node] and depth[node] < MAX_DEPTH:
                    node = rng.choice(children[node])
                elif r < 0.4 and depth[node] > MIN_DEPTH:
                    node = parent[node]
                s = texts.get(node)
                if s is None:
                    s = texts[node] = "[" + ",".join(map(str, path(node, parent, frame))) + "]"
                distinct.add((t, node))
                parts.append(s)
            if t:
                f.write(",")
            f.write('{"type":"sampled","name":"Thread %d \\"worker\\"","unit":"seconds","startValue":0.0,'
                    '"endValue":%s,"samples":[' % (1000 + t, per_thread * 0.01))
            f.write(",".join(parts))
            f.write('],"weights":[' + ",".join(["0.01"] * per_thread) + "]}")
        f.write('],"shared":{"frames":' + json.dumps(frames, separators=(",", ":")) + "},"
                '"activeProfileIndex":null,"exporter":"py-spy@0.4.3","name":"py-spy profile"}')
    return {"distinct_stacks": len(distinct)}


def make_distinct(path_out: str) -> dict:
    """Speedscope with N_DISTINCT samples in N_THREADS threads, every sample a different stack: depth
    uniform in 12..38 (about 121 MB, the size of the file issue 27 measured), the root one of 10
    frames, the others any of N_FRAMES."""
    import numpy as np
    rng = np.random.default_rng(4)
    n = N_DISTINCT + N_DISTINCT // 100 + 10   # a few spare in case two come out equal
    depth = rng.integers(12, 39, n)
    frames_of = rng.integers(0, N_FRAMES, int(depth.sum()))
    ends = np.cumsum(depth)
    frames_of[ends - depth] = rng.integers(0, 10, n)
    flat = frames_of.astype(str).tolist()
    texts = list(dict.fromkeys(",".join(flat[e - d:e]) for e, d in zip(ends.tolist(), depth.tolist())))
    texts = texts[:N_DISTINCT]
    assert len(texts) == N_DISTINCT, len(texts)
    frames = [{"name": f"func_{i}", "file": f"/app/pkg/mod_{i % 97}.py", "line": 1 + i % 800, "col": None}
              for i in range(N_FRAMES)]
    per_thread = N_DISTINCT // N_THREADS
    with open(path_out, "w") as f:
        f.write('{"$schema":"https://www.speedscope.app/file-format-schema.json","profiles":[')
        for t in range(N_THREADS):
            part = texts[t * per_thread:(t + 1) * per_thread]
            f.write((',' if t else '') + '{"type":"sampled","name":"Thread %d \\"worker\\"","unit":"seconds",'
                    '"startValue":0.0,"endValue":%s,"samples":[' % (1000 + t, len(part) * 0.01))
            f.write(",".join(f"[{x}]" for x in part))
            f.write('],"weights":[' + ",".join(["0.01"] * len(part)) + "]}")
        f.write('],"shared":{"frames":' + json.dumps(frames, separators=(",", ":")) + "},"
                '"activeProfileIndex":null,"exporter":"py-spy@0.4.3","name":"py-spy profile"}')
    return {"distinct_stacks": per_thread * N_THREADS}


def make_folded(path_out: str) -> dict:
    rng = random.Random(3)
    parent, frame, depth, children = call_tree(rng, max(3 * N_FOLDED, 600_000 * N_FOLDED // 200_000),
                                               branching=(1, 2, 2))
    names = [f"func_{i} (/app/pkg/mod_{i % 97}.py:{1 + i % 800})" for i in range(N_FRAMES)]
    nodes = [n for n in range(len(parent)) if MIN_DEPTH <= depth[n] <= MAX_DEPTH]
    rng.shuffle(nodes)
    # Siblings may call the same frame: keep one line per distinct stack text.
    stacks = list(dict.fromkeys(";".join(names[x] for x in path(n, parent, frame)) for n in nodes))[:N_FOLDED]
    assert len(stacks) == N_FOLDED, len(stacks)
    lines = sorted(f"{s} {rng.randint(1, 500)}" for s in stacks)
    with open(path_out, "w") as f:
        f.write("\n".join(lines) + "\n")
    return {"distinct_stacks": len(lines)}


CHILD = {
    "json.loads": "import json\nt=time.perf_counter()\ndoc=json.loads(open(P,'rb').read())\n",
    "line split": "t=time.perf_counter()\nlines=open(P,'rb').read().split(b'\\n')\n",
    # profmagic.load imports its readers (and pandas) on first use: imported here, outside the timing, as
    # the other kinds import their parser first.
    "profmagic.load": "import profmagic, profmagic.formats\nprofmagic.formats.available()\n"
                      "t=time.perf_counter()\nprof=profmagic.load(P)\n",
    "orjson.loads": "import orjson\nt=time.perf_counter()\ndoc=orjson.loads(open(P,'rb').read())\n",
    "msgspec.json.decode": "import msgspec\nt=time.perf_counter()\ndoc=msgspec.json.decode(open(P,'rb').read())\n",
    # speedscope's shape as msgspec Structs: samples decode straight to tuples, weights to floats.
    "msgspec typed": "import msgspec\nfrom typing import Any, Optional\n"
                     "class Fr(msgspec.Struct):\n name: str\n file: Optional[str] = None\n"
                     " line: Optional[int] = None\n col: Optional[int] = None\n"
                     "class Pr(msgspec.Struct):\n type: str\n name: str = ''\n unit: str = 'none'\n"
                     " startValue: float = 0.0\n endValue: float = 0.0\n"
                     " samples: list[tuple[int, ...]] = []\n weights: list[float] = []\n"
                     "class Sh(msgspec.Struct):\n frames: list[Fr]\n"
                     "class Doc(msgspec.Struct):\n profiles: list[Pr]\n shared: Sh\n"
                     "t=time.perf_counter()\ndoc=msgspec.json.decode(open(P,'rb').read(), type=Doc)\n",
}
MODULE = {"orjson.loads": "orjson", "msgspec.json.decode": "msgspec", "msgspec typed": "msgspec"}


def run_child(kind: str, path_in: str) -> tuple[float, float, float]:
    """(seconds, peak RSS in MB, CPU seconds) of one load in a fresh interpreter. The CPU seconds are the
    child's own (user + kernel) over the load alone: steadier than wall time when other work shares the cores."""
    code = f"import sys,time\nsys.path.insert(0,{ROOT!r})\nP={path_in!r}\n" + \
        CHILD[kind].replace("t=time.perf_counter()", "t=time.perf_counter();c=time.process_time()") + \
        "print(time.perf_counter()-t, time.process_time()-c)\n"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, cwd=ROOT)
    out = proc.stdout.read()
    proc.stdout.close()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{kind} on {path_in} failed with status {proc.returncode}")
    wall, cpu = map(float, out.decode().split())
    return wall, usage.ru_maxrss / 1024.0, cpu


def compare(label: str, path_in: str, baseline: str, reps: int, others=("profmagic.load",)) -> dict:
    kinds = [baseline, *others]
    res = {k: [] for k in kinds}
    for r in range(reps):
        order = kinds[r % len(kinds):] + kinds[:r % len(kinds)]   # each kind takes each place in turn
        for kind in order:
            res[kind].append(run_child(kind, path_in))
            print(f"  {label} rep {r + 1}: {kind:22s} {res[kind][-1][0]:7.3f} s  {res[kind][-1][1]:8.1f} MB  "
                  f"{res[kind][-1][2]:7.3f} s CPU",
                  flush=True)
    ratios = {k: (statistics.median(p[0] / b[0] for p, b in zip(res[k], res[baseline])),
                  statistics.median(p[1] / b[1] for p, b in zip(res[k], res[baseline]))) for k in kinds}
    med = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)) for k, v in res.items()}
    cpu = {k: (statistics.median(x[2] for x in v), statistics.median(p[2] / b[2] for p, b in zip(v, res[baseline])))
           for k, v in res.items()}
    return {"label": label, "baseline": baseline, "median": med, "ratios": ratios, "cpu": cpu,
            "time_ratio": ratios["profmagic.load"][0], "mem_ratio": ratios["profmagic.load"][1],
            "size_mb": os.path.getsize(path_in) / 1e6, "runs": res}


def installed(module: str) -> bool:
    return subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True).returncode == 0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--only", choices=("speedscope", "folded"))
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--parsers", action="store_true", help="the JSON parsers side by side on the 1M-distinct-stack "
                    "speedscope file (issue 27 item 2)")
    ap.add_argument("--child", choices=("generate", "facts", "generate-distinct", "facts-distinct", "generate-formats"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args()
    configure(args.scale)
    if args.child == "generate":
        os.makedirs(DATA, exist_ok=True)
        for p, make in ((SPEEDSCOPE, make_speedscope), (FOLDED, make_folded)):
            if not os.path.exists(p):
                t = time.perf_counter()
                info = make(p + ".tmp")
                os.replace(p + ".tmp", p)
                print(f"generated {p}: {os.path.getsize(p) / 1e6:.1f} MB, {info} in {time.perf_counter() - t:.1f} s")
        return
    if args.child == "generate-distinct":
        os.makedirs(DATA, exist_ok=True)
        if not os.path.exists(DISTINCT):
            t = time.perf_counter()
            info = make_distinct(DISTINCT + ".tmp")
            os.replace(DISTINCT + ".tmp", DISTINCT)
            print(f"generated {DISTINCT}: {os.path.getsize(DISTINCT) / 1e6:.1f} MB, {info} "
                  f"in {time.perf_counter() - t:.1f} s")
        return
    if args.child == "generate-formats":
        # Chrome trace and gecko files written by profmagic from about FORMAT_STACKS stack rows of the
        # distinct file, every k-th (all distinct, so a Chrome trace's B/E events are many per sample).
        sys.path.insert(0, ROOT)
        import numpy as np
        import profmagic
        from profmagic.formats import chrome_trace, gecko
        for p, mod in ((CHROME, chrome_trace), (GECKO, gecko)):
            if not os.path.exists(p):
                prof = profmagic.load(DISTINCT)
                prof = prof.subset(np.arange(len(prof.stacks)) % max(1, len(prof.stacks) // FORMAT_STACKS) == 0)
                with open(p + ".tmp", "wb") as f:
                    f.write(mod.write(prof))
                os.replace(p + ".tmp", p)
                print(f"generated {p}: {os.path.getsize(p) / 1e6:.1f} MB")
        return
    if args.child == "facts-distinct":
        sys.path.insert(0, ROOT)
        import profmagic
        prof = profmagic.load(DISTINCT)
        depth = prof.stacks["stack"].map(len)
        print(f"distinct.speedscope.json ({os.path.getsize(DISTINCT) / 1e6:.0f} MB): {prof.sample_count:,} samples, "
              f"{len(prof.stacks):,} distinct (thread, stack) rows, {len(prof.frames):,} frames, "
              f"{len(prof.threads)} threads, depth {depth.min()}-{depth.max()}")
        return
    if args.parsers:
        return parsers(args)
    if args.child == "facts":
        sys.path.insert(0, ROOT)
        import profmagic
        for label, p in (("speedscope", SPEEDSCOPE), ("folded", FOLDED)):
            prof = profmagic.load(p)
            depth = prof.stacks["stack"].map(len)
            print(f"{label} ({os.path.getsize(p) / 1e6:.0f} MB): {prof.sample_count:,} samples, "
                  f"{len(prof.stacks):,} distinct (thread, stack) rows, {len(prof.frames):,} frames, "
                  f"{len(prof.threads)} threads, depth {depth.min()}-{depth.max()}")
        return
    # Generation and facts run in children: a child inherits its parent's peak RSS across fork on
    # Linux, so the parent must stay small for ru_maxrss to be the child's own.
    scale = ["--scale", str(args.scale)]
    subprocess.run([sys.executable, __file__, "--child", "generate", *scale], check=True)
    facts = subprocess.run([sys.executable, __file__, "--child", "facts", *scale], check=True,
                           capture_output=True, text=True).stdout
    print(facts, end="")
    results = []
    for label, p, base in (("speedscope", SPEEDSCOPE, "json.loads"), ("folded", FOLDED, "line split")):
        if args.only and args.only != label:
            continue
        results.append(compare(label, p, base, args.reps))
    print()
    for r in results:
        (bt, bm), (pt, pm) = r["median"][r["baseline"]], r["median"]["profmagic.load"]
        print(f"{r['label']} ({r['size_mb']:.0f} MB): {r['baseline']} {bt:.2f} s / {bm:.0f} MB; "
              f"profmagic.load {pt:.2f} s / {pm:.0f} MB; median ratios: time {r['time_ratio']:.2f}x, "
              f"peak RSS {r['mem_ratio']:.2f}x")
    text = section(results, args, facts)
    print(text)
    if not args.no_write and not args.only:
        from results import write_section
        write_section(text)


def parsers(args) -> None:
    scale = ["--scale", str(args.scale)]
    subprocess.run([sys.executable, __file__, "--child", "generate-distinct", *scale], check=True)
    facts = subprocess.run([sys.executable, __file__, "--child", "facts-distinct", *scale], check=True,
                           capture_output=True, text=True).stdout
    print(facts, end="")
    others = [k for k in ("orjson.loads", "msgspec.json.decode", "msgspec typed") if installed(MODULE[k])]
    others += ["profmagic.load"]
    r = compare("distinct", DISTINCT, "json.loads", args.reps, others)
    subprocess.run([sys.executable, __file__, "--child", "generate-formats", *scale], check=True)
    generic = [k for k in others if k != "msgspec typed"]
    fmts = [compare(label, p, "json.loads", args.reps, generic) for label, p in (("chrome", CHROME), ("gecko", GECKO))]
    print()
    for x, kinds in ((r, others), *((f, generic) for f in fmts)):
        print(f"{x['label']} ({x['size_mb']:.0f} MB)")
        for k in ["json.loads", *kinds]:
            (t, m), (tr, mr) = x["median"][k], x["ratios"][k]
            print(f"  {k:24s} {t:6.2f} s {m:7.0f} MB   time {tr:.2f}x  peak {mr:.2f}x")
    text = parsers_section(r, args, facts, others, fmts, generic)
    print(text)
    if not args.no_write:
        from results import write_section
        write_section(text)


def parsers_section(r: dict, args, facts: str, others: list[str], fmts: list[dict], generic: list[str]) -> str:
    import platform
    cmd = ".venv/bin/python bench/bench_load.py --parsers" + (f" --reps {args.reps}" if args.reps != 5 else "") + \
        (f" --scale {args.scale:g}" if args.scale != 1 else "")
    ok = r["time_ratio"] <= 0.8 and r["mem_ratio"] <= 1.0
    L = ["## Reading at parser speed (issue 27 item 2)", "",
         f"Command: `{cmd}` (generates bench/data/distinct.speedscope.json on first run; seed fixed). "
         f"Python {platform.python_version()}, {os.cpu_count()} cores shared with other work, load average "
         f"{os.getloadavg()[0]:.1f} at the end; {time.strftime('%Y-%m-%d %H:%M')}. Each figure is one load in a "
         "fresh child (imports excluded, file read included; peak RSS from `ru_maxrss` via `os.wait4`, imports "
         f"included). The kinds rotate over {args.reps} repetitions; ratios are medians of per-repetition "
         "ratios to `json.loads` in the same repetition.", "",
         "Input:", *[f"- {ln}" for ln in facts.strip().splitlines()], "",
         "| reader | median wall time / peak | wall-time ratio | peak ratio | median CPU time | CPU-time ratio |",
         "|---|---|---|---|---|---|"]
    for k in ["json.loads", *others]:
        (t, m), (tr, mr), (c, cr) = r["median"][k], r["ratios"][k], r["cpu"][k]
        L.append(f"| `{k}` | {t:.2f} s / {m:.0f} MB | {tr:.2f}× | {mr:.2f}× | {c:.2f} s | {cr:.2f}× |")
    cpu_ok = r["cpu"]["profmagic.load"][1] <= 0.8 and r["mem_ratio"] <= 1.0
    L += ["", f"Target (issue 27): `profmagic.load` ≤ 0.8× `json.loads`'s time and ≤ 1.0× its peak: "
              f"wall {r['time_ratio']:.2f}× / {r['mem_ratio']:.2f}× {'✔' if ok else '✘'}; "
              f"CPU {r['cpu']['profmagic.load'][1]:.2f}× / {r['mem_ratio']:.2f}× {'✔' if cpu_ok else '✘'}.", "",
          f"The other JSON readers, on files profmagic wrote from every {max(1, N_DISTINCT // FORMAT_STACKS)}th "
          "stack row of that profile (Chrome trace: B/E events; gecko: its tables), same method:", "",
          "| file | " + " | ".join(f"`{k}`" for k in ["json.loads", *generic]) + " |",
          "|---|" + "---|" * (len(generic) + 1)]
    for f in fmts:
        cells = [f"{f['median'][k][0]:.2f} s / {f['median'][k][1]:.0f} MB"
                 + ("" if k == "json.loads" else f" ({f['ratios'][k][0]:.2f}× / {f['ratios'][k][1]:.2f}×)")
                 for k in ["json.loads", *generic]]
        L.append(f"| {f['label']} {f['size_mb']:.0f} MB | " + " | ".join(cells) + " |")
    return "\n".join(L) + "\n"


TARGETS = {"speedscope": ("≤ 1.5× / ≤ 1.2×", lambda r: r["time_ratio"] <= 1.5 and r["mem_ratio"] <= 1.2)}
CODE = {"json.loads": "`json.loads(open(f,'rb').read())`", "line split": "`open(f,'rb').read().split(b'\\n')`"}


def section(results: list[dict], args, facts: str) -> str:
    import platform
    cmd = ".venv/bin/python bench/bench_load.py" + (f" --reps {args.reps}" if args.reps != 5 else "") + \
        (f" --scale {args.scale:g}" if args.scale != 1 else "")
    L = ["## Loading (issue 2)", "",
         f"Command: `{cmd}` (generates its inputs under bench/data/ on first run; seeds fixed). "
         f"Python {platform.python_version()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end; "
         f"{time.strftime('%Y-%m-%d')}. Each figure comes from a fresh child process; the parent reads that "
         "child's peak RSS (`ru_maxrss` from `os.wait4`) and the child times the load alone (file read "
         "included, imports excluded). The candidate and its baseline alternate over "
         f"{args.reps} repetitions; ratios are medians of the per-repetition ratios.", "",
         "Inputs:", *[f"- {ln}" for ln in facts.strip().splitlines()], "",
         "| file | baseline | baseline time / peak | `profmagic.load` time / peak | time ratio | peak ratio | target |",
         "|---|---|---|---|---|---|---|"]
    for r in results:
        (bt, bm), (pt, pm) = r["median"][r["baseline"]], r["median"]["profmagic.load"]
        target, ok = TARGETS.get(r["label"], ("(none set)", None))
        mark = "" if ok is None else (" ✔" if ok(r) else " ✘")
        L.append(f"| {r['label']} {r['size_mb']:.0f} MB | {CODE[r['baseline']]} | {bt:.2f} s / {bm:.0f} MB | "
                 f"{pt:.2f} s / {pm:.0f} MB | {r['time_ratio']:.2f}× | {r['mem_ratio']:.2f}× | {target}{mark} |")
    return "\n".join(L) + "\n"


if __name__ == "__main__":
    main()

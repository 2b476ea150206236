"""perf script -> folded: profmagic's reader against FlameGraph's stackcollapse-perf.pl.

Builds a >= 100 MB perf script from the FlameGraph corpus inputs (cpu-clock ones, each copy with
its own pids), then times, alternating, ``perl stackcollapse-perf.pl FILE`` and
``perf_script.read(FILE).to_folded(metric="samples")`` and checks that the outputs are identical.
Wall and CPU time (user + sys) are both reported: on a shared machine, wall time is mostly
queueing for a core, so the CPU-time ratio is the steadier one.

stackcollapse-perf.pl is taken from the local mirror of github:brendangregg/FlameGraph (fetch it
first) into a temp file; it is never committed.

    .venv/bin/python bench/bench_perf_script.py [--mb 100] [--runs 3] [--flamegraph-git DIR]
"""
from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from profmagic.formats import perf_script  # noqa: E402

CORPUS = os.path.join(os.path.dirname(HERE), "tests", "data", "flamegraph", "test")
MIRROR = "/work/.mirror/brendangregg+FlameGraph/repo"
# Inputs whose event is cpu-clock: one event type, so the first-event filter keeps them all.
INPUTS = ("perf-dd-stacks-01", "perf-funcab-cmd-01", "perf-funcab-pid-01", "perf-iperf-stacks-pidtid-01",
          "perf-js-stacks-01", "perf-mirageos-stacks-01", "perf-numa-stacks-01", "perf-vertx-stacks-01")
HEADER = re.compile(rb"^(\S.+?\s+)(\d+)(?=[/\s])", re.M)


def build_input(path: str, mb: int) -> None:
    if os.path.exists(path) and os.path.getsize(path) >= mb * 1_000_000:
        return
    chunks = []
    for stem in INPUTS:
        with open(os.path.join(CORPUS, stem + ".txt"), "rb") as f:
            data = f.read()
        # Comments are dropped; each chunk ends with a blank line so no record runs into the next.
        data = b"\n".join(ln for ln in data.split(b"\n") if not ln.startswith(b"#")).rstrip(b"\n") + b"\n\n"
        chunks.append(data)
    one = b"".join(chunks)
    # Header lines whose first number gets a per-copy offset (distinct pids/tids in every copy).
    parts = []
    pos = 0
    for m in HEADER.finditer(one):
        if m.group(0)[:1].isspace():
            continue
        parts.append(one[pos:m.start(2)])
        parts.append(int(m.group(2)))
        pos = m.end(2)
    parts.append(one[pos:])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    size = 0
    with open(tmp, "wb") as out:
        copy = 0
        while size < mb * 1_000_000:
            off = copy * 100_000
            buf = b"".join(p if isinstance(p, bytes) else str(p + off).encode() for p in parts)
            out.write(buf)
            size += len(buf)
            copy += 1
    os.replace(tmp, path)


def stackcollapse(git_dir: str, dest: str) -> str:
    text = subprocess.run(["git", "--git-dir", git_dir, "show", "HEAD:stackcollapse-perf.pl"],
                          check=True, capture_output=True).stdout
    with open(dest, "wb") as f:
        f.write(text)
    return subprocess.run(["git", "--git-dir", git_dir, "rev-parse", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()


def _child_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_perl(script: str, path: str, opts: list[str]) -> tuple[float, float, bytes]:
    """(wall s, CPU s, output) of stackcollapse-perf.pl."""
    c0, t0 = _child_cpu(), time.perf_counter()
    out = subprocess.run(["perl", script, *opts, path], check=True, capture_output=True).stdout
    return time.perf_counter() - t0, _child_cpu() - c0, out


def run_ours(path: str, opts: dict) -> tuple[float, float, bytes]:
    """(wall s, CPU s, output) of reading the file and writing folded text, in this process."""
    c0, t0 = time.process_time(), time.perf_counter()
    with open(path, "rb") as f:
        data = f.read()
    p = perf_script.read(data, source=path, keep_unterminated=False, **opts)
    out = p.to_folded(metric="samples").encode("utf-8", errors="surrogateescape")
    return time.perf_counter() - t0, time.process_time() - c0, out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--flamegraph-git", default=MIRROR)
    ap.add_argument("--opt", action="append", default=None,
                    help="stackcollapse option to time (repeatable): none, pid, tid, kernel, jit, all, addrs")
    a = ap.parse_args(argv)
    path = os.path.join(HERE, "data", f"perf-script-{a.mb}mb.txt")
    build_input(path, a.mb)
    size = os.path.getsize(path)
    print(f"input {path}: {size / 1e6:.1f} MB")
    with tempfile.TemporaryDirectory() as td:
        script = os.path.join(td, "stackcollapse-perf.pl")
        commit = stackcollapse(a.flamegraph_git, script)
        print(f"stackcollapse-perf.pl at FlameGraph {commit}; perl {subprocess.run(['perl', '-e', 'print $^V'], capture_output=True, text=True).stdout}")
        for opt in a.opt or ["none"]:
            perl_opts = [] if opt == "none" else [f"--{opt}"]
            our_opts = {} if opt == "none" else {opt: True}
            tp, to, cp, co = [], [], [], []
            same = True
            for i in range(a.runs):
                # Alternate which one goes first, so drift on the shared machine hits both.
                order = [("perl", run_perl, (script, path, perl_opts)), ("ours", run_ours, (path, our_opts))]
                if i % 2:
                    order.reverse()
                res = {}
                for name, fn, args in order:
                    res[name] = fn(*args)
                (wp, xp, outp), (wo, xo, outo) = res["perl"], res["ours"]
                tp.append(wp)
                to.append(wo)
                cp.append(xp)
                co.append(xo)
                same = same and outp == outo
                print(f"  [{opt}] run {i + 1}: perl {wp:.2f} s wall / {xp:.2f} s CPU, profmagic {wo:.2f} s wall / "
                      f"{xo:.2f} s CPU, identical={outp == outo} ({len(outo.splitlines())} lines)")
            mp, mo = statistics.median(tp), statistics.median(to)
            xp, xo = statistics.median(cp), statistics.median(co)
            print(f"[{opt}] median wall: perl {mp:.2f} s ({size / 1e6 / mp:.1f} MB/s), profmagic {mo:.2f} s "
                  f"({size / 1e6 / mo:.1f} MB/s): {mp / mo:.2f}x")
            print(f"[{opt}] median CPU:  perl {xp:.2f} s, profmagic {xo:.2f} s: {xp / xo:.2f}x; "
                  f"identical output: {same}")
            if not same:
                print("OUTPUT DIFFERS", file=sys.stderr)
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""perf script -> folded: profmagic's reader against FlameGraph's stackcollapse-perf.pl.

Builds a >= 100 MB perf script from the FlameGraph corpus inputs (cpu-clock ones, each copy with
its own pids), then times, alternating, ``perl stackcollapse-perf.pl FILE`` and
``profmagic.to_folded(perf_script.read(FILE), metric="samples")`` and checks that the outputs are identical.
Wall and CPU time (user + sys) are both reported: on a shared machine, wall time is mostly
queueing for a core, so the CPU-time ratio is the steadier one.

stackcollapse-perf.pl is taken from a git clone of github:brendangregg/FlameGraph (--flamegraph-git,
default $FLAMEGRAPH_GIT) into a temp file; it is never committed. Without one, only profmagic is timed
and the section says so.

    .venv/bin/python bench/bench_perf_script.py [--mb 100] [--runs 3] [--flamegraph-git DIR] [--no-write]

Writes its section of bench/RESULTS.md through bench/results.py unless --no-write.
"""
from __future__ import annotations

import profmagic
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
MIRROR = os.environ.get("FLAMEGRAPH_GIT", "")
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
    out = profmagic.to_folded(p, metric="samples").encode("utf-8", errors="surrogateescape")
    return time.perf_counter() - t0, time.process_time() - c0, out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--flamegraph-git", default=MIRROR, help="a git dir of FlameGraph (default $FLAMEGRAPH_GIT)")
    ap.add_argument("--opt", action="append", default=None,
                    help="stackcollapse option to time (repeatable): none, pid, tid, kernel, jit, all, addrs")
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args(argv)
    path = os.path.join(HERE, "data", f"perf-script-{a.mb}mb.txt")
    build_input(path, a.mb)
    size = os.path.getsize(path)
    print(f"input {path}: {size / 1e6:.1f} MB")
    rows, same_all = [], True
    with tempfile.TemporaryDirectory() as td:
        script = os.path.join(td, "stackcollapse-perf.pl")
        have_perl = bool(a.flamegraph_git) and os.path.isdir(a.flamegraph_git)
        if have_perl:
            commit = stackcollapse(a.flamegraph_git, script)
            perl_v = subprocess.run(['perl', '-e', 'print $^V'], capture_output=True, text=True).stdout
            print(f"stackcollapse-perf.pl at FlameGraph {commit}; perl {perl_v}")
        else:
            commit = perl_v = None
            print("no FlameGraph git dir (--flamegraph-git or $FLAMEGRAPH_GIT): timing profmagic alone")
        for opt in a.opt or ["none"]:
            perl_opts = [] if opt == "none" else [f"--{opt}"]
            our_opts = {} if opt == "none" else {opt: True}
            tp, to, cp, co = [], [], [], []
            same = True
            for i in range(a.runs):
                # Alternate which one goes first, so drift on the shared machine hits both.
                order = [("ours", run_ours, (path, our_opts))]
                if have_perl:
                    order.append(("perl", run_perl, (script, path, perl_opts)))
                if i % 2:
                    order.reverse()
                res = {name: fn(*args) for name, fn, args in order}
                wo, xo, outo = res["ours"]
                to.append(wo)
                co.append(xo)
                msg = f"  [{opt}] run {i + 1}: profmagic {wo:.2f} s wall / {xo:.2f} s CPU ({len(outo.splitlines())} lines)"
                if have_perl:
                    wp, xp, outp = res["perl"]
                    tp.append(wp)
                    cp.append(xp)
                    same = same and outp == outo
                    msg += f", perl {wp:.2f} s wall / {xp:.2f} s CPU, identical={outp == outo}"
                print(msg)
            row = {"opt": opt, "ours": (statistics.median(to), statistics.median(co)), "lines": len(outo.splitlines())}
            if have_perl:
                row["perl"] = (statistics.median(tp), statistics.median(cp))
                same_all = same_all and same
                if not same:
                    print("OUTPUT DIFFERS", file=sys.stderr)
            rows.append(row)
    text = section(rows, a, size, commit, perl_v, same_all)
    print(text)
    if not a.no_write:
        from results import write_section
        write_section(text)
    return 0 if same_all else 1


def section(rows, a, size, commit, perl_v, same) -> str:
    mb = size / 1e6
    cmd = f".venv/bin/python bench/bench_perf_script.py --runs {a.runs}" + (f" --mb {a.mb}" if a.mb != 100 else "") + \
        "".join(f" --opt {r['opt']}" for r in rows) + (" --flamegraph-git DIR" if commit else "")
    L = ["## perf script → folded (issue 5)", "",
         '`profmagic.to_folded(perf_script.read(FILE, keep_unterminated=False), metric="samples")`'
         + (f" against FlameGraph's `perl stackcollapse-perf.pl FILE` (FlameGraph {commit[:7]}, perl {perl_v})"
            if commit else " alone (no FlameGraph checkout was given, so perl was not run)")
         + f", on a {mb:.1f} MB perf script built from the {len(INPUTS)} cpu-clock inputs of the FlameGraph corpus "
         "in tests/data/flamegraph (comments dropped, each copy with its own pids/tids; written to bench/data/, "
         f"not committed). {a.runs} run(s) each" + (", alternating which goes first" if commit else "")
         + "; our time includes reading the file and writing the folded text."
         + (f" Both outputs were byte-identical in every run: {same}." if commit else "")
         + f" {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end ({time.strftime('%Y-%m-%d')}); "
         "CPU time (user + sys) is steadier than wall time on a shared machine.", ""]
    if commit:
        L += ["| option | perl wall (median) | profmagic wall | wall ratio | perl CPU | profmagic CPU | CPU ratio | output lines |",
              "|---|---|---|---|---|---|---|---|"]
        for r in rows:
            (wp, xp), (wo, xo) = r["perl"], r["ours"]
            opt = "(none)" if r["opt"] == "none" else f"`--{r['opt']}`"
            L.append(f"| {opt} | {wp:.2f} s ({mb / wp:.1f} MB/s) | {wo:.2f} s ({mb / wo:.1f} MB/s) | {wp / wo:.2f}× | "
                     f"{xp:.2f} s | {xo:.2f} s | {xp / xo:.2f}× | {r['lines']:,} |")
    else:
        L += ["| option | profmagic wall (median) | profmagic CPU | output lines |", "|---|---|---|---|"]
        for r in rows:
            wo, xo = r["ours"]
            opt = "(none)" if r["opt"] == "none" else f"`--{r['opt']}`"
            L.append(f"| {opt} | {wo:.2f} s ({mb / wo:.1f} MB/s) | {xo:.2f} s | {r['lines']:,} |")
    L += ["", f"Command: `{cmd}`" + (" (DIR: a git clone of github:brendangregg/FlameGraph; the script is extracted "
                                     "with `git show HEAD:stackcollapse-perf.pl` to a temp dir and never committed)."
                                     if commit else ".")]
    return "\n".join(L) + "\n"


if __name__ == "__main__":
    sys.exit(main())

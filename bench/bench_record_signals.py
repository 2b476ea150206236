"""`profmagic record` killed at random moments: nothing may be left running, stopped or on disk.

Each run starts `profmagic record -b BACKEND -- COMMAND` in a session of its own, sends it one
signal at a random moment, then looks for what the run left. The moment is counted from when record
starts the command (its first child appears; record's own start-up takes ~1 s on a loaded machine,
and a signal then finds nothing started), uniform in -0.2-1.5 s: before the command starts, while
it is held for the recorder, while it runs, while the profile is read. Left: any process still in that
session (the command, a held launcher, perf, the eu-stack helper), and any temp folder named with
record's pid. Runs go a few at a time.

    .venv/bin/python bench/bench_record_signals.py [--runs 50] [--signals TERM] [--parallel 3] [--no-write]

Writes its section of bench/RESULTS.md through bench/results.py unless --no-write.
"""
from __future__ import annotations

import argparse
import glob
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

BIN = os.path.join(os.path.dirname(sys.executable), "profmagic")
# backend -> command. The sampler's command is Python (started gated, sampled from inside); eu-stack's
# and perf's is not (held stopped by the launcher until the recorder is attached). 0.8 s: a signal
# at up to 1.5 s lands before, during or after the command.
COMMANDS = {
    "sampler": [sys.executable, "-c", "import time; time.sleep(0.8)"],
    "eu-stack": ["sleep", "0.8"],
    "perf": ["sleep", "0.8"],
}


def session_processes(sid: int) -> list[tuple[int, str, str]]:
    """(pid, state, command line) of every process whose session is ``sid``."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            if int(fields[3]) != sid:
                continue
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            out.append((int(name), fields[0].decode(), cmd))
        except (OSError, IndexError, ValueError):
            continue
    return out


def folders_of(pid: int) -> list[str]:
    tmp = tempfile.gettempdir()
    return sorted(glob.glob(os.path.join(tmp, f"profmagic-{pid}-*"))
                  + glob.glob(os.path.join(tmp, f"profmagic-*-{pid}-*")))


def run_once(backend: str, sig: int, delay: float, out_dir: str, command=None) -> dict:
    """One recording sent ``sig`` ``delay`` s after it started the command (its first child): its
    status, stderr, and what it left."""
    out = os.path.join(out_dir, f"r{random.getrandbits(40):x}.speedscope.json")
    proc = subprocess.Popen([BIN, "record", "-b", backend, "-o", out, "--", *(command or COMMANDS[backend])],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    lead = 0.2   # the moments before the first child: counted back from when it appeared
    t_child, start = None, time.monotonic()
    while t_child is None and proc.poll() is None and time.monotonic() - start < 30:
        if len(session_processes(proc.pid)) > 1:
            t_child = time.monotonic()
        else:
            time.sleep(0.003)
    at = (t_child or time.monotonic()) + delay - lead
    time.sleep(max(0.0, at - time.monotonic()))
    proc.send_signal(sig)
    delay -= lead
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
        return {"backend": backend, "delay": delay, "rc": None, "stderr": "record did not end in 60 s",
                "left": session_processes(proc.pid), "folders": folders_of(proc.pid)}
    # A grandchild killed with its parent (eu-stack under the helper) may take a moment to go.
    deadline = time.monotonic() + 0.5
    while session_processes(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    left = session_processes(proc.pid)
    folders = folders_of(proc.pid)
    for pid, _, _ in left:   # clean up after a failed run, so the next ones measure only themselves
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    for f in folders:
        shutil.rmtree(f, ignore_errors=True)
    return {"backend": backend, "delay": delay, "sig": signal.Signals(sig).name, "rc": proc.returncode,
            "stderr": err.decode(errors="replace"), "left": left, "folders": folders,
            "wrote": os.path.exists(out)}


def campaign(runs: int, signals: list[int], parallel: int, backends: list[str], seed: int = 0,
             spread: float = 1.5) -> list[dict]:
    rng = random.Random(seed)
    plan = [(backends[i % len(backends)], signals[i % len(signals)], rng.uniform(0.0, spread + 0.2))
            for i in range(runs)]
    out_dir = tempfile.mkdtemp(prefix="bench-record-signals-")
    try:
        with ThreadPoolExecutor(parallel) as pool:
            return list(pool.map(lambda a: run_once(*a, out_dir), plan))
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--signals", default="TERM", help="comma-separated: TERM,INT,HUP")
    ap.add_argument("--backends", default="sampler,eu-stack,perf")
    ap.add_argument("--parallel", type=int, default=3)
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args()
    sigs = [getattr(signal, "SIG" + s.strip()) for s in a.signals.split(",")]
    backends = a.backends.split(",")
    t0 = time.monotonic()
    res = campaign(a.runs, sigs, a.parallel, backends)
    took = time.monotonic() - t0
    bad = [r for r in res if r["left"] or r["folders"] or r["rc"] is None]
    rows = []
    for b in backends:
        mine = [r for r in res if r["backend"] == b]
        rows.append(f"| {b} | {len(mine)} | {sum(1 for r in mine if r['left'])} | "
                    f"{sum(1 for r in mine if r['folders'])} | {sum(1 for r in mine if r['wrote'])} | "
                    f"{', '.join(sorted({str(r['rc']) for r in mine}))} |")
    for r in bad:
        print("LEFT:", r["backend"], f"{r['delay']:.3f}", r["rc"], r["left"], r["folders"], r["stderr"][-300:])
    text = "\n".join([
        "## `record` killed at random moments (issue 28)",
        "",
        f"`bench/bench_record_signals.py --runs {a.runs} --signals {a.signals} --parallel {a.parallel}`: "
        f"each run sent SIG{a.signals} once, at a uniform random moment from 0.2 s before record starts "
        "the command to 1.5 s after; then every process "
        "of the run's session and every temp folder named with record's pid was looked for. The command "
        "sleeps 0.8 s (Python for the sampler, `sleep` for eu-stack and perf).",
        "",
        "| backend | runs | left a process | left a folder | wrote a profile | exit statuses |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
        f"{len(res) - len(bad)} of {len(res)} runs left nothing; {took:.0f} s in all.",
    ])
    print(text)
    if not a.no_write:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from results import write_section
        print("wrote", write_section(text))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

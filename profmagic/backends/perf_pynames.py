"""Python names for perf on an interpreter perf cannot name (3.11; 3.12+ without its trampoline).

perf unwinds a Python thread's C stack through ``_PyEval_EvalFrameDefault`` frames only. While perf
records, this poller, a process of its own (``python .../backends/perf_pynames.py --pid PID --rate
HZ --out FILE``, run as a script: standard library only), reads the target's Python stacks from its
memory with ``pyframes.py`` at the sampling rate: no ptrace stop, the target runs on. Each thread's
read is stamped with CLOCK_MONOTONIC before and after it, the clock perf stamps its events with
(``-k CLOCK_MONOTONIC``). The recorder (``perf.py``) starts it before perf, so that perf, which follows
the target's new children, does not record it; stops it by closing its stdin (the poller also ends
when the target is gone, or when the recorder is: its stdin ends then too); and appends what it wrote
to the capture (``formats/perf_pyframes.py`` reads and splices it). Its output, in ``#`` lines that
``perf script`` readers skip::

    # profmagic pyframes pid=PID rate=HZ version=3.11 reads=N read_ms=MEAN [failed=N last_failure=Q] [error=Q]
    # pystack ID GROUPS            (groups as eu-stack's helper writes them: | between eval-loop
                                     calls, ; between frames, innermost first, quote(qualname):quote(file):line)
    # py T0 TID:ID:D0:D1 ...       (one read: T0 CLOCK_MONOTONIC seconds; each thread's read from
                                     T0+D0 to T0+D1 microseconds; ID 0 = no Python frame)
"""
from __future__ import annotations

import os
import select
import signal
import struct
import sys
import time
from urllib.parse import quote

if __package__:
    from .pyframes import PyFrames, encode_groups
else:  # run as a script by the recorder: its own folder is on sys.path
    from pyframes import PyFrames, encode_groups

HEADER = "# profmagic pyframes"
MAX_RATE = 1000.0   # Hz: reads cost 0.1-0.6 ms each here


def poll(pid: int, rate: float, out, stop_fd: int) -> None:
    """Read ``pid``'s Python stacks every 1/rate s into ``out`` until ``stop_fd`` is readable (EOF)
    or the target is gone."""
    py = PyFrames(pid)
    interval = 1.0 / min(max(rate, 1.0), MAX_RATE)
    ids: dict[str, int] = {"": 0}
    reads, spent, failed, last_error = 0, 0.0, 0, ""
    body = []
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    next_t = time.monotonic()
    try:
        while py.error is None:
            t0 = time.monotonic()
            entries = []
            try:
                threads = py.threads()
            except (OSError, ValueError, struct.error) as e:   # the target exiting, or a list changing while read
                failed, last_error = failed + 1, str(e)
                threads = {}
            for tid, ts in threads.items():
                a = time.monotonic()
                try:
                    groups = py.stack(ts)
                except (OSError, ValueError, struct.error, UnicodeDecodeError, KeyError):
                    continue   # the thread moved while read: no snapshot of it this time
                b = time.monotonic()
                key = encode_groups(groups)
                sid = ids.get(key)
                if sid is None:
                    sid = ids[key] = len(ids)
                    body.append(f"# pystack {sid} {key}\n")
                entries.append(f"{tid}:{sid}:{round((a - t0) * 1e6)}:{round((b - t0) * 1e6)}")
            if entries:
                body.append(f"# py {t0:.6f} {' '.join(entries)}\n")
            reads += 1
            spent += time.monotonic() - t0
            out.writelines(body)   # each read as it is made: a poller killed keeps what it read
            out.flush()
            body.clear()
            next_t += interval
            now = time.monotonic()
            if next_t < now:
                next_t = now   # late (a loaded machine): no burst to catch up
            r, _, _ = select.select([stop_fd], [], [], next_t - now)
            if r or not os.path.exists(f"/proc/{pid}"):
                break
    finally:
        out.writelines(body)
        version = f"{py.version[0]}.{py.version[1]}" if py.version else "?"
        out.write(f"{HEADER} pid={pid} rate={1 / interval:g} version={version} reads={reads} "
                  f"read_ms={(spent / reads * 1e3 if reads else 0):.3f}"
                  + (f" failed={failed} last_failure={quote(last_error, safe='')}" if failed else "")
                  + (f" error={quote(py.error, safe='')}" if py.error else "") + "\n")
        py.close()


def main(argv: list[str]) -> int:
    args = dict(zip(argv[::2], argv[1::2]))
    with open(args["--out"], "w") as out:
        poll(int(args["--pid"]), float(args["--rate"]), out, sys.stdin.fileno())
    return 0


class Poller:
    """The recorder's side: start the poller before perf, stop it after, the section for the capture."""

    READY_TIMEOUT = 10.0

    def __init__(self, pid: int, rate: float, out: str):
        self.pid, self.rate, self.out = pid, rate, out
        self.proc = None

    def start(self) -> str | None:
        """Start polling; None when it runs, else why it could not."""
        import subprocess
        from .. import interrupts
        from .base import OWN_GROUP, allow_tracer, reap
        with interrupts.deferred():   # a Ctrl-C between the start and the assignment would orphan it
            self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--pid", str(self.pid),
                                          "--rate", str(self.rate), "--out", self.out],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                         **OWN_GROUP)
        if self.pid == os.getpid():
            allow_tracer(self.proc.pid)   # Yama ptrace_scope=1: reading a parent's memory needs it
        deadline = time.monotonic() + self.READY_TIMEOUT
        line = b""
        while time.monotonic() < deadline and self.proc.poll() is None:
            r, _, _ = select.select([self.proc.stdout], [], [], 0.1)
            if r:
                line = self.proc.stdout.readline()
                break
        if line.strip() == b"ready":
            return None
        rc = self.proc.poll()
        reap(self.proc, signal.SIGKILL)
        self.proc = None
        return ("the Python stack poller did not start: "
                + (f"it exited with status {rc}" if rc is not None else f"no ready signal in {self.READY_TIMEOUT:g} s"))

    def stop(self) -> bytes:
        """Stop polling; the capture's section (header first; one the poller did not write says so)."""
        import subprocess
        from .base import reap
        if self.proc is None:
            return b""
        try:
            self.proc.stdin.close()   # EOF: the poller writes what it has and exits
        except OSError:
            pass
        try:
            self.proc.wait(30.0)
        except subprocess.TimeoutExpired:
            pass   # reap's SIGINT ends it (its reads in a finally: still written)
        rc = reap(self.proc)
        self.proc = None
        try:
            with open(self.out, "rb") as f:
                text = f.read()
        except OSError:
            text = b""
        lines = text.split(b"\n")[:-1]   # (a line cut by a kill has no newline: dropped)
        heads = [ln for ln in lines if ln.startswith(HEADER.encode())]
        body = [ln for ln in lines if not ln.startswith(HEADER.encode())]
        header = heads[-1] if heads else (f"{HEADER} pid={self.pid} rate={self.rate:g} error="
                                          + quote(f"the poller ended without its summary (exit {rc})", safe="")).encode()
        return b"\n" + b"\n".join([header] + body) + b"\n"

    def close(self) -> None:
        from .base import reap
        if self.proc is not None:
            reap(self.proc, timeout=2.0)
            self.proc = None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

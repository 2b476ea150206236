"""py-spy attached to a running Python process (the kernel), out of process.

py-spy 0.4: ``record --pid`` prints "Sampling process ..." on stdout once it has attached, stops
and writes its file on SIGINT (SIGTERM writes none), and names each speedscope profile
``Thread <native tid> "<name>"``. Without ``--idle`` it drops samples of threads it sees as idle,
so its weights approximate CPU time; with ``--idle`` they are wall time.
"""
from __future__ import annotations

import ctypes
import os
import select
import shutil
import signal
import subprocess
import sys
import time

from ..errors import ProfilerError
from .base import OWN_GROUP, Capture, Options, TempDir, ptrace_scope, reap

NAME = "py-spy"
PR_SET_PTRACER = 0x59616D61
READY = b"Sampling process"
START_TIMEOUT = 20.0
MIN_RUN = 0.05


def binary() -> str | None:
    """``$PROFMAGIC_PYSPY`` when set (None if it is not executable), else py-spy next to the running
    interpreter (the venv), then on PATH."""
    chosen = os.environ.get("PROFMAGIC_PYSPY")
    if chosen:
        return chosen if os.access(chosen, os.X_OK) else None
    here = os.path.join(os.path.dirname(sys.executable), "py-spy")
    if os.access(here, os.X_OK):
        return here
    return shutil.which("py-spy")


def available() -> tuple[bool, str]:
    if not sys.platform.startswith("linux"):
        return False, "profmagic drives py-spy on Linux only; use --backend sampler"
    exe = binary()
    if exe is None:
        return False, "py-spy is not installed (pip install py-spy); or use --backend sampler"
    scope = ptrace_scope()
    if scope is not None and scope >= 2 and os.geteuid() != 0:
        return False, (f"Yama ptrace_scope is {scope}: py-spy may not attach to this kernel. Fix: "
                       "`echo 1 | sudo tee /proc/sys/kernel/yama/ptrace_scope`; or use --backend sampler")
    return True, f"py-spy at {exe}"


def version() -> str | None:
    exe = binary()
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.decode(errors="replace").strip().removeprefix("py-spy ").strip() or None


def allow_tracer(pid: int) -> bool:
    """Let ``pid`` ptrace this process under Yama ptrace_scope 1 (a child may not trace its parent)."""
    if ptrace_scope() != 1:
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PTRACER, ctypes.c_ulong(pid), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def attach_help(stderr: str, pid: int | None = None) -> str:
    scope = ptrace_scope()
    pid = os.getpid() if pid is None else pid
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip() and "backtrace" not in ln.lower()]
    cause = lines[0].strip() if lines else "py-spy exited before sampling"
    if not os.path.exists(f"/proc/{pid}"):
        return (f"py-spy could not attach to process {pid}: {cause}\n"
                f"Cause: process {pid} does not exist (it exited, or the pid is wrong).\n"
                "Fix: give the pid of a running Python process; or use --backend sampler in that process.")
    return (f"py-spy could not attach to process {pid}: {cause}\n"
            f"Cause: reading another process's memory needs ptrace permission: py-spy must run as the same "
            f"user as the process, or with CAP_SYS_PTRACE "
            f"(Yama ptrace_scope={scope if scope is not None else 'n/a'}; in Docker, the SYS_PTRACE capability).\n"
            "Fix: run py-spy as the kernel's user, run the container with `--cap-add SYS_PTRACE`, or set "
            "`echo 0 | sudo tee /proc/sys/kernel/yama/ptrace_scope`.\n"
            "Way out: `%%profile --backend sampler` needs no ptrace.")


class Recorder:
    def __init__(self, options: Options):
        self.options = options
        self.tmp: TempDir | None = None
        self.proc: subprocess.Popen | None = None
        self.output: str | None = None
        self.status = b""
        self.ready_at = 0.0

    def command(self) -> list[str]:
        o = self.options
        cmd = [binary() or "py-spy", "record", "--pid", str(o.pid), "-f", "speedscope",
               "-r", str(max(1, int(round(o.rate)))), "-o", self.output, "--full-filenames"]
        if o.gil:
            cmd.append("--gil")
        elif o.idle:
            cmd.append("--idle")
        if o.native:
            cmd.append("--native")      # only in blocking mode
        else:
            cmd.append("--nonblocking")
        if o.subprocesses:
            cmd.append("--subprocesses")
        return cmd

    def start(self) -> None:
        if binary() is None:
            raise ProfilerError("py-spy is not installed: `pip install py-spy`; or use --backend sampler")
        self.tmp = TempDir()
        self.output = self.tmp.file("py-spy.speedscope.json")
        self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, **OWN_GROUP)
        allow_tracer(self.proc.pid)
        self._wait_ready()

    def _wait_ready(self) -> None:
        """Block until py-spy says it samples (it has attached), or fail with its own words.

        Read with select, not a helper thread: py-spy caches thread names by pthread id, and a
        short-lived thread of ours would lend its name to the next thread the cell starts."""
        fd = self.proc.stdout.fileno()
        line = b""
        deadline = time.monotonic() + START_TIMEOUT
        while b"\n" not in line:
            left = deadline - time.monotonic()
            if left <= 0:
                reap(self.proc, signal.SIGKILL)
                raise ProfilerError(f"py-spy did not start sampling within {START_TIMEOUT:.0f} s; "
                                    "use --backend sampler")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 4096)
                if not chunk:
                    break
                line += chunk
        self.status = line
        if READY in line:
            self.ready_at = time.monotonic()
            return
        try:
            self.proc.wait(2)  # it is exiting: read its stderr before reap() closes the pipe
        except subprocess.TimeoutExpired:
            pass
        err = self.proc.stderr.read().decode(errors="replace") if self.proc.poll() is not None else ""
        reap(self.proc, signal.SIGKILL)
        raise ProfilerError(attach_help(err or line.decode(errors="replace"), self.options.pid))

    def stop(self) -> Capture:
        proc, self.proc = self.proc, None
        if proc is None:
            raise ProfilerError("py-spy was not started")
        # py-spy installs its SIGINT handler just after saying it samples; a SIGINT before that kills
        # it without a file. Give it that moment (only a cell shorter than MIN_RUN waits).
        wait = self.ready_at + MIN_RUN - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            reap(proc, signal.SIGKILL)
            raise ProfilerError("py-spy did not stop within 30 s of SIGINT") from None
        finally:
            reap(proc)
        msg = (err or out).decode(errors="replace").strip()
        if proc.returncode is not None and proc.returncode < 0:
            sig = signal.Signals(-proc.returncode)
            raise ProfilerError(f"py-spy was killed by {sig.name} ({signal.strsignal(sig)}) before it wrote "
                                "a complete profile; this cell's profile is lost. Fix: run the cell again (and "
                                "check `ulimit -f` and what else kills processes here); or use --backend sampler")
        if proc.returncode or not self.output or not os.path.exists(self.output):
            raise ProfilerError(f"py-spy could not write its profile (exit {proc.returncode}): {msg[-500:]}. "
                                f"Fix: check free space and write access in {os.path.dirname(self.output)} "
                                "(set TMPDIR elsewhere); or use --backend sampler, which writes no file")
        with open(self.output, "rb") as f:
            data = f.read()
        return Capture(data, "speedscope", {"status": (self.status + out).decode(errors="replace"),
                                            "exit": proc.returncode})

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            reap(proc)
        if self.tmp is not None:
            self.tmp.close()
            self.tmp = None


def read(capture: Capture, options: Options):
    from ..formats import speedscope
    wall = options.idle and not options.gil
    metric = "wall" if wall else "cpu"
    p = speedscope.read(capture.data, source="py-spy", metric=metric)
    meta = dict(p.meta)
    meta.update(backend=NAME, metric=metric, rate=float(options.rate), requested_rate=float(options.rate),
                versions={"py-spy": version()}, pid=options.pid,
                py_spy_flags={"idle": options.idle, "gil": options.gil, "native": options.native,
                              "subprocesses": options.subprocesses})
    if options.gil:
        meta["metric_note"] = ("--gil: only samples holding the GIL; weights approximate the GIL-holding "
                               "time (1/rate each)")
    elif not wall:
        meta["metric_note"] = ("py-spy without --idle drops samples of threads it sees as idle, so its "
                               "weights approximate CPU time (1/rate each)")
    # A capture without samples has no time column: keep the reader's metric then.
    return p.replace(meta=meta, metric=metric if metric in p.metrics else p.metric)

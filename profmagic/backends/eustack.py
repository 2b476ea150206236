"""eu-stack (elfutils) as a wall-clock sampler of every thread, native threads included.

The recorder starts the helper process (``backends/eustack_helper.py``), which snapshots the target
with ``eu-stack`` in a loop; on stop it sends SIGINT and reads the sampled capture the helper wrote.
"""
from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from urllib.parse import quote

from .. import procfs
from ..errors import ProfilerError
from ..tempdirs import TempDir
from .base import OWN_GROUP, Capabilities, Capture, Options, allow_tracer, ptrace_scope, reap, tool_version

NAME = "eu-stack"
CAPS = Capabilities(clocks=("wall", "cpu"), weights="measured", inside=False, attach=True, streams=True,
                    threads="all", native=True)
FORMAT = "eu-stack"
READY_TIMEOUT = 30.0


def available() -> tuple[bool, str]:
    missing = [t for t in ("eu-stack", "eu-addr2line") if shutil.which(t) is None]
    if missing:
        return False, (f"{' and '.join(missing)} not found. Fix: install elfutils "
                       "(apt-get install elfutils, dnf install elfutils).")
    scope = ptrace_scope()
    if scope == 3:
        return False, ("ptrace is disabled (/proc/sys/kernel/yama/ptrace_scope = 3), so eu-stack cannot "
                       "attach. Fix: reboot with a lower ptrace_scope; or use --backend perf.")
    if scope == 2 and os.geteuid() != 0:
        return False, ("ptrace needs CAP_SYS_PTRACE (/proc/sys/kernel/yama/ptrace_scope = 2). Fix: run as "
                       "root, or `sysctl kernel.yama.ptrace_scope=1`; in Docker add --cap-add SYS_PTRACE.")
    return True, "eu-stack " + _version()


def _version() -> str:
    return tool_version(["eu-stack", "--version"], r"(\d+\.\d+)") or "?"


def python_threads(pid: int) -> dict[int, str]:
    """native id -> thread name for the Python threads of ``pid``, when it is this process."""
    if pid != os.getpid():
        return {}
    return {t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}

STOP_TIMEOUT = 120.0   # seconds the helper may take to resolve addresses once stopped


class Recorder:
    def __init__(self, options: Options):
        self.options = options
        self.tmp = TempDir("profmagic-eustack-")
        self.out = self.tmp.file("capture.txt")
        self.proc: subprocess.Popen | None = None
        self.py_threads: dict[int, str] = {}
        self.started = None

    def start(self) -> None:
        ok, reason = available()
        if not ok:
            raise ProfilerError(reason)
        o = self.options
        self.py_threads = python_threads(o.pid)
        self.py_threads.update({int(k): v for k, v in o.extra.get("python_threads", {}).items()})
        # Run as a script, not as part of the package: importing profmagic (pandas) took the helper
        # 2-4 s on a loaded machine before its first snapshot.
        helper = os.path.join(os.path.dirname(os.path.abspath(__file__)), "eustack_helper.py")
        self.proc = subprocess.Popen(
            [sys.executable, helper, "--pid", str(o.pid),
             "--rate", str(o.rate), "--out", self.out] + (["--wait-exec"] if o.extra.get("wait_exec") else []),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
            **OWN_GROUP)
        if o.pid == os.getpid() and ptrace_scope() == 1:
            allow_tracer(self.proc.pid)   # Yama ptrace_scope=1: the helper may trace its parent
        # Wait for the helper's first snapshot: only then is it really sampling.
        line = b""
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            r, _, _ = select.select([self.proc.stdout], [], [], 0.2)
            if r:
                line = self.proc.stdout.readline()
                break
            if self.proc.poll() is not None:
                break
        if line.strip() != b"ready":
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            err = self.proc.stderr.read().decode(errors="replace").strip()
            reap(self.proc)
            raise ProfilerError(f"eu-stack could not sample pid {o.pid}: {err or 'no ready signal in time'}. "
                                "Fix: run as root or let this process be traced (ptrace_scope, "
                                "--cap-add SYS_PTRACE in Docker); or use --backend py-spy.")
        self.started = time.time()

    def stop(self) -> Capture:
        if self.proc is None:
            raise ProfilerError("eu-stack recorder was not started")
        self.py_threads.update(python_threads(self.options.pid))
        self.proc.send_signal(signal.SIGINT)
        rc, err = self._wait_helper()
        reap(self.proc, signal.SIGKILL)
        if rc != 0 or not os.path.exists(self.out):
            raise ProfilerError(f"the eu-stack sampler failed (exit {rc}): {err.strip()[-2000:]}")
        with open(self.out, "rb") as f:
            data = f.read()
        first, _, rest = data.partition(b"\n")
        names = " ".join(f"{tid}={quote(name, safe='')}" for tid, name in sorted(self.py_threads.items()))
        data = first + b"\n# python-threads " + names.encode() + b"\n" + rest
        meta = {"backend": NAME, "pid": self.options.pid, "requested_rate": self.options.rate,
                "python_threads": dict(self.py_threads), "version": _version()}
        return Capture(data, FORMAT, meta)

    def _wait_helper(self) -> tuple[int | None, str]:
        """The helper's exit status and stderr. It resolves addresses before it exits (up to
        STOP_TIMEOUT s); a helper that was stopped (SIGSTOP) is not waited for."""
        deadline, stopped_since = time.monotonic() + STOP_TIMEOUT, None
        while time.monotonic() < deadline:
            try:
                rc = self.proc.wait(0.25)
                return rc, self.proc.stderr.read().decode(errors="replace")
            except subprocess.TimeoutExpired:
                pass
            if procfs.process_state(self.proc.pid) == "T":
                stopped_since = stopped_since or time.monotonic()
                if time.monotonic() - stopped_since > 2.0:
                    return None, "the eu-stack helper was stopped (SIGSTOP) and did not finish"
            else:
                stopped_since = None
        return None, f"the eu-stack helper did not finish in {STOP_TIMEOUT:g} s"

    def close(self) -> None:
        if self.proc is not None:
            reap(self.proc, signal.SIGKILL, timeout=5)
            for s in (self.proc.stdout, self.proc.stderr):
                if s is not None and not s.closed:
                    s.close()
        self.tmp.close()


def read(capture: Capture, options: Options | None = None):
    from ..formats import eu_stack
    keep = bool(options and options.extra.get("keep_interpreter_frames"))
    meta = {k: v for k, v in capture.meta.items() if k != "python_threads"}
    return eu_stack.read(capture.data, source="eu-stack capture", fold=not keep, meta={**meta, "backend": NAME})




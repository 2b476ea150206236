"""The recorder interface every backend implements.

A backend module (``backends/<tool>.py``) exposes:

- ``NAME``: the ``--backend`` value (``"py-spy"``, ``"sampler"``, ...).
- ``available() -> (ok: bool, reason: str)``: can it record here? The reason names the cause
  and the fix when it cannot.
- ``Recorder(options: Options)``: ``start()`` returns only once the profiler is really sampling;
  ``stop() -> Capture`` ends recording and returns what the profiler wrote; ``close()`` reaps
  every child and deletes every temp file, is idempotent, and is always called (in a
  ``finally``), on success, on error and on KeyboardInterrupt.
- ``read(capture: Capture, options: Options) -> Profile``: the capture through its format's
  reader, with the backend's own meta (rate, metric, versions...).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field


@dataclass
class Options:
    """What the user asked for, plus where the cell runs."""
    rate: float = 100.0
    idle: bool = False
    native: bool = False
    gil: bool = False
    mode: str = "wall"            # wall | cpu | both
    subprocesses: bool = False
    all_threads: bool = False
    pid: int = field(default_factory=os.getpid)          # the process to profile (the kernel)
    thread_native_id: int = field(default_factory=threading.get_native_id)  # the thread that runs the cell
    thread_ident: int = field(default_factory=threading.get_ident)
    cell_filename: str | None = None                      # the file the cell was compiled under
    extra: dict = field(default_factory=dict)             # backend-specific options


@dataclass
class Capture:
    """What a profiler wrote: bytes (or a path for large files) and their format name."""
    data: bytes | None
    format: str
    meta: dict = field(default_factory=dict)
    path: str | None = None


class TempDir:
    """A private temp directory that is removed on close(), whatever it holds."""

    def __init__(self, prefix: str = "profmagic-"):
        self.path = tempfile.mkdtemp(prefix=prefix)

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def close(self) -> None:
        if self.path and os.path.exists(self.path):
            shutil.rmtree(self.path, ignore_errors=True)
        self.path = None


# Popen options for a profiler child: its own process group, so the user's interrupt (SIGINT to the
# kernel's process group) does not reach it; but the kernel's session, not a new one: with
# autogroup scheduling a new session is a new CPU group, and on this kernel (6.18) such a group
# got 7 ms of CPU in 5 s while six CPU-bound threads ran elsewhere, so the profiler never started.
OWN_GROUP = {"process_group": 0}


def ptrace_scope() -> int | None:
    """Yama's ptrace_scope (0-3), or None where Yama is absent."""
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def reap(proc: subprocess.Popen | None, sig: int = signal.SIGINT, timeout: float = 5.0) -> int | None:
    """Stop a child with ``sig``, escalate to SIGKILL after ``timeout``, and always wait for it."""
    if proc is None:
        return None
    if proc.poll() is None:
        try:
            proc.send_signal(sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for stream in (proc.stdout, proc.stderr, proc.stdin):
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass
    return proc.returncode


# Thread labels: formats and transforms use them too.
from ..threads import thread_label, thread_native_id  # noqa: E402,F401

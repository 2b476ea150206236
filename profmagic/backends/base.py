"""The recorder interface every backend implements, and what a backend declares about itself.

A backend module (``backends/<tool>.py``) exposes:

- ``NAME``: the ``--backend`` value (``"py-spy"``, ``"sampler"``, ...).
- ``CAPS``: its ``Capabilities``: which clocks it measures, how its samples are weighted, where
  it runs, whether it can attach and whether it streams samples. ``session`` reads these (and
  ``defaults`` decides the clock and timing from them); nothing compares backend names.
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
import signal
import subprocess
import threading
from dataclasses import InitVar, dataclass, field
from typing import Mapping

from .. import interrupts

MODES = ("wall", "cpu", "both")


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do. ``clocks``: the clocks one run can measure (``both`` needs two);
    ``unmeasured``: clock -> why it cannot measure it; ``weights``: "measured" (each sample carries
    the time it stands for) or "nominal" (1/rate per sample, calibrated to the cell's measured
    time); ``inside``: it runs in the profiled process (else it records it from outside);
    ``attach``: it can record another running process; ``streams``: samples exist during the run;
    ``threads``: which threads it sees ("python", "all", or "cell": the cell's thread only);
    ``one_clock_per_run``: both clocks need two runs of the code (``--rerun``); ``both_excludes``:
    options that cannot be combined with both clocks in one run (option -> why). A backend with no
    ``clocks`` (memray) measures memory, not time: it has no rate and no mode."""
    clocks: tuple = ("wall", "cpu")
    unmeasured: Mapping = field(default_factory=dict)
    weights: str = "measured"
    inside: bool = False
    attach: bool = False
    streams: bool = False
    threads: str = "python"
    one_clock_per_run: bool = False
    native: bool = False          # names native (C/C++) frames
    default: str | None = None    # the mode without --mode, when not both clocks (see default_mode)
    awaits: bool = False          # samples a suspended coroutine chain itself (see awaits.py)
    both_excludes: Mapping = field(default_factory=dict)
    forks: bool = False           # records forked children itself under --subprocesses (memray's follow_fork)


def default_mode(caps: Capabilities, options: "Options") -> str:
    """The clock when none was asked for: both where one run measures both, else the one it has."""
    if options.gil:
        return "cpu"
    if caps.default:
        return caps.default
    excluded = any(getattr(options, k, False) for k in caps.both_excludes)
    if len(caps.clocks) >= 2 and not caps.one_clock_per_run and not excluded:
        return "both"
    return "wall" if "wall" in caps.clocks and "wall" not in caps.unmeasured else caps.clocks[0]


TARGETS = ("cell", "pids", "command")


def defaults(module, target: str, options: "Options", auto: bool = False) -> tuple[str | None, str | None]:
    """(mode, timing) for a recording of ``target``, where ``options`` asks for none: the one place
    they are decided, from the backend's capabilities. A backend with no clock (memray): (None, None).

    - "cell" (code in this process): both clocks where one run measures both (``default_mode``); the
      timing is left to the backend (py-spy: timed above its TIMED_ABOVE Hz, else calibrated to the
      cell's measured clocks).
    - "pids" (running processes): wall time (py-spy's ``--idle``), or the backend's own default
      (perf: cpu-clock).
    - "command" (``record -- cmd``): as a cell without --gil; perf chosen by auto records both where
      its scheduler tracepoints are allowed (``offcpu_available()``: a command that sleeps has wall
      time to show).

    Without a cell to calibrate to, processes and commands are timed (each sample weighs the time to
    the next), or calibrated (1/rate a sample) when the clock is cpu."""
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; one of {', '.join(TARGETS)}")
    caps = module.CAPS
    asked = options.extra.get("timing")
    if not caps.clocks:   # memory, not time: there is no clock to choose
        return None, asked
    mode = options.mode
    if mode is None:
        if target == "pids":
            mode = caps.default or "wall"
        elif target == "command":
            both = getattr(module, "offcpu_available", None)
            mode = "both" if auto and both is not None and both()[0] else default_mode(caps, Options(gil=False))
        else:
            mode = default_mode(caps, options)
    if target == "cell":
        return mode, asked
    return mode, asked or ("calibrated" if mode == "cpu" else "timed")


@dataclass
class Options:
    """What the user asked for, plus where the cell runs. ``idle`` is py-spy's spelling of the
    clock: True means ``mode="wall"``, False ``mode="cpu"``."""
    rate: float = 100.0
    native: bool = False
    gil: bool = False
    mode: str | None = "wall"     # wall | cpu | both; None: the backend's default_mode
    subprocesses: bool = False
    all_threads: bool = False
    system: bool = False          # perf --mode both: record every CPU's wakeups (another process's waker)
    pid: int = field(default_factory=os.getpid)          # the process to profile (the kernel)
    thread_native_id: int = field(default_factory=threading.get_native_id)  # the thread that runs the cell
    thread_ident: int = field(default_factory=threading.get_ident)
    cell_filename: str | None = None                      # the file the cell was compiled under
    extra: dict = field(default_factory=dict)             # backend-specific options
    idle: InitVar[bool | None] = None

    def __post_init__(self, idle):
        if idle is not None:
            self.mode = "wall" if idle else "cpu"

    @property
    def wall(self) -> bool:
        """Samples of waiting threads count (py-spy's --idle): wall time or both clocks."""
        return self.mode in ("wall", "both")


@dataclass
class Capture:
    """What a profiler wrote: bytes (or a path for large files) and their format name."""
    data: bytes | None
    format: str
    meta: dict = field(default_factory=dict)
    path: str | None = None


# Popen options for a profiler child: its own process group, so the user's interrupt (SIGINT to the
# kernel's process group) does not reach it; but the kernel's session, not a new one: with
# autogroup scheduling a new session is a new CPU group, and on this kernel (6.18) such a group
# got 7 ms of CPU in 5 s while six CPU-bound threads ran elsewhere, so the profiler never started.
OWN_GROUP = {"process_group": 0}


PR_SET_PTRACER = 0x59616D61


def allow_tracer(pid: int) -> bool:
    """Let ``pid`` ptrace this process under Yama ptrace_scope 1 (a child may not trace its parent)."""
    if ptrace_scope() != 1:
        return False
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PTRACER, ctypes.c_ulong(pid), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def tool_version(argv: list[str], pattern: str = r"(\d+\.\d+\S*)") -> str | None:
    """A profiler's version from ``argv`` (``["perf", "--version"]``): the first match of ``pattern``."""
    import re
    try:
        with interrupts.deferred():   # on Ctrl-C, subprocess.run leaves a killed child unreaped
            out = subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(pattern, out)
    return m.group(1) if m else None


def ptrace_scope() -> int | None:
    """Yama's ptrace_scope (0-3), or None where Yama is absent."""
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def reap(proc: subprocess.Popen | None, sig: int = signal.SIGINT, timeout: float = 5.0) -> int | None:
    """Stop a child with ``sig``, escalate to SIGKILL after ``timeout``, and always wait for it (a
    Ctrl-C meanwhile is raised once it was waited for: no zombie, no orphan)."""
    if proc is None:
        return None
    with interrupts.deferred():
        return _reap(proc, sig, timeout)


def _reap(proc: subprocess.Popen, sig: int, timeout: float) -> int | None:
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


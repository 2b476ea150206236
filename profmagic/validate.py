"""Every option a user gives, checked in one place before anything runs. Each check returns the
clean value or raises ProfilerError with the message docs/errors.md gives for it."""
from __future__ import annotations

import math
import os
import shlex
import stat
import tempfile

from .errors import ProfilerError

MAX_RATE = 10_000.0   # Hz: above this no backend keeps up (perf reached about 62 kHz for 1e9 asked)


def _number(value, what: str) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ProfilerError(f"{what} must be a number, got {value!r}") from None
    return x


def mode(value) -> str | None:
    """wall, cpu or both (None: the backend's default)."""
    if value is not None and value not in ("wall", "cpu", "both"):
        raise ProfilerError(f"unknown --mode {value!r}; choose one of: wall, cpu, both")
    return value


TIMINGS = ("timed", "calibrated")


def timing(value) -> str | None:
    """How py-spy's seconds are made: timed (its timestamps) or calibrated (to the cell's measured time)."""
    if value is not None and value not in TIMINGS:
        raise ProfilerError(f"unknown --timing {value!r}; choose one of: {', '.join(TIMINGS)}")
    return value


def rate(value) -> float:
    """Samples per second: finite, positive, at most MAX_RATE."""
    x = _number(value, "--rate")
    if not math.isfinite(x) or x <= 0 or x > MAX_RATE:
        raise ProfilerError(f"--rate must be a number of samples per second above 0 and at most {MAX_RATE:g}, "
                            f"got {value!r}")
    return x


def duration(value) -> float | None:
    """Seconds to record (None: until interrupted): finite and positive."""
    if value is None:
        return None
    x = _number(value, "--duration")
    if not math.isfinite(x) or x <= 0:
        raise ProfilerError(f"--duration must be a number of seconds above 0, got {value!r}")
    return x


def memory(backend: str, memory: bool, leaks: bool, allocated: bool, mode: str | None = None,
           pid=None, backends=None, exact: bool = False) -> None:
    """The memray options: --memory goes with a time backend, --leaks, --allocated and --memory-exact
    with memray."""
    memray = backend == "memray"
    if memory and memray:
        raise ProfilerError("--memory records time beside memory: give it a time backend (--backend sampler "
                            "--memory), or drop --memory: --backend memray records memory alone")
    for flag, on in (("leaks", leaks), ("allocated", allocated), ("memory-exact", exact)):
        if on and not (memray or memory):
            raise ProfilerError(f"--{flag} is a memray option: add --memory (time beside memory) or use "
                                "--backend memray")
    if memray and mode is not None:
        raise ProfilerError(f"--mode {mode} chooses a clock, and memray records memory, not time: drop --mode, "
                            "or record time beside memory with a time backend and --memory")
    if (memory or memray) and (pid is not None or backends is not None):
        raise ProfilerError(f"{'--memory' if memory else '--backend memray'} records the code of this cell "
                            f"in this process: it does not go with {'--pid' if pid is not None else '--backends'}")


def pids(text) -> list[int]:
    """``"1234,5678"`` / ``[1234, "5678"]`` -> [1234, 5678]: positive, distinct, running."""
    items = text.replace(",", " ").split() if isinstance(text, str) else list(text)
    try:
        out = [int(x) for x in items]
    except (TypeError, ValueError):
        raise ProfilerError(f"--pid takes process ids separated by commas, e.g. 1234,5678; got {text!r}") from None
    if not out:
        raise ProfilerError("--pid needs at least one process id")
    bad = [p for p in out if p <= 0]
    if bad:
        raise ProfilerError(f"--pid takes process ids above 0, got {bad[0]}")
    return list(dict.fromkeys(out))


def unquote(text: str) -> str:
    """A path as IPython's own quoting gives it: ``"/tmp/x y.json"`` -> ``/tmp/x y.json``."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        try:
            parts = shlex.split(text)
        except ValueError:
            return text
        if len(parts) == 1:
            return parts[0]
    return text


def output(path) -> str | None:
    """Where to write the profile: an absolute path in a folder that exists, not a FIFO or device."""
    if path is None:
        return None
    path = unquote(os.fspath(path))
    if not os.path.isabs(path):
        try:
            here = os.getcwd()
        except OSError:
            raise ProfilerError(f"--output {path}: the working directory no longer exists, so a relative path "
                                "has no place. Fix: give an absolute path (or os.chdir to a folder that exists)") from None
        path = os.path.join(here, path)
    folder = os.path.dirname(path)
    if not os.path.isdir(folder):
        raise ProfilerError(f"--output {path}: the folder {folder} does not exist. Fix: create it, or choose "
                            "another --output")
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return path
    if not stat.S_ISREG(mode):
        raise ProfilerError(f"--output {path}: not a regular file (a FIFO, device or folder); profmagic writes "
                            "only regular files. Fix: choose another --output")
    return path


def tmpdir() -> str:
    """The temporary folder recorders write to, when it exists and is writable."""
    where = os.environ.get("TMPDIR")
    if not where:
        try:
            where = tempfile.gettempdir()
        except OSError:   # no usable temporary folder at all
            where = "/tmp"
    if not os.path.isdir(where) or not os.access(where, os.W_OK | os.X_OK):
        raise ProfilerError(f"the temporary folder {where} (TMPDIR) does not exist or is not writable, and the "
                            "profiler writes its files there. Fix: set TMPDIR to a writable folder "
                            "(os.environ['TMPDIR'] = '/tmp' and tempfile.tempdir = None)")
    return where

"""Memory beside time (``--memory``): ``TimeAndMemory`` runs another backend's recorder and a memory
recorder in one run (profmagic's sampled tracker by default, backends/memsample.py; memray, backends/
memray.py, with --memory-exact, --allocated, --leaks or --native), and ``read_both`` puts both into one
Profile (``transforms.time_and_memory``), its raw a container of both captures."""
from __future__ import annotations

import sys
import time

from .. import procfs
from ..errors import ProfilerError
from ..formats import container
from ..model import Profile, Raw
from . import memray
from .base import Capture, Options


# Backends whose recorder cannot run with memray's Tracker, and the measured reason.
# cProfile (3.11) and pyinstrument set the thread's profile function (PyEval_SetProfile), as memray
# does to follow Python stacks; one replaces the other. Measured (tests/test_memray.py): started
# after memray, they leave memray with no Python frames (0 bytes at the function that allocated);
# started before, memray's exit raises TypeError restoring the other's hook. cProfile uses
# sys.monitoring from Python 3.12 on and then combines.
SETPROFILE = ("{backend} and memray both need the thread's profile function (PyEval_SetProfile), and "
              "only one can have it: memray would record no Python stacks. Use --backend sampler, py-spy, "
              "perf or eu-stack for time beside memory")


def refusal(backend: str, version: tuple = sys.version_info[:2]) -> str | None:
    """Why ``backend`` cannot record time in the same run as memray, or None when it can."""
    if backend == "pyinstrument":
        return SETPROFILE.format(backend=backend)
    if backend == "cprofile" and version < (3, 12):
        return SETPROFILE.format(backend="cProfile") + "; or Python 3.12+, where cProfile uses sys.monitoring"
    if backend == memray.NAME:
        return "memray records memory, not time: choose a time backend to go with --memory"
    return None


def sampled(options: Options) -> bool:
    """Whether --memory records with profmagic's sampled tracker (backends/memsample.py: the default,
    1.1-1.3x the cell's time where memray's untraced mode took 2-5x; bench/RESULTS.md, "Sampled
    allocation tracker") rather than memray: ``memory_tracker="memray"``, --memory-exact and memray's
    own options (--allocated, --leaks, --native) choose memray."""
    extra = options.extra
    return extra.get("memory_tracker", "sampled") == "sampled" and not any(
        extra.get(k) for k in ("memory_exact", "python_allocators", "allocated", "leaks")) and not options.native


def sampled_mode(options: Options) -> str:
    """How the sampled tracker records, in words for the announce line."""
    from . import memsample
    kib = float(options.extra.get("memory_interval", memsample.INTERVAL)) / 1024
    return f"one allocation per {kib:g} KiB on average, bytes estimated; --memory-exact traces each with memray"


def memory_recorder(options: Options):
    if sampled(options):
        from . import memsample
        return memsample.Recorder(options)
    return memray.Recorder(options)


class TimeAndMemory:
    """A time backend's recorder (``time_recorder``, not started) and memray's, around one run.

    Started time first, memray second, stopped in reverse, so that neither records the other's start
    or stop. Threads that appear while they start (the sampler's thread, memray's background thread)
    are theirs, not the code's: ``read_both`` drops them.
    """

    def __init__(self, time_backend: str, time_recorder, options: Options):
        why = refusal(time_backend)
        if why:
            raise ProfilerError(f"--memory with --backend {time_backend}: {why}")
        self.time_backend = time_backend
        self.time = time_recorder
        self.memory = memory_recorder(options)
        self.helpers: set[int] = set()
        self.time_started: float | None = None

    @property
    def live(self):
        """The time recorder's live samples, when it streams (live.py)."""
        return getattr(self.time, "live", None)

    def start(self) -> None:
        before = set(procfs.threads())
        self.time_started = time.time()  # memray's snapshots count from its own start (memory_timeline)
        self.time.start()
        try:
            self.memory.start()
        except BaseException:
            self.close()
            raise
        self.helpers = set(procfs.threads()) - before

    def stop(self) -> Capture:
        try:
            mem = self.memory.stop()
        finally:
            tim = self.time.stop()
        return Capture(None, "time+memory", {"time": tim, "memory": mem, "helpers": sorted(self.helpers),
                                             "time_backend": self.time_backend,
                                             "time_started_unix": self.time_started})

    def close(self) -> None:
        try:
            self.memory.close()
        finally:
            self.time.close()


def read_both(time_module, capture: Capture, options: Options) -> Profile:
    """One Profile from a ``TimeAndMemory`` capture; its raw is a container of both captures, which
    ``load`` combines the same way."""
    from .. import transforms
    m = capture.meta
    t = time_module.read(m["time"], options)
    if m["memory"].format == "memsample":
        from . import memsample
        mem = memsample.read(m["memory"], options)
    else:
        mem = memray.read(m["memory"], options)
    meta = {"helpers": m.get("helpers") or [], "time_started_unix": m.get("time_started_unix"),
            "backend": m.get("time_backend")}
    p = transforms.time_and_memory(t, mem, drop_tids=meta["helpers"], time_started=meta["time_started_unix"])
    parts = []
    for role, q, cap in (("time", t, m["time"]), ("memory", mem, m["memory"])):
        raw = q.raw or Raw(cap.data, cap.format)
        name = raw.filename or f"{role}.{raw.format}"
        parts.append((f"{role}-{name}", raw.read(), raw.format, role, dict(raw.options)))
    box = container.write(parts, combine="time-memory", meta=meta)
    return p.replace(raw=Raw(box, container.NAME, filename="profmagic-time-memory.zip"))

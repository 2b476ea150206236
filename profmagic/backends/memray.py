"""memray's Tracker in this process: the code's allocations, with their Python stacks.

The Tracker writes to a file in a private temp directory, removed on close(); the capture's raw is
that file's bytes (memray compresses it on exit), so it can be downloaded and opened with memray's
own tools. Options: ``native`` (native frames too), ``subprocesses`` (memray's follow_fork: forked
children write their own files, kept beside the parent's in a container; exec'd children are not
followed), and in ``extra``:

- ``allocated``: record every allocation (memray's ALL_ALLOCATIONS format), for the ``allocated`` and
  ``allocations`` metrics (always with ``subprocesses``: see ``Recorder``). Without it memray aggregates while tracking (AGGREGATED_ALLOCATIONS):
  ``bytes`` at the high-water mark, leaks and the memory timeline, read in milliseconds; every
  allocation costs seconds to read back (bench/RESULTS.md, "memray").
- ``leaks``: ``bytes`` = still alive when tracking ended, instead of at the high-water mark.
- ``python_allocators`` (default True): trace each object pymalloc hands out. Untraced, memray sees
  pymalloc's 1 MiB arenas instead of objects: the benchmark cell's ``alloc`` gets 5% less than
  tracemalloc, and an arena that short-lived strings made stays at the peak under ``strs``.

memray numbers threads itself and knows them by name. The recorder notes the name and native id of
every thread it can (live at start or stop, and profmagic's own threads that came and went) and the
function each runs, so the reader gives memray's threads their OS ids (formats/memray.py, ``threads``). Threads that already
exist are named by setting each name to itself once tracking runs (memray intercepts the assignment).

Memory beside time: ``TimeAndMemory`` runs another backend's recorder and memray in one run, and
``read_both`` puts both into one Profile (``transforms.time_and_memory``), its raw a container.
"""
from __future__ import annotations

import os
import sys
import threading
import time

from .. import interrupts
from ..errors import ProfilerError
from ..formats import container, memray as fmt
from ..model import Profile, Raw
from ..tempdirs import TempDir
from .. import threads as own_threads
from .base import Capabilities, Capture, Options

NAME = "memray"
CAPS = Capabilities(clocks=(), weights="measured", inside=True, attach=False, streams=False, threads="python",
                    forks=True)
INSTALL = "pip install 'profmagic[memory]'"
AGGREGATED = ("memray aggregated while recording and kept no record of each allocation; --allocated "
              "records every one (slower)")
CHILDREN = "memray follow_fork: forked children only (a child that execs is not followed)"
# profmagic's own calls around the recorded code (the recorder's and the session's): what they
# allocate while memray runs is not the code's (formats/memray.py, ``own``).
OWN = {"prefix": os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
       "names": ["start", "stop", "finish", "close", "_exit", "__enter__", "__exit__"]}


def available() -> tuple[bool, str]:
    v = fmt.version()
    if v is None:
        return False, f"memray is not installed: {INSTALL}"
    if not sys.platform.startswith(("linux", "darwin")):
        return False, "memray runs on Linux and macOS only"
    return True, f"memray {v}: traces every allocation in this process; needs no ptrace"


def _names() -> dict[str, list[int]]:
    """Thread name -> native ids of the live Python threads."""
    out: dict[str, list[int]] = {}
    for t in threading.enumerate():
        if t.native_id is not None:
            out.setdefault(t.name, []).append(t.native_id)
    return out


def _entries() -> dict[tuple, list[int]]:
    """(function, file) each live Python thread runs (its target, or its class's run) -> native ids."""
    out: dict[tuple, list[int]] = {}
    for t in threading.enumerate():
        target = getattr(t, "_target", None)
        code = getattr(target, "__code__", None) or getattr(getattr(target, "__func__", None), "__code__", None)
        if code is None and target is None:
            code = getattr(type(t).run, "__code__", None)
        if code is not None and t.native_id is not None:
            out.setdefault((code.co_name, code.co_filename), []).append(t.native_id)
    return out


def _union(a: dict, b: dict) -> dict:
    """Two maps of key -> native ids, merged (each id once)."""
    out = {k: list(v) for k, v in a.items()}
    for k, ids in b.items():
        have = out.setdefault(k, [])
        for i in ids:
            if i not in have:
                have.append(i)
    return out


def _tasks() -> set[int]:
    try:
        return {int(t) for t in os.listdir("/proc/self/task")}
    except OSError:
        return {t.native_id for t in threading.enumerate() if t.native_id is not None}


class Recorder:
    def __init__(self, options: Options):
        ok, why = available()
        if not ok:
            raise ProfilerError(f"backend memray cannot record here: {why}")
        self.options = options
        self.leaks = bool(options.extra.get("leaks", False))
        self.python_allocators = bool(options.extra.get("python_allocators", True))
        # A forked child leaves with os._exit (multiprocessing's do): memray writes an aggregated file only
        # at a clean exit, so --subprocesses records every allocation, which memray writes as it goes.
        self.allocated = bool(options.extra.get("allocated", False) or options.subprocesses)
        self.tmp: TempDir | None = None
        self.tracker = None
        self.path = None
        self.names: dict[str, list[int]] = {}
        self.entries: dict[tuple, list[int]] = {}
        self.main: int | None = None
        self.own_before: set[int] = set()

    def start(self) -> None:
        import memray
        if self.tmp is not None:
            raise ProfilerError("this memray recorder was already started; make a new one")
        self.tmp = TempDir("profmagic-memray-")
        self.path = self.tmp.file("capture.bin")
        o = self.options
        self.names = _names()
        self.entries = _entries()
        self.main = threading.get_native_id()   # memray's first thread: the one that starts tracking
        self.own_before = set(own_threads.OWN)
        file_format = memray.FileFormat.ALL_ALLOCATIONS if self.allocated else memray.FileFormat.AGGREGATED_ALLOCATIONS
        tracker = memray.Tracker(self.path, native_traces=o.native, follow_fork=o.subprocesses,
                                 trace_python_allocators=self.python_allocators, file_format=file_format)
        try:
            tracker.__enter__()
        except RuntimeError as e:  # another Tracker is active (memray allows one per process)
            tracker = None  # its writer compresses its file when freed: before the folder goes, not after
            self.close()
            raise ProfilerError(f"memray could not start: {e}. Finish the other memray recording first "
                                "(a %%memray_flamegraph cell or a memray.Tracker block)") from None
        except BaseException:
            # Ctrl-C inside __enter__ or as it returned: tracking may have begun, with threading.Thread
            # patched; left so, every later memray start fails ("one Tracker ... at the same time").
            self.tracker = tracker
            self.close()
            raise
        self.tracker = tracker
        for t in threading.enumerate():  # memray learns the names of existing threads when they are set
            try:
                t.name = t.name
            except Exception:  # a Thread subclass that guards its name: memray leaves it unnamed
                pass

    def _exit(self) -> None:
        # Whole even on Ctrl-C: half an __exit__ leaves threading.Thread patched and no tracker can start.
        with interrupts.deferred():
            tracker, self.tracker = self.tracker, None
            if tracker is not None:
                tracker.__exit__(None, None, None)

    def threads(self) -> dict:
        """What the reader needs to give memray's threads their native ids (formats/memray.py): threads
        live at start or now, and profmagic's own that came and went (the live view's)."""
        gone: dict[str, list[int]] = {}
        for tid in set(own_threads.OWN) - self.own_before:
            if own_threads.OWN_NAMES.get(tid):
                gone.setdefault(own_threads.OWN_NAMES[tid], []).append(tid)
        names = _union(_union(self.names, _names()), gone)
        entries = _union(self.entries, _entries())
        return {"main": self.main, "names": names, "entries": [[f, file, ids] for (f, file), ids in entries.items()]}

    def stop(self) -> Capture:
        if self.tmp is None:
            raise ProfilerError("the memray recorder was never started")
        self._exit()
        with open(self.path, "rb") as f:
            data = f.read()
        children = {}
        prefix = os.path.basename(self.path) + "."
        for name in sorted(os.listdir(self.tmp.path)):
            if name.startswith(prefix) and name[len(prefix):].isdigit():
                with open(self.tmp.file(name), "rb") as f:
                    blob = f.read()
                if blob:   # empty: the child ended before memray wrote anything
                    children[int(name[len(prefix):])] = blob
        opts = {"leaks": self.leaks, "threads": self.threads(), "own": OWN}
        meta = {"backend": NAME, "pid": self.options.pid, "reader": opts, "python_allocators": self.python_allocators}
        if not children:
            return Capture(data, fmt.NAME, meta, path=self.path)
        # Forked children (--subprocesses): each wrote its own file; a forked child's thread is its pid.
        parts = [("capture.bin", data, fmt.NAME, "parent", opts)]
        parts += [(f"capture.bin.{pid}", blob, fmt.NAME, f"child {pid}",
                   {"leaks": self.leaks, "threads": {"main": pid}}) for pid, blob in sorted(children.items())]
        box = container.write(parts, combine="memory-children", meta={"children": CHILDREN, "backend": NAME})
        return Capture(box, container.NAME, {**meta, "parent": data, "children": children}, path=self.path)

    def close(self) -> None:
        with interrupts.deferred():
            try:
                self._exit()
            finally:
                if self.tmp is not None:
                    self.tmp.close()


def read(capture: Capture, options: Options) -> Profile:
    """The capture as the format readers read it (``load(p.raw)`` gives the same Profile); the parent's
    file is read in this process (profmagic just wrote it), forked children's in a child process."""
    from .. import multi
    t0 = time.perf_counter()
    m = capture.meta
    opts = dict(m.get("reader") or {"leaks": bool(options.extra.get("leaks"))})
    if capture.format == container.NAME:
        parent = fmt.read(m["parent"], "<memray>", isolate=False, **opts)
        kids = [fmt.read(blob, f"<memray child {pid}>", leaks=opts.get("leaks", False), threads={"main": pid})
                for pid, blob in sorted(m["children"].items())]
        p = multi.forked_children(parent, kids, CHILDREN)
        raw = Raw(capture.data, container.NAME, filename=f"profmagic-memray-{os.getpid()}.zip")
    else:
        if capture.path and os.path.exists(capture.path):
            p = fmt.read_file(capture.path, "<memray>", isolate=False, data=capture.data, **opts)
        else:
            p = fmt.read(capture.data, "<memray>", isolate=False, **opts)
        raw = Raw(capture.data, fmt.NAME, filename=f"profmagic-memray-{os.getpid()}.bin", options=opts)
    meta = {"backend": NAME, "python_allocators": m.get("python_allocators", True)}
    if p.meta.get("memray_mode") == "aggregated":
        meta["unknown"] = {k: AGGREGATED for k in ("allocated", "allocations")}
    else:
        meta["cost"] = (f"memray recorded every allocation (--allocated): {p.meta.get('records', 0):,} records, "
                        f"read back in {time.perf_counter() - t0:.1f} s after the code ended")
    return p.replace(meta=p.meta.replace(**meta), raw=raw)


# -- memory beside time ------------------------------------------------------------------------------
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
    if backend == NAME:
        return "memray records memory, not time: choose a time backend to go with --memory"
    return None


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
        self.memory = Recorder(options)
        self.helpers: set[int] = set()
        self.time_started: float | None = None

    @property
    def live(self):
        """The time recorder's live samples, when it streams (live.py)."""
        return getattr(self.time, "live", None)

    def start(self) -> None:
        before = _tasks()
        self.time_started = time.time()  # memray's snapshots count from its own start (memory_timeline)
        self.time.start()
        try:
            self.memory.start()
        except BaseException:
            self.close()
            raise
        self.helpers = _tasks() - before

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
    mem = read(m["memory"], options)
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

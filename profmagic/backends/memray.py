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
- ``memory_exact`` (``--memory-exact``): trace each object pymalloc hands out (memray's
  trace_python_allocators), for exact bytes per object and function. Allocation-heavy cells took
  9-19x their time alone with it, about 2x without (bench/RESULTS.md, "memray: cost per option"). By default pymalloc is not traced: memray sees
  its 1 MiB arenas, each charged to the code that opened it, and small objects are counted by the
  blocks they take. So that objects made while recording open arenas memray sees, the free space
  pymalloc already has is filled before tracking starts and released after (``fill_pymalloc``).
  ``python_allocators`` says the same as ``memory_exact`` (True: traced).

memray numbers threads itself and knows them by name. The recorder notes the name and native id of
every thread it can (live at start or stop, and profmagic's own threads that came and went) and the
function each runs, so the reader gives memray's threads their OS ids (formats/memray.py, ``threads``). Threads that already
exist are named by setting each name to itself once tracking runs (memray intercepts the assignment).

Memory beside time (``--memory``) is backends/memory.py's, with this recorder or the sampled tracker.
"""
from __future__ import annotations

import os
import re
import sys
import tempfile
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
BLOCKS_MODE = "blocks: pymalloc's arenas, not each object"
EXACT_MODE = "exact: every Python object traced (--memory-exact)"
BLOCKS = ("Python's small objects (up to 512 bytes) were counted by the pymalloc blocks and 1 MiB arenas they "
          "filled, not one by one: an arena's bytes go to the code that opened it, and a function whose objects "
          "went into an arena another opened shows less. Totals count more than the objects' own sizes: 0-13% "
          "more than tracemalloc's peak on the bench's cells, 24% with a time backend's thread beside it "
          "(block rounding; arenas that other objects keep open). --memory-exact traces every object, at "
          "9-19x the cell's time on allocation-heavy code")
EXACT_COST = ("memray traced every Python object (--memory-exact): allocation-heavy cells took 9-19x their time "
              "alone while recording, against about 2x by default (bench/RESULTS.md, memray: cost per option)")
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


# -- pymalloc's free space -----------------------------------------------------------------------------
# sys._debugmallocstats' table (CPython's pymalloc): one row per size class, then the unused pools.
_CLASS_ROW = re.compile(rb"^\s*\d+\s+(\d+)\s+\d+\s+\d+\s+(\d+)\s*$")
_UNUSED_POOLS = re.compile(rb"^(\d+) unused pools \* (\d+) bytes")
_POOL_HEADER = 48   # bytes at the head of each pymalloc pool (64-bit)
_BYTES_HEAD = sys.getsizeof(b"")   # a bytes object of n bytes asks pymalloc for this + n
_INT_SIZE = sys.getsizeof(1 << 20)   # a one-digit int


def pymalloc_free() -> tuple[dict[int, int], int, int] | None:
    """pymalloc's free blocks per block size, its unused pools and their size, from
    ``sys._debugmallocstats`` (written to file descriptor 2, sent to an unnamed temp file for the
    call: another thread's stderr in that millisecond goes there too). None when the table is not
    pymalloc's (PYTHONMALLOC=malloc, or another interpreter)."""
    stats = getattr(sys, "_debugmallocstats", None)
    if stats is None:
        return None
    with tempfile.TemporaryFile() as f:
        try:
            sys.stderr.flush()
        except Exception:
            pass
        try:
            saved = os.dup(2)
        except OSError:   # no stderr to borrow: nothing filled (the label still says how bytes were counted)
            return None
        try:
            os.dup2(f.fileno(), 2)
            stats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        f.seek(0)
        text = f.read(1 << 20)
    free: dict[int, int] = {}
    unused = pool = None
    for line in text.splitlines():
        m = _CLASS_ROW.match(line)
        if m:
            free[int(m[1])] = int(m[2])
        elif unused is None and (m := _UNUSED_POOLS.match(line)):
            unused, pool = int(m[1]), int(m[2])
    if not free or unused is None:
        return None
    return free, unused, pool


_ANCHORS: list = []   # one block in each pool filled for a full size, kept until the next recording


def _blocks(size: int, n: int) -> list:
    """``n`` new objects that take one pymalloc block of ``size`` bytes each."""
    if size >= _BYTES_HEAD + 15:
        return [bytes(size - _BYTES_HEAD) for _ in range(n)]
    if size >= _INT_SIZE:
        return [(1 << 20) + i for i in range(n)]   # one-digit ints, none cached
    return [[i, i] for i in range(n)]   # their item arrays: 16 bytes (the lists take larger blocks)


def fill_pymalloc(keep: list | None = None, passes: int = 4, reserve: int = 4,
                  anchors: list | None = None) -> list | None:
    """Objects that take the free blocks and unused pools pymalloc has now, so that objects made next
    come from new arenas (memray sees an arena's mmap, not the objects in it). Kept alive while memray
    records. ``reserve`` unused pools are left for what the filling itself makes and drops (the loop's
    ints, each in a pool of its size), or it would open a new arena and leave most of it free; each
    pass fills what the last one left, until at most ``reserve`` pools are left. None when the allocator
    is not pymalloc."""
    for _ in range(passes):
        free = pymalloc_free()
        if free is None:
            return keep
        keep = [] if keep is None else keep
        small = min(free[0])
        if free[0][small] and small < _INT_SIZE:   # lists, which take larger blocks too: first, then counted again
            keep.extend(_blocks(small, free[0][small]))
            free = pymalloc_free() or free
        for size, n in free[0].items():
            keep.extend(_blocks(size, n))
        free = pymalloc_free() or free   # filling a size took new pools: the unused ones, counted again
        blocks, unused, pool = free
        if anchors is not None:
            # A size with no free block: one pool of it filled too, one block kept after (``anchors``), so
            # that after recording that pool, not one the code opened in a new arena, takes what comes
            # next (a profile kept pins the arena it lands in).
            for size in [s for s, n in blocks.items() if n == 0][:max(unused - reserve, 0)]:
                made = _blocks(size, (pool - _POOL_HEADER) // size)
                anchors.append(made[0])
                keep.extend(made)
            free = pymalloc_free() or free
            blocks, unused, pool = free
            anchors = None
        top = max(blocks)
        if unused <= reserve:
            break
        keep.extend(_blocks(top, (unused - reserve) * ((pool - _POOL_HEADER) // top)))
    return keep


class Recorder:
    def __init__(self, options: Options):
        ok, why = available()
        if not ok:
            raise ProfilerError(f"backend memray cannot record here: {why}")
        self.options = options
        self.leaks = bool(options.extra.get("leaks", False))
        extra = options.extra
        self.python_allocators = bool(extra.get("python_allocators", extra.get("memory_exact", False)))
        self.filler: list | None = None   # pymalloc's free space, taken while memray records untraced
        self.fill_seconds = 0.0
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
        if not self.python_allocators and self.options.extra.get("fill", True):
            # First, before anything needs undoing: Ctrl-C in these 0.1 s leaves only objects behind.
            t0 = time.perf_counter()
            anchors: list = []
            self.filler = fill_pymalloc(anchors=anchors)
            _ANCHORS[:] = anchors   # the last recording's anchors go now
            self.fill_seconds = time.perf_counter() - t0
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
        if self.filler is not None:
            # Starting allocated a little, maybe opening an arena (charged to start, dropped as our own):
            # its free space too, or the code's first objects would go there unseen.
            t0 = time.perf_counter()
            with interrupts.deferred():   # memray tracks now: Ctrl-C here would leave it tracking
                self.filler = fill_pymalloc(self.filler, passes=1)
            self.fill_seconds += time.perf_counter() - t0

    def _exit(self) -> None:
        # Whole even on Ctrl-C: half an __exit__ leaves threading.Thread patched and no tracker can start.
        with interrupts.deferred():
            tracker, self.tracker = self.tracker, None
            if tracker is not None:
                tracker.__exit__(None, None, None)
            self.filler = None

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
        meta = {"backend": NAME, "pid": self.options.pid, "reader": opts, "python_allocators": self.python_allocators,
                "filled": self.fill_seconds if self.python_allocators is False and self.options.extra.get("fill", True)
                else None}
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
    traced = m.get("python_allocators", True)
    meta = {"backend": NAME, "python_allocators": traced, "memory_mode": EXACT_MODE if traced else BLOCKS_MODE}
    costs = [EXACT_COST] if traced else []
    if p.meta.get("approximate") and not traced:
        meta["approximate"] = BLOCKS + (f" (pymalloc's free space was filled first, in {m['filled'] * 1e3:.0f} ms)"
                                        if m.get("filled") is not None else "")
    if p.meta.get("memray_mode") == "aggregated":
        meta["unknown"] = {k: AGGREGATED for k in ("allocated", "allocations")}
    else:
        costs.append(f"memray recorded every allocation (--allocated): {p.meta.get('records', 0):,} records, "
                     f"read back in {time.perf_counter() - t0:.1f} s after the code ended")
    if costs:
        meta["cost"] = "; ".join(costs)
    return p.replace(meta=p.meta.replace(**meta), raw=raw)

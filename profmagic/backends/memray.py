"""memray's Tracker in this process: every allocation of the code, with its Python stack.

The Tracker writes to a file in a private temp directory, removed on close(); the capture's raw is
that file's bytes (memray compresses it on exit), so it can be downloaded and opened with memray's
own tools. Options: ``native`` (native frames too), ``subprocesses`` (memray's follow_fork: forked
children write their own files; exec'd children are not followed), and in ``extra``:
``leaks`` (``bytes`` = still alive at the end instead of at the high-water mark),
``python_allocators`` (default True: trace each object pymalloc hands out; see below) and
``aggregate`` (memray aggregates while tracking: the capture reads in milliseconds whatever the
code allocated, but keeps only ``bytes``; ``allocated`` and ``allocations`` are unknown).

Reading cost: without ``aggregate`` every allocation and free is a record, and memray's reader
hands each to Python (bench/RESULTS.md, "memray": seconds per million records).

Python allocators: with them traced, the benchmark cell's bytes at ``alloc`` are within 0.01% of
tracemalloc's and short-lived strings are not at the peak; untraced, memray sees pymalloc's 1 MiB
arenas instead of objects: ``alloc`` gets 5% less than tracemalloc, and an arena that the strings
made stays at the peak under ``strs``. Tracing them costs time (bench/RESULTS.md, "memray").

memray names threads itself; threads that already exist are named by setting each name to itself
once tracking runs (memray intercepts the assignment), then mapped to native ids by name.

Memory beside time: ``TimeAndMemory`` runs another backend's recorder and memray in one run, and
``merge`` puts both into one Profile (``side_by_side`` is the per-function table).
"""
from __future__ import annotations

import io
import os
import sys
import threading
import time
import zipfile

import numpy as np
import pandas as pd

from ..errors import ProfilerError
from ..formats import memray as fmt
from ..model import TIME_METRICS, MEMORY_METRICS, Profile, Raw
from ..tempdirs import TempDir
from ..threads import thread_label
from .base import Capabilities, Capture, Options

NAME = "memray"
CAPS = Capabilities(clocks=(), weights="measured", inside=True, attach=False, streams=False, threads="python")
INSTALL = "pip install 'profmagic[memory]'"


def available() -> tuple[bool, str]:
    v = fmt.version()
    if v is None:
        return False, f"memray is not installed: {INSTALL}"
    if not sys.platform.startswith(("linux", "darwin")):
        return False, "memray runs on Linux and macOS only"
    return True, f"memray {v}: traces every allocation in this process; needs no ptrace"


def _threads() -> dict[str, list[int]]:
    """Thread name -> native ids of the live Python threads."""
    out: dict[str, list[int]] = {}
    for t in threading.enumerate():
        if t.native_id is not None:
            out.setdefault(t.name, []).append(t.native_id)
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
        self.aggregate = bool(options.extra.get("aggregate", False))
        self.tmp: TempDir | None = None
        self.tracker = None
        self.path = None
        self.names: dict[str, list[int]] = {}

    def start(self) -> None:
        import memray
        if self.tmp is not None:
            raise ProfilerError("this memray recorder was already started; make a new one")
        self.tmp = TempDir("profmagic-memray-")
        self.path = self.tmp.file("capture.bin")
        o = self.options
        self.names = _threads()
        fmt_ = memray.FileFormat.AGGREGATED_ALLOCATIONS if self.aggregate else memray.FileFormat.ALL_ALLOCATIONS
        tracker = memray.Tracker(self.path, native_traces=o.native, follow_fork=o.subprocesses,
                                 trace_python_allocators=self.python_allocators, file_format=fmt_)
        try:
            tracker.__enter__()
        except RuntimeError as e:  # another Tracker is active (memray allows one per process)
            del tracker  # its writer compresses its file when freed: before the folder goes, not after
            self.close()
            raise ProfilerError(f"memray could not start: {e}. Finish the other memray recording first "
                                "(a %%memray_flamegraph cell or a memray.Tracker block)") from None
        self.tracker = tracker
        for t in threading.enumerate():  # memray learns the names of existing threads when they are set
            try:
                t.name = t.name
            except Exception:  # a Thread subclass that guards its name: memray leaves it unnamed
                pass

    def _exit(self) -> None:
        tracker, self.tracker = self.tracker, None
        if tracker is not None:
            tracker.__exit__(None, None, None)

    def stop(self) -> Capture:
        if self.tmp is None:
            raise ProfilerError("the memray recorder was never started")
        self._exit()
        for name, ids in _threads().items():
            self.names.setdefault(name, [])
            self.names[name] += [i for i in ids if i not in self.names[name]]
        with open(self.path, "rb") as f:
            data = f.read()
        children = {}
        prefix = os.path.basename(self.path) + "."
        for name in sorted(os.listdir(self.tmp.path)):
            if name.startswith(prefix) and name[len(prefix):].isdigit():
                with open(self.tmp.file(name), "rb") as f:
                    children[int(name[len(prefix):])] = f.read()
        cell = threading.current_thread()
        meta = {"backend": NAME, "pid": self.options.pid, "thread_names": self.names,
                "cell_thread": thread_label(self.options.thread_native_id, cell.name),
                "leaks": self.leaks, "python_allocators": self.python_allocators, "children": children}
        return Capture(data, fmt.NAME, meta, path=self.path)

    def close(self) -> None:
        try:
            self._exit()
        finally:
            if self.tmp is not None:
                self.tmp.close()


def _labels(p: Profile, names: dict[str, list[int]], cell_label: str | None) -> dict[str, str]:
    """memray's thread labels -> ``Thread <native id> "<name>"``: the thread that started tracking is
    the cell's; another thread by its name, when exactly one thread had that name."""
    out = {}
    main = p.meta.get("main_thread")
    for lab in p.threads:
        name = lab.split('"', 1)[1][:-1] if '"' in lab else None
        if lab == main and cell_label:
            out[lab] = cell_label
        elif name is not None and len(names.get(name, [])) == 1:
            out[lab] = thread_label(names[name][0], name)
    return out


# profmagic's own calls around the recorded code: what they allocate while memray runs is not the code's.
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_OWN = {"start", "stop", "finish", "close", "_exit", "__enter__", "__exit__"}


def drop_own(p: Profile) -> Profile:
    """Drop the rows whose stack passes through profmagic's own start/stop code (the recorder's and
    the session's), the only profmagic frames memray sees besides those above the code."""
    fr = p.frames
    own = set(fr.index[(fr["name"].isin(_OWN) & fr["file"].str.startswith(_PACKAGE + os.sep)).to_numpy()])
    keep = np.fromiter((not own.intersection(s) for s in p.stacks["stack"]), dtype=bool, count=len(p.stacks))
    if keep.all():
        return p
    return p.subset(keep).with_meta(dropped_own_bytes=int(p.stacks.loc[~keep, "bytes"].sum()))


def read(capture: Capture, options: Options) -> Profile:
    from .. import multi, transforms
    m = capture.meta
    leaks = bool(m.get("leaks", options.extra.get("leaks", False)))
    if capture.path and os.path.exists(capture.path):
        p = fmt.read_file(capture.path, "<memray>", leaks=leaks, isolate=False, data=capture.data)
    else:
        p = fmt.read(capture.data, "<memray>", leaks=leaks, isolate=False)
    p = drop_own(p)
    p = transforms.relabel_threads(p, _labels(p, m.get("thread_names") or {}, m.get("cell_thread")))
    meta = {**p.meta, "backend": NAME, "python_allocators": m.get("python_allocators", True)}
    children = m.get("children") or {}
    if not children:
        return p.replace(meta=meta, raw=Raw(capture.data, fmt.NAME, filename=f"profmagic-memray-{os.getpid()}.bin"))
    # Forked children (--subprocesses): each wrote its own capture; one process label per file.
    parts = [multi.with_process(p, multi.process_label(m.get("pid"), "parent"), {"pid": m.get("pid"), "role": "parent"})]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:   # memray's files are compressed already
        z.writestr("capture.bin", capture.data)
        for pid, data in sorted(children.items()):
            z.writestr(f"capture.bin.{pid}", data)
            c = fmt.read(data, f"<memray child {pid}>", leaks=leaks, isolate=True)
            info = {"pid": pid, "backend": NAME, "role": "forked child"}
            if c.meta.get("completeness"):
                info["completeness"] = c.meta["completeness"]
            parts.append(multi.with_process(c, multi.process_label(pid, "forked child"), info))
    merged = multi.concat(parts, key="process", labels=[multi.processes(x)[0] for x in parts])
    meta.update(processes=merged.meta["processes"], threads=merged.meta["threads"],
                children="memray follow_fork: forked children only (a child that execs is not followed)")
    return merged.replace(meta=meta, metric="bytes",
                          raw=Raw(buf.getvalue(), "zip", filename=f"profmagic-memray-{os.getpid()}.zip"))


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
    """A time backend's recorder and memray's, around one run of the code.

    Started time first, memray second, stopped in reverse, so that neither records the other's start
    or stop. Threads that appear while they start (the sampler's thread, memray's background thread)
    are theirs, not the code's: ``read`` drops them.
    """

    def __init__(self, time_module, options: Options):
        why = refusal(time_module.NAME)
        if why:
            raise ProfilerError(f"--memory with --backend {time_module.NAME}: {why}")
        self.time_module = time_module
        self.time = time_module.Recorder(options)
        self.memory = Recorder(options)
        self.helpers: set[int] = set()
        self.time_started: float | None = None

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
                                             "time_backend": self.time_module.NAME,
                                             "time_started_unix": self.time_started})

    def close(self) -> None:
        try:
            self.memory.close()
        finally:
            self.time.close()

    def read(self, capture: Capture, options: Options) -> Profile:
        return read_both(self.time_module, capture, options)


def read_both(time_module, capture: Capture, options: Options) -> Profile:
    from .. import transforms
    m = capture.meta
    helpers = set(m.get("helpers") or ())

    def tids(p):
        return {lab: (None if tid is pd.NA else int(tid)) for lab, tid in zip(p.threads, p.thread_table["tid"])}

    t = time_module.read(m["time"], options)
    t = transforms.keep_threads(t, [lab for lab, tid in tids(t).items() if tid not in helpers])
    mem = read(m["memory"], options)
    mem = transforms.keep_threads(mem, [lab for lab, tid in tids(mem).items() if tid not in helpers])
    # One label per thread: the memory side's (Python's thread names) where both saw the native id.
    named = {tid: lab for lab, tid in tids(mem).items() if tid is not None}
    t = transforms.relabel_threads(t, {lab: named[n] for lab, n in tids(t).items() if n in named})
    tl = mem.meta.get("memory_timeline")
    if tl and m.get("time_started_unix"):  # memray's clock against the time recorder's start (to a few ms)
        mem = mem.replace(meta={**mem.meta, "memory_timeline": {
            **tl, "starts_after_time_recorder": tl["t0_unix"] - m["time_started_unix"]}})
    return merge(t, mem)


def merge(time_p: Profile, mem_p: Profile) -> Profile:
    """One Profile with the time profile's rows (wall, cpu, samples) and the memory profile's rows
    (bytes, allocated, allocations), frames unified by (name, file, line, kind). Each metric is 0 on
    the other recording's rows (they carry none of it), so every total is the recording's own; a
    metric the time backend could not measure stays NaN on its rows. Time-ordered samples are the
    time profile's. Functions (name, file) are shared, so p.functions(m) lines up across metrics."""
    from .. import multi
    both = multi.concat([time_p, align_names(mem_p, time_p)], key="recording", labels=["time", "memory"])
    st = both.stacks
    mine = {"time": TIME_METRICS + ("samples",), "memory": MEMORY_METRICS}
    for part, cols in mine.items():
        other = (st["recording"] != part).to_numpy()
        for col in cols:
            if col in st:
                vals = st[col].to_numpy(dtype=np.float64).copy()
                vals[other] = 0.0
                st[col] = vals.astype(np.int64) if col not in TIME_METRICS and not np.isnan(vals).any() \
                    else vals
    drop = ["recording"] + (["process"] if multi.PROCESS not in time_p.stacks and multi.PROCESS not in mem_p.stacks
                            else [])
    meta = dict(time_p.meta)
    meta["threads"] = list(dict.fromkeys(list(time_p.threads) + list(mem_p.threads)))
    meta["memory"] = {k: v for k, v in mem_p.meta.items() if k != "threads"}
    meta.update(memray=mem_p.meta.get("memray"), memory_timeline=mem_p.meta.get("memory_timeline"),
                metrics=list(dict.fromkeys(list(meta.get("metrics") or []) + list(MEMORY_METRICS))))
    meta["approximate"] = "; ".join(x for x in (time_p.meta.get("approximate"), (
        "wall and CPU time were measured while memray traced every allocation, which slows "
        "allocation-heavy code (bench/RESULTS.md, memray)")) if x)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for p, stem in ((time_p, "time"), (mem_p, "memory")):
            if p.raw is not None:
                ext = {"speedscope": "speedscope.json"}.get(p.raw.format, p.raw.format)
                z.writestr(p.raw.filename or f"{stem}.{ext}", p.raw.read())
    raw = Raw(buf.getvalue(), "zip", filename="profmagic-time-memory.zip")
    return Profile(both.frames, st.drop(columns=drop), time_p.samples, meta, raw, time_p.metric)


def align_names(mem_p: Profile, time_p: Profile) -> Profile:
    """memray names a Python function by its code's name (``run``; comprehensions qualified by their
    caller, formats/memray.py); time backends by that name (py-spy) or the qualified one (the sampler:
    ``Worker.run``). Give memray's frames the time profile's name for the same function: same file, one
    name a dotted suffix of the other, and of several
    (``A.run``, ``B.run``), the one that starts last at or before memray's line (time backends that
    qualify names give each function's first line)."""
    by_file: dict[str, list[tuple[str, int]]] = {}
    tf = time_p.frames
    for name, file, line in zip(tf["name"], tf["file"], tf["line"]):
        if file:
            by_file.setdefault(file, []).append((str(name), -1 if pd.isna(line) else int(line)))
    names = []
    for name, file, line in zip(mem_p.frames["name"], mem_p.frames["file"], mem_p.frames["line"]):
        cands = {n: ln for n, ln in sorted(by_file.get(file, []), key=lambda x: x[1])
                 if n == name or n.endswith("." + name) or name.endswith("." + n)}
        if len(cands) > 1 and not pd.isna(line):
            before = [n for n, ln in cands.items() if ln <= int(line)]
            cands = {max(before, key=cands.get): 0} if before else cands
        names.append(next(iter(cands)) if len(cands) == 1 else name)
    return mem_p.replace(frames=mem_p.frames.assign(name=pd.Series(names, dtype=object, index=mem_p.frames.index)))


def side_by_side(p: Profile) -> pd.DataFrame:
    """Per function: wall, CPU, off-CPU time and bytes at the high-water mark (totals, callees
    included) side by side, and bytes allocated; heaviest wall first (CPU, then bytes, when unknown)."""
    cols = [m for m in ("wall", "cpu", "off_cpu", "bytes", "allocated") if m in p.metrics]
    if not cols:
        raise ValueError("this profile has neither time nor memory metrics")
    out = p.functions(cols[0])[["name", "file"]].sort_index()
    for m in cols:  # every function on some stack has a row in every metric (0 when it has none)
        out[m] = p.functions(m)["total"]
    order = next(m for m in ("wall", "cpu", "bytes", "allocated") if m in out)
    return out.sort_values(order, ascending=False, kind="stable")

"""One recording: start a backend, run the code, stop, read, run the processors, clean up.

The only recording engine: the ``%%profile`` magic and the ``profmagic.profile()`` context manager
record a cell (``CellTarget``), ``attach()`` and ``record --pid`` running processes (``PidsTarget``),
``record -- cmd`` a command it starts (``CommandTarget``)::

    with profmagic.profile("sampler", mode="both") as rec:
        work()
    rec.profile

With ``cluster=`` ("dask", a ``distributed.Client``, "ray"), every worker of that cluster is recorded
too (profmagic/cluster/): one Profile, the driver (this process) and one rank per worker.
"""
from __future__ import annotations

import contextlib
import os
import platform
import sys
import threading
import time
from dataclasses import fields, replace
from typing import Callable

from . import backends, interrupts, kernel, multi, nested, procfs, tempdirs, threads, transforms, validate
from .backends.base import Options, defaults
from .errors import ProfileFormatError, ProfilerError
from .model import Profile
from .transforms import Cell

BACKENDS = ("auto",) + tuple(backends.names())
# The clocks, bound now: code that replaces time.perf_counter (a test's mock) must not change them.
_wall, _cpu = time.perf_counter, time.thread_time


def _clock_replaced() -> str | None:
    if time.perf_counter is not _wall or time.thread_time is not _cpu:
        return ("the code replaced time.perf_counter or time.thread_time (a mock?); profmagic timed the cell "
                "with its own references to the real clocks")
    return None


def memray_mode(options: Options) -> str:
    """How memray records, in words for the announce line."""
    exact = ("every Python object traced: --memory-exact, 9-19x the cell's time on allocation-heavy code"
             if options.extra.get("memory_exact") else
             "small objects by pymalloc's blocks and arenas; --memory-exact traces each object")
    if options.extra.get("allocated"):
        return f"every allocation: --allocated, slower to read back; {exact}"
    if options.subprocesses:
        return f"every allocation, as forked children need: slower to read back; {exact}"
    return f"aggregated: bytes at the high-water mark, {exact}; --allocated records every allocation"


def rerun_refused(backend: str) -> str:
    return (f"{backend} measures one clock per run, so --mode both would run the code twice (once for "
            "wall time, once for CPU time). The code may not be safe to run twice, so profmagic never "
            "does it silently. Fix: add --rerun to allow the second run; or use --backend sampler "
            "(or py-spy, eu-stack), which give both clocks from one run.")


CLUSTER_ALONE = ("--cluster records the workers during one run of the code, with this process as the driver; "
                 "it cannot be combined with {option}")


def make_options(**kw) -> Options:
    """Options from keywords, checked (validate.py); unknown ones go to ``extra`` (backend-specific)."""
    known = {f.name for f in fields(Options)} | {"idle"}
    opts = Options(**{k: v for k, v in kw.items() if k in known})
    opts.extra.update({k: v for k, v in kw.items() if k not in known})
    opts.mode = validate.mode(opts.mode)
    opts.rate = validate.rate(opts.rate)
    if opts.extra.get("timing") is None:
        opts.extra.pop("timing", None)
    else:
        opts.extra["timing"] = validate.timing(opts.extra["timing"])
    return opts


def exec_entries_above(frame) -> int:
    """How many ``PyEval_EvalCode`` native frames run beneath ``frame`` (a live Python frame): one per
    ``<module>`` frame on its chain (exec, eval, import and the main script each start module code
    there). Counted on the cell's thread before the cell runs, for ``transforms.native_to_cell``."""
    n = 0
    while frame is not None:
        n += frame.f_code.co_name == "<module>"
        frame = frame.f_back
    return n


def versions() -> dict:
    from .formats._common import version
    v = {"profmagic": version(), "python": platform.python_version()}
    for mod in ("IPython", "ipykernel"):
        m = sys.modules.get(mod)
        if m is not None:
            v[mod] = getattr(m, "__version__", None)
    return v


class Session:
    """One recording, the only one there is: ``start()``; run the code (or wait); ``finish(error)`` ->
    Profile; ``close()`` always. ``target`` says what is recorded: a cell in this process
    (``CellTarget``, the default: the magic and ``profile()``), running processes (``PidsTarget``:
    ``attach()``, ``record --pid``) or a command it starts (``CommandTarget``: ``record -- cmd``).
    Every target runs the same declared processors (``processors()``), less the ones only a cell
    has (``transforms.CELL_ONLY`` and the backend's calibration to the cell's clocks);
    ``meta["processors"]`` names the ones that ran."""

    def __init__(self, backend: str = "auto", options: Options | None = None, *, target=None,
                 cell: str | None = None, cell_filename: str | None = None, file_names: dict | None = None,
                 announce: Callable[[str], None] | None = None, tracker=None, cluster=None):
        self.requested = backend
        self.target = target if target is not None else CellTarget()
        self.tracker = tracker         # awaits.Tracker of a top-level-await cell
        self.options = options or Options()
        if cell_filename:
            self.options.cell_filename = cell_filename
        self.cell = cell
        self.file_names = file_names or {}
        self.announce = announce
        self.module = None
        self.why = ""
        self.prepared = False
        self.recorder = None
        self.profile: Profile | None = None
        self.message: str | None = None
        self.error: BaseException | None = None
        self.nested: str | None = None
        self.children = None           # childsampler.Children while --subprocesses records children
        self.child_records: dict = {}   # (pid, image) -> that process image's capture
        self.child_failures: dict = {}  # pid -> why the start-up hook did not record that child
        self.child_t0 = 0.0
        self.cluster = self._cluster_recording(cluster)   # cluster.Recording of the workers, or None
        self.cluster_error: str | None = None
        self.scope: tempdirs.Scope | None = None   # the temp dirs made while it records

    def _cluster_recording(self, target):
        """The workers' Recording for ``cluster=``, checked now (ProfilerError before anything runs)."""
        if target is None:
            return None
        o = self.options
        if o.subprocesses:
            raise ProfilerError(CLUSTER_ALONE.format(option="--subprocesses"))
        from . import cluster
        target = cluster.resolve(target)
        return target if isinstance(target, cluster.Recording) else cluster.Recording(target, rate=o.rate)

    @property
    def children_method(self) -> str | None:
        """How children are recorded: "hook" (each child samples itself from its start) or
        "py-spy" (py-spy -s, which finds them by polling); None when the backend follows them itself."""
        o = self.options
        if not o.subprocesses or (self.module is not None and self.module.CAPS.forks):
            return None
        return o.extra.get("children", "hook")

    @property
    def memory(self) -> bool:
        """``memory=True``: memray records the code's memory beside the time backend, in the same run."""
        return bool(self.options.extra.get("memory"))

    @property
    def name(self) -> str:
        return getattr(self.module, "NAME", self.requested)

    def prepare(self) -> None:
        """Choose the backend, decide the clock and timing not asked for (``backends.base.defaults``,
        the one place they are decided) and refuse what cannot be recorded, before anything runs."""
        if self.prepared:
            return
        self.module, self.why = self.target.choose(self.requested)
        o = self.options
        o.mode, timing = defaults(self.module, self.target.kind, o, auto=self.requested == "auto")
        if timing is not None:
            o.extra["timing"] = timing
        if o.system and (self.module.NAME != "perf" or o.mode not in ("both", "wall")):
            raise ProfilerError(f"--system needs --backend perf --mode both (here --backend {self.name} --mode "
                                f"{o.mode}): it adds every CPU's wakeups to perf's scheduler events")
        self.target.check(self)
        self.prepared = True

    def start(self) -> None:
        self.prepare()
        self.scope = tempdirs.Scope()
        try:
            self.scope.open()   # every temp dir made from here, in this context, is removed by close()
            self.target.start(self)
        except BaseException:
            with interrupts.deferred():
                self.close()
            raise

    def _memory(self):
        """backends.memory, once it is known that it can go with this backend (``memory``): checked
        by ``prepare``, so later steps import the module."""
        from .backends import memory, memray
        why = memory.refusal(self.name) or (
            "--memory records the parent process only; --backend memray --subprocesses records forked "
            "children's memory" if self.options.subprocesses else None)
        if why:
            raise ProfilerError(f"--memory with --backend {self.name}: {why}")
        ok, reason = (True, "") if memory.sampled(self.options) else memray.available()   # sampling needs no memray
        if not ok:
            raise ProfilerError(f"backend memray cannot record here: {reason}")
        return memory

    def warn(self, text: str) -> None:
        print(f"profmagic: {text}", file=sys.stderr)

    def close(self) -> None:
        """Stop and remove everything the recording started (idempotent; always called). ``finish``
        calls it once the capture is read: a capture may be a file in a recorder's temp dir."""
        try:
            self.target.close(self)
        finally:
            if self.scope is not None:   # also the temp dirs no recorder got to hold (a Ctrl-C as one was made)
                self.scope.close()

    def _at(self, step: str, outcome: str):
        """``interrupts.at`` for a target whose interrupts are noted per step (a cell's); else the
        caller's own note stands (``%profile --pid``: "attaching to the processes")."""
        return interrupts.at(step, outcome) if self.target.notes else contextlib.nullcontext()

    def finish(self, error: BaseException | None = None) -> Profile | None:
        """Stop, read and process. Call right after the code ran (from its thread, for a cell)."""
        self.target.ended(self)
        self.error = error
        try:
            with self._at(f"stopping {self.recording_what}", interrupts.LOST):
                capture = self.target.stop(self)
            with self._at(f"reading what {self.recording_what} recorded", interrupts.LOST):
                profile = self.target.read(self, capture)
        finally:
            with interrupts.deferred():   # children reaped and files removed, even on a second Ctrl-C
                self.close()
        with self._at("building the profile", interrupts.LOST):
            self.profile = self.target.after(self, self.process(profile, self.target.context(self)))
        return self.profile

    @property
    def recording_what(self) -> str:
        """The recorder's name for an interrupt's line: "sampler", "sampler and memray"."""
        return self.name + (" and memray" if self.memory and self.name != "memray" else "")

    def _collect_workers(self) -> None:
        try:
            self.cluster.collect()
        except Exception as e:  # noqa: BLE001 - e.g. the scheduler went away: the driver's profile still shows
            self.cluster_error = (f"the {self.cluster.engine} workers could not be collected "
                                  f"({type(e).__name__}: {e}); this profile is the driver's only. A sampler "
                                  "left on a worker stops by itself after an hour (docs/errors.md: "
                                  "cluster-not-collected)")

    def _with_workers(self, p: Profile) -> Profile:
        """The driver's profile with one rank per worker (cluster/assemble.py)."""
        if self.cluster_error is not None:
            return p.with_meta(warnings=tuple(p.meta.warnings) + (self.cluster_error,))
        driver = "kernel" if kernel.in_kernel() else "driver"
        return self.cluster.stop(p, driver_pid=self.options.pid, driver_name=driver)

    def cell_context(self, wall: float, cpu: float, run_delay: float | None) -> Cell:
        o = self.options
        return Cell(tid=o.thread_native_id, thread_name=self.thread_name, filename=o.cell_filename,
                    before=frozenset(self.before), keep_all_threads=o.all_threads,
                    live_names={t.native_id: t.name for t in threading.enumerate() if t.native_id is not None},
                    file_names=self.file_names, mode=o.mode, unmeasured=dict(self.module.CAPS.unmeasured),
                    awaits=tuple(self.tracker.waits) if self.tracker is not None else (),
                    sees_awaits=self.module.CAPS.awaits, own=frozenset(threads.OWN),
                    entries_above=self.entries_above, wall=wall, cpu=cpu, run_delay=run_delay)

    def processors(self) -> tuple:
        """The declared post-processing: the common processors, the backend's own, the processes,
        names. Without a cell: none of ``transforms.CELL_ONLY``, and not the backend's own (py-spy's
        calibrates to the cell's measured clocks)."""
        own = tuple(getattr(self.module, "PROCESSORS", ()))
        steps = transforms.PROCESSORS + own + (self.processes,) + transforms.FINAL
        if self.target.kind == "cell":
            return steps
        return tuple(s for s in steps if s not in transforms.CELL_ONLY and s not in own)

    def processes(self, p: Profile, cell: Cell) -> Profile:
        """Each process labelled and marked ended or running; a cell's children appended."""
        return self.target.processes(self, p, cell)

    def process(self, p: Profile, cell: Cell) -> Profile:
        if self.children_method == "py-spy":
            p = transforms.group_processes(p, self._process_label)
        ran = []
        for step in self.processors():
            p = step(p, cell)
            ran.append(step.__name__)
        meta = self.target.meta(self, p, cell)
        meta["processors"] = tuple(ran)
        return p.replace(meta=p.meta.replace(**meta))

    def _process_label(self, pid: int, name: str | None = None) -> str:
        if pid == self.options.pid:
            return multi.process_label(pid, "kernel" if kernel.in_kernel() else "parent")
        return multi.process_label(pid, name or procfs.cmdline(pid))


# -- what is recorded --------------------------------------------------------------------------------
class _Target:
    """What the targets share: nothing to refuse beyond the backend's choice, and nothing to add."""
    kind = ""
    notes = False

    def check(self, s: Session) -> None:
        pass

    def after(self, s: Session, p: Profile) -> Profile:
        return p


class CellTarget(_Target):
    """Code run in this process, on the calling thread (the magic, ``profile()``, ``run()``): the
    recorder starts around it, and the processors trim the profile to it."""
    kind = "cell"
    notes = True   # an interrupt is noted with the step it landed in (interrupts.py)

    def choose(self, requested: str):
        return backends.choose(requested)

    def check(self, s: Session) -> None:
        o, caps = s.options, s.module.CAPS
        if s.memory:
            s._memory()
        for k, why in caps.both_excludes.items():
            if o.mode == "both" and getattr(o, k, False):
                raise ProfilerError(f"{s.name} cannot give --mode both with --{k}: {why}. "
                                    "Fix: --mode wall or --mode cpu; or --backend sampler for both clocks.")
        if o.gil and o.mode == "wall":
            s.warn("--gil overrides --idle: only samples holding the GIL are kept")
        if o.mode == "both" and caps.one_clock_per_run:
            raise ProfilerError(rerun_refused(s.name))
        if s.children_method == "py-spy" and not caps.attach:
            raise ProfilerError("children='py-spy' needs --backend py-spy")

    def start(self, s: Session) -> None:
        o = s.options
        clocked = bool(s.module.CAPS.clocks)
        from .backends import memory as memory_backend
        memory = memory_backend if s.memory else None   # checked in check()
        o.pid = os.getpid()
        o.thread_native_id = threading.get_native_id()
        o.thread_ident = threading.get_ident()
        s.thread_name = threading.current_thread().name
        s.entries_above = exec_entries_above(sys._getframe())
        if not s.module.CAPS.inside or s.children_method is not None:
            tempdirs.sweep(validate.tmpdir())
        s.before = kernel.not_users_threads()
        if s.announce:
            what = f"{s.name} at {o.rate:g} Hz" if clocked else f"{s.name} ({memray_mode(o)})"
            if memory is not None:
                what += (f", and memory by sampling allocations ({memory.sampled_mode(o)})" if memory.sampled(o)
                         else f", and memory with memray ({memray_mode(o)})")
            workers = f" and every {s.cluster.engine} worker" if s.cluster is not None else ""
            s.announce(f"recording with {what} (pid {o.pid}){workers}…")
        backend_options = o
        if s.children_method == "hook":
            from .childsampler import Children
            s.children = Children(o.rate)
            backend_options = replace(o, subprocesses=False, extra=dict(o.extra))
        s.recorder = backends.recorder(s.module, backend_options)
        if memory is not None:
            s.recorder = memory.TimeAndMemory(s.name, s.recorder, backend_options)
        if s.cluster is not None:   # first: the workers sample from the code's first moment
            s.cluster.start()
        if s.children is not None:
            s.children.start()
        s.recorder.start()
        nested.watch()
        self.t_wall = _wall()
        self.t_cpu = _cpu()
        self.t_delay = procfs.run_delay()

    def ended(self, s: Session) -> None:
        self.wall = _wall() - self.t_wall
        self.cpu = _cpu() - self.t_cpu
        delay = procfs.run_delay()
        self.run_delay = None if delay is None or self.t_delay is None else delay - self.t_delay
        s.nested = nested.unwatch()

    def stop(self, s: Session):
        with interrupts.deferred():   # a stop cut short loses track of the profiler's process
            capture = s.recorder.stop()
        if s.children is not None:
            s.child_records = s.children.stop()
            s.child_t0 = s.children.t0
            s.child_failures = s.children.failures
        if s.cluster is not None:
            s._collect_workers()
        return capture

    def read(self, s: Session, capture) -> Profile:
        if s.memory:
            from .backends import memory
            return memory.read_both(s.module, capture, s.options)
        return s.module.read(capture, s.options)

    def close(self, s: Session) -> None:
        nested.unwatch()
        rec, s.recorder = s.recorder, None
        try:
            if rec is not None:
                rec.close()
        finally:
            ch, s.children = s.children, None
            try:
                if ch is not None:
                    ch.close()
            finally:
                if s.cluster is not None:   # idempotent; stops any sampler a worker still runs
                    s.cluster.close()

    def context(self, s: Session) -> Cell:
        return s.cell_context(self.wall, self.cpu, self.run_delay)

    def processes(self, s: Session, p: Profile, cell: Cell) -> Profile:
        """The parent's rows labelled with its process; each child's capture read, trimmed to the
        cell and appended; every process marked ended or running."""
        method = s.children_method
        if method is None:
            return p
        o = s.options
        me = s._process_label(o.pid)
        if method == "py-spy":
            p = multi.with_process(p, me, {"pid": o.pid, "backend": s.name, "role": "parent"})
            info = dict(p.meta.processes)
            for lab in multi.processes(p):
                pid = info.get(lab, {}).get("pid")
                if pid is not None and pid != o.pid:
                    info[lab] = {**info[lab], "backend": "py-spy -s", "ended": procfs.ended(pid),
                                 "missing": "the first ~0.2-0.3 s of each child: py-spy -s finds children by polling"}
            return p.with_meta(processes=info,
                               children="py-spy -s (children found by polling; their start is missed)")
        parent = (p, me, {"pid": o.pid, "backend": s.name, "role": "parent"})
        return mark_ended(children_profile(s.child_records, s.child_t0, parent=parent, cell_filename=cell.filename,
                                           label=s._process_label, warn=s.warn, failures=s.child_failures))

    def meta(self, s: Session, p: Profile, cell: Cell) -> dict:
        clocked = bool(s.module.CAPS.clocks)   # memray has no rate and no samples
        requested_rate = float(s.options.rate) if clocked else None
        thread = transforms.cell_thread(p, cell)
        rows = (p.stacks["thread"] == thread).to_numpy() if len(p.stacks) else []
        meta = dict(backend=s.name, backend_choice=s.why, requested_rate=requested_rate,
                    rate=(p.meta.get("rate") or requested_rate) if clocked else None,
                    cell_wall=cell.wall, cell_cpu=cell.cpu, cell_run_delay=cell.run_delay, duration=cell.wall,
                    pid=s.options.pid, cell_thread=thread,
                    cell_thread_samples=int(p.stacks.loc[rows, "samples"].sum()) if len(p.stacks) else 0,
                    sample_count=p.sample_count, versions={**versions(), **dict(p.meta.versions)})
        if s.cell is not None:
            meta["cell"] = s.cell
        if s.error is not None:
            meta["partial"] = f"the code raised {type(s.error).__name__}; this profile covers it up to there"
        warnings = list(p.meta.warnings) + [w for w in (s.nested, _clock_replaced()) if w]
        if warnings:
            meta["warnings"] = warnings
        if clocked:
            s.message = sampling_message(p.with_meta(**meta), s.name, cell, float(meta["rate"]))
            if s.message:
                meta["message"] = s.message
        return meta

    def after(self, s: Session, p: Profile) -> Profile:
        return s._with_workers(p) if s.cluster is not None else p


class PidsTarget(_Target):
    """Processes that run already (``attach()``, ``%profile --pid``, ``record --pid``): one recorder
    per pid from a backend that can attach, all started before any is stopped; one ``process`` each."""
    kind = "pids"
    notes = False   # the caller notes the step ("attaching to the processes")

    def __init__(self, pids: list[int], duration: float | None):
        self.pids = list(pids)
        self.duration = duration
        self.recs: list = []   # (pid, options, recorder, command line)
        self.interrupted = False

    def choose(self, requested: str):
        backend = backends.AUTO[0] if requested == "auto" else requested
        mod = backends.get(backend) if backend in backends.MODULES else None
        if mod is None or not mod.CAPS.attach:
            raise ProfilerError(f"backend {backend} runs inside the profiled process and cannot attach to "
                                f"another one; use one of: {', '.join(attachers())}")
        for pid in self.pids:
            if pid == os.getpid():
                raise ProfilerError(f"{pid} is this process; use %%profile (or profmagic.profile()) for it")
            if procfs.ended(pid):
                raise ProfilerError(f"no running process {pid}")
            if mod.CAPS.threads == "python" and procfs.is_python(pid) is False:
                raise ProfilerError(f"process {pid} ({procfs.cmdline(pid)}) is not a Python process: {backend} "
                                    "reads Python stacks. Fix: --backend perf or eu-stack record any process's "
                                    "native stacks")
        return backends.choose(backend)

    def start(self, s: Session) -> None:
        for pid in self.pids:
            o = replace(s.options, pid=pid, all_threads=True, extra=dict(s.options.extra))
            rec = backends.recorder(s.module, o)
            self.recs.append((pid, o, rec, procfs.cmdline(pid)))   # closed even if start fails
            rec.start()
        if s.announce:
            d = self.duration
            s.announce(f"recording {len(self.pids)} process(es) with {s.name} at {s.options.rate:g} Hz "
                       + (f"for {d:g} s…" if d is not None else "until interrupted…"))
        self.t0 = time.perf_counter()

    def wait(self) -> None:
        """For ``duration`` seconds, until every process ended, or until Ctrl-C (then ``partial``)."""
        d = self.duration
        try:
            while d is None or time.perf_counter() - self.t0 < d:
                if all(procfs.ended(pid) for pid in self.pids):
                    break
                time.sleep(min(0.05, max(0.0, d - (time.perf_counter() - self.t0))) if d else 0.05)
        except KeyboardInterrupt:
            self.interrupted = True

    def ended(self, s: Session) -> None:
        self.wall = time.perf_counter() - self.t0

    def stop(self, s: Session) -> list:
        return [rec.stop() for _, _, rec, _ in self.recs]

    def read(self, s: Session, captures: list) -> Profile:
        mod = s.module
        parts, labels = [], []
        for (pid, o, _, argv), cap in zip(self.recs, captures):
            try:
                p = mod.read(cap, o)
            except ProfileFormatError:
                if cap.data:          # a damaged capture is an error; an empty one recorded nothing
                    raise
                p = empty(o.mode, f"{mod.NAME} recorded nothing for process {pid} (it never ran on a CPU while "
                                  "recorded, or wrote no samples)").with_meta(backend=mod.NAME)
            lab = multi.process_label(pid, argv)
            parts.append(multi.with_process(p, lab, {"pid": pid, "argv": argv, "backend": mod.NAME}))
            labels.append(lab)
        self.first = parts[0]
        out = multi.concat(parts, key="process", labels=labels)
        return out.replace(metric=parts[0].metric)

    def close(self, s: Session) -> None:
        for _, _, rec, _ in self.recs:
            rec.close()

    def context(self, s: Session) -> Cell:
        o = s.options
        return Cell(tid=self.pids[0], thread_name="MainThread", keep_all_threads=True, mode=o.mode,
                    unmeasured=dict(s.module.CAPS.unmeasured), wall=self.wall)

    def processes(self, s: Session, p: Profile, cell: Cell) -> Profile:
        """Each process marked ended (what was sampled before its end is kept) or running."""
        return mark_ended(p)

    def meta(self, s: Session, p: Profile, cell: Cell) -> dict:
        o, first = s.options, self.first
        meta = dict(backend=s.name, attached=self.pids, duration=self.wall,
                    rate=float(first.meta.get("rate") or o.rate), requested_rate=float(o.rate), mode=o.mode,
                    timing=first.meta.get("timing"), versions={**versions(), **dict(first.meta.versions)})
        if self.interrupted:
            meta["partial"] = f"interrupted after {self.wall:.2f} s"
        return meta


class CommandTarget(_Target):
    """A command started for recording (``record -- cmd``, launch.py), from its first line: an
    out-of-process backend attached while it waits at start-up (Python) or stopped before exec
    (any program); or the built-in sampler inside it and every Python it starts (childsampler).
    The caller waits for it to end (``waited``); ``status`` is then its exit status."""
    kind = "command"
    notes = False

    def __init__(self, argv: list[str], own_group: bool = False):
        self.argv = list(argv)
        self.own_group = own_group
        self.launch = self.tmp = self.children = self.rec = None
        self.rc: int | None = None
        self.note: str | None = None
        self.end = self.go = 0.0
        self.cpu: float | None = None
        self.signals = 0
        self.hidden: tuple = ()   # folders of the command's start-up hooks (profmagic's, not the command's)

    def choose(self, requested: str):
        from . import launch
        from .terminal import escape
        self.exe = launch.resolve(self.argv[0])
        if self.exe is None:
            raise ProfilerError(f"command not found: {escape(self.argv[0])}")
        self.python = launch.is_python(self.exe)
        mod, why = self._backend(requested)
        caps, name = mod.CAPS, mod.NAME
        if caps.inside and name != "sampler":
            raise ProfilerError(f"backend {name} runs inside the profiled process and cannot record a command; "
                                "use one of: sampler, " + ", ".join(attachers()))
        if not self.python and (caps.inside or caps.threads == "python"):
            raise ProfilerError(f"{escape(self.argv[0])} is not a Python program, and {name} reads Python stacks; "
                                f"use -b with one of: {', '.join(attachers(native=True))}")
        ok, reason = mod.available()
        if not ok:
            raise ProfilerError(f"backend {name} cannot record here: {reason}")
        return mod, why

    def _backend(self, requested: str):
        if requested != "auto":
            try:
                return backends.get(requested), f"asked for {requested}"
            except ValueError as e:
                raise ProfilerError(str(e)) from None
        if self.python:
            return backends.choose("auto")
        for n in attachers(native=True):
            if backends.get(n).available()[0]:
                return backends.get(n), f"auto chose {n}: the command is not Python"
        raise ProfilerError("no backend here can record a program that is not Python: install perf or eu-stack "
                            "(elfutils)")

    def start(self, s: Session) -> None:
        from .launch import Launch, imports_site
        from .tempdirs import TempDir
        o = s.options
        self.tmp = TempDir("profmagic-record-")
        if s.module.CAPS.inside:   # the built-in sampler, in the command and every Python it starts
            from .childsampler import Children
            self.children = Children(o.rate)
            self.launch = Launch(self.argv, own_group=self.own_group)
            self.children.start()
            self.hidden = (os.path.join(self.tmp.path, ""), os.path.join(self.children.hook_dir, ""))
            self.launch.start(self.tmp.path)
            self.go = self.launch.go()
            return
        gated = self.python and imports_site(self.argv, self.exe)
        self.launch = launch = Launch(self.argv, gate=gated, stop_first=not self.python, own_group=self.own_group)
        log = launch.thread_log = self.tmp.file("threads.jsonl") if gated else None
        hook = self.tmp.file("hook")
        os.mkdir(hook)
        self.hidden = (os.path.join(self.tmp.path, ""),)
        try:
            launch.start(hook)
        except TimeoutError as e:
            raise ProfilerError(str(e)) from None
        if not launch.waiting and launch.proc.poll() is not None:
            self.rc = launch.close()
            raise ProfilerError(f"the command ended (exit {self.rc}) before {s.name} could record it")
        if self.python and not gated:
            self.note = ("the command's Python imports no sitecustomize (-I, -E or -S), so it could not wait: "
                         "the recorder attached after it started, and its first moments are missing")
        o.pid = o.thread_native_id = launch.pid
        o.all_threads = True
        o.extra["thread_log"] = log
        o.extra["wait_exec"] = launch.stop_first   # eu-stack: no snapshot while the launcher execs
        self.rec = backends.recorder(s.module, o)
        self.rec.start()
        self.go = launch.go()
        if hasattr(self.rec, "bounds"):
            self.rec.bounds(start=self.go)

    def counter(self):
        """Samples so far for a progress line, or None (a recorder that does not stream them)."""
        if self.children is not None:
            return self.children.samples_so_far
        live = getattr(self.rec, "live", None)
        if not callable(live):
            return None

        def count():
            got = live()
            return None if got is None else int(sum(row[2] for row in got[0][2]))
        return count

    def waited(self, end: float, cpu: float | None, signals: int = 0) -> None:
        """The command ended at ``end`` (time.monotonic()) having used ``cpu`` s; ``signals``: how many
        were forwarded to it meanwhile."""
        self.end, self.cpu, self.signals = end, cpu, signals

    def ended(self, s: Session) -> None:
        if self.rec is not None and hasattr(self.rec, "bounds"):
            self.rec.bounds(end=self.end)

    def stop(self, s: Session):
        if self.children is not None:
            self.t0 = self.children.t0
            return self.children.stop()
        return self.rec.stop()

    def read(self, s: Session, capture) -> Profile:
        mode = s.options.mode
        if self.children is not None:
            if not capture:
                return empty(mode, "the command wrote no samples: it ended before Python started, or its Python "
                                   "ignores PYTHONPATH (-I, -E, -S); use -b py-spy")
            try:
                p = children_profile(capture, self.t0, what="process", failures=self.children.failures)
            except ProfileFormatError as e:
                return empty(mode, str(e))
            return p.replace(metric=mode) if mode != "both" and mode in p.metrics else p
        try:
            return s.module.read(capture, s.options)
        except (ProfilerError, ProfileFormatError) as e:   # the command ran: a profile that says why
            return empty(mode, nothing_recorded(s.module, mode, e, self.cpu))

    def close(self, s: Session) -> None:
        try:
            for part in (self.rec, self.children):
                if part is not None:
                    part.close()
        finally:
            if self.launch is not None:
                rc = self.launch.close()
                self.rc = rc if rc is not None else self.rc
            if self.tmp is not None:
                self.tmp.close()

    def context(self, s: Session) -> Cell:
        return Cell(tid=self.launch.pid, thread_name="MainThread", keep_all_threads=True, mode=s.options.mode,
                    unmeasured=dict(s.module.CAPS.unmeasured), hidden=self.hidden, wall=self.end - self.go,
                    cpu=self.cpu or 0.0)

    def processes(self, s: Session, p: Profile, cell: Cell) -> Profile:
        """Each process the built-in sampler recorded is marked ended or running (``children_profile``
        labelled them); a recorder attached to the command has one process."""
        return mark_ended(p) if p.meta.processes else p

    @property
    def status(self) -> int:
        from .launch import exit_status
        return exit_status(self.rc)

    def meta(self, s: Session, p: Profile, cell: Cell) -> dict:
        import signal
        o, duration = s.options, self.end - self.go
        meta = dict(backend=s.name, command=list(self.argv), pid=self.launch.pid, exit_status=self.status,
                    duration=duration, mode=o.mode, requested_rate=float(o.rate),
                    rate=p.meta.get("rate") or float(o.rate))
        if self.cpu is not None:
            meta["command_cpu"] = self.cpu
        if self.rc is not None and self.rc < 0:
            meta["ended_by"] = signal.Signals(-self.rc).name
        partial = [self.note] if self.note else []
        if self.signals:
            partial.append(f"interrupted after {duration:.2f} s (the signal went to the command, which then ended)")
        elif p.meta.get("partial"):
            partial.append(p.meta["partial"])
        if partial:
            meta["partial"] = "; ".join(partial)
        return meta


def attachers(native: bool = False) -> list[str]:
    """Backends that record another process (``native``: any program's threads, not only Python's)."""
    return [n for n in backends.names() if backends.get(n).CAPS.attach
            and not (native and backends.get(n).CAPS.threads == "python")]


def empty(mode: str | None, why: str) -> Profile:
    """A profile with no samples that says why (its ``warnings``)."""
    from .model import StackBuilder
    metric = "cpu" if mode == "cpu" else "wall"
    return StackBuilder().build(metric=metric, meta={"format": "profmagic-record", "warnings": (why,)},
                                metrics=["wall", "cpu"] if mode == "both" else [metric])


def nothing_recorded(mod, mode: str | None, error: Exception, cpu: float | None) -> str:
    """Why a recording of a command that ran holds no samples, in one line."""
    ran = f"the command ran {cpu:.2f} s on CPU" if cpu is not None else "the command ran"
    if mod.NAME == "perf" and "no perf script samples" in str(error):
        return (f"{ran}: perf saw no samples"
                + (" (its cpu-clock counts on-CPU time only: --mode wall records the waiting too)"
                   if mode == "cpu" else ""))
    return f"{ran}, and {mod.NAME} recorded nothing: {' '.join(str(error).split())}"


# -- processes that sampled themselves ----------------------------------------------------------------
CHILDREN_NOTE = ("each child sampled itself from its start (fork hook / sitecustomize); not recorded: "
                 "non-Python children and Pythons started with -S, -I or a cleared environment")


def children_profile(records: dict, t0: float, *, parent: tuple | None = None, cell_filename: str | None = None,
                     what: str = "child", label: Callable | None = None, warn: Callable | None = None,
                     failures: dict | None = None) -> Profile:
    """The processes that sampled themselves (childsampler: ``records`` by (pid, image)) as one
    profile, one ``process`` label each, after ``parent`` ((profile, label, info): the recording
    process) when given. The one builder for a cell's ``--subprocesses`` and ``record -b sampler``.
    A capture that cannot be read is left out and said (``warn``) while another can be; with
    ``cell_filename``, a forked child's stacks are cut above the cell. One process and no parent:
    its profile as it is, unlabelled."""
    from .formats import children
    label = label or multi.process_label
    parts, labels, infos, unreadable, first_error = [], [], [], {}, None
    last_image = dict(sorted(records))   # pid -> its last image (exec)
    for (pid, image), data in sorted(records.items()):
        source = f"{what} {pid}" + (f" (exec {image})" if image else "")
        try:   # one bad capture must not lose the others, nor the parent's
            c = children.read(data, source=source, t0=t0)
        except ProfileFormatError as e:
            first_error = first_error or e
            unreadable[source] = str(e)
            if warn is not None:
                warn(f"{source} left out: its capture is unreadable ({e})")
            continue
        if cell_filename:   # a forked child carries the cell's frames: cut above them
            c = transforms.trim_to_cell(c, cell_filename, threads=[])
        lab = label(pid, multi.child_name(c))
        if lab in labels or (parent is not None and lab == parent[1]):   # the same pid and argv before and after an exec
            lab += f" · exec {image}"
        info = {"pid": pid, "ppid": c.meta.get("ppid"), "argv": c.meta.get("argv"),
                "backend": "childsampler", "rate": c.meta.get("rate"),
                "started_at": c.meta.get("started_at"), "samples": c.sample_count,
                "last_image": image >= last_image[pid], "last_sample_at": c.meta.get("last_sample_at")}
        if image:
            info["exec"] = image   # this pid's image after its image-th exec
        if c.meta.get("torn_lines"):
            info["torn_lines"] = c.meta["torn_lines"]
        parts.append(c)
        labels.append(lab)
        infos.append(info)
    if parent is None and not parts:
        if first_error is None:
            raise ValueError("children_profile needs a capture or a parent")
        raise first_error
    if parent is None and len(parts) == 1:
        return parts[0]
    parts = [multi.with_process(c, lab, info) for c, lab, info in zip(parts, labels, infos)]
    if parent is not None:
        p, me, info = parent
        parts.insert(0, multi.with_process(p, me, info))
        labels.insert(0, me)
    merged = multi.concat(parts, key="process", labels=labels)
    if parent is None:
        return merged.with_meta(unreadable_children=unreadable or None, children_not_recorded=failures or None)
    meta = p.meta.replace(processes=merged.meta.processes, unreadable_children=unreadable or None,
                          children_not_recorded=failures or None, children=CHILDREN_NOTE)
    return merged.replace(meta=meta, metric=p.metric)


def mark_ended(p: Profile) -> Profile:
    """Each process of ``p`` marked ended or running (not the recording process itself): one that
    sampled itself with when its last sample was, an image that a later ``exec`` replaced as ended;
    one attached to with a note that its samples up to its end are kept."""
    info = {}
    for lab, i in p.meta.processes.items():
        i = dict(i)
        if i.get("pid") is not None and i.get("role") != "parent":
            last, at = i.pop("last_image", True), i.pop("last_sample_at", None)
            i["ended"] = procfs.ended(i["pid"]) or not last
            if i["ended"] and i.get("backend") == "childsampler":
                i["ended_at"] = at
            elif i["ended"]:
                i["ended_note"] = "the process ended during the recording; samples up to its end are kept"
        info[lab] = i
    return p.with_meta(processes=info)


MIN_SAMPLES = 5   # fewer samples of the cell's thread than this, and the user is told


def sampling_message(p: Profile, backend: str, cell: Cell, rate: float) -> str | None:
    """What was measured and observed when the cell's thread has fewer than MIN_SAMPLES samples;
    None when it has enough. It names causes only from what was seen, never guesses."""
    thread = transforms.cell_thread(p, cell)
    per = p.stacks.groupby("thread", observed=True)["samples"].sum() if len(p.stacks) else {}
    mine = int(per.get(thread, 0)) if len(per) else 0
    if mine >= MIN_SAMPLES or "calls" in p.stacks:   # a tracer (cProfile) has calls, not samples
        return None
    others = {t: int(n) for t, n in per.items() if t != thread and n}
    head = "no samples" if not p.sample_count else f"too few samples ({mine} of the cell's thread)"
    msg = (f"profmagic: {head}: the code ran {cell.wall * 1e3:.1f} ms wall ({cell.cpu * 1e3:.1f} ms CPU); "
           f"{backend} sampled at {rate:g} Hz (every {1e3 / rate:.1f} ms) and recorded {mine} sample(s) of the "
           f"cell's thread" + (f" and {sum(others.values())} of {len(others)} other thread(s)" if others else "") + ".")
    seen = p.meta.get("tool_report")
    if seen:
        msg += f" {seen}."
    if cell.wall < 5 / rate:
        msg += " The code ran for fewer than five sampling periods: run it longer (e.g. in a loop) or raise --rate."
    elif cell.mode == "cpu" and cell.cpu < 5 / rate:
        msg += (" It used little CPU and this recording counts CPU time only: --mode both (the default) "
                "or --mode wall counts the waiting too.")
    elif seen:
        msg += " --backend sampler reads the stacks from inside the process."
    return msg


def record(backend: str, options: Options, run_callable: Callable[[], object], **session_kw) -> Profile:
    """Profile ``run_callable()``. If it raises, the original exception propagates; use ``run()`` to
    get the partial profile too."""
    profile, error = run(backend, options, run_callable, **session_kw)
    if error is not None:
        raise error
    return profile


def run(backend: str, options: Options, run_callable: Callable[[], object], started=None,
        **session_kw) -> tuple[Profile | None, BaseException | None]:
    """(profile, the exception the code raised or None). KeyboardInterrupt included. ``started``:
    called with the Session once it records; what it returns is called before the Session finishes
    (the live view)."""
    if options.mode == "both" and backend != "auto" and backends.get(backend).CAPS.one_clock_per_run:
        if not options.extra.get("rerun"):
            raise ProfilerError(rerun_refused(backend))
        if session_kw.get("cluster") is not None:
            raise ProfilerError(CLUSTER_ALONE.format(option="--rerun"))
        return run_twice(backend, options, run_callable, **session_kw)
    s = Session(backend, options, **session_kw)
    try:
        s.start()
    except KeyboardInterrupt as e:   # maybe after the recorder started, before start() returned
        with interrupts.deferred():
            s.close()
        raise interrupts.note(e, f"starting {s.recording_what}", interrupts.NOTHING)
    error = None
    try:
        with interrupts.at("starting the live view", interrupts.NOTHING):
            done = started(s) if started is not None else None
        try:
            try:
                run_callable()
            except BaseException as e:  # noqa: B902 - the partial profile is shown, then it is re-raised
                error = e
        finally:
            if done is not None:
                with interrupts.at("stopping the live view", interrupts.LOST):
                    done()
        profile = s.finish(error)
    finally:
        with interrupts.deferred():
            s.close()
    return profile, error


RERUN_WARNING = ("WARNING: --rerun: {backend} measures one clock per run, so the code runs TWICE: first for "
                 "wall time, then for CPU time. Its side effects happen twice. The two metrics come "
                 "from two different runs.")


def run_twice(backend: str, options: Options, run_callable: Callable[[], object],
              **session_kw) -> tuple[Profile | None, BaseException | None]:
    """--mode both --rerun: run once with the wall clock and once with the CPU clock, then merge by
    stack. Never silent: it warns before the first run. A first run that raises is not repeated."""
    print("profmagic: " + RERUN_WARNING.format(backend=backend), file=sys.stderr)
    wall, error = run(backend, replace(options, mode="wall", extra=dict(options.extra)), run_callable,
                      **session_kw)
    if error is not None or wall is None:
        return wall, error
    cpu, error = run(backend, replace(options, mode="cpu", extra=dict(options.extra)), run_callable,
                     **session_kw)
    if cpu is None or error is not None:
        return wall, error
    return transforms.merge_runs(wall, cpu), None


class profile:
    """Context manager: ``with profmagic.profile("sampler", mode="both") as rec: work()``; then
    ``rec.profile``. Exceptions from the block propagate after the profile is built. ``cluster=``
    ("dask", a ``distributed.Client``, "ray"): every worker of that cluster is recorded too."""

    def __init__(self, backend: str = "auto", cluster=None, **options):
        announce = options.pop("announce", lambda text: print(text, file=sys.stderr))
        # No clock asked for: the backend's default (perf: CPU), as %%profile and attach() choose it.
        opts = make_options(**{"mode": None, **options})
        if opts.mode == "both" and backend != "auto" and backends.get(backend).CAPS.one_clock_per_run:
            raise ProfilerError(rerun_refused(backend).replace(
                "add --rerun to allow the second run", "a with block cannot run twice: profile a function "
                "with profmagic.session.record(backend, options, fn) and rerun=True, or %%profile --rerun"))
        self.session = Session(backend, opts, announce=announce, cluster=cluster)
        self.profile: Profile | None = None

    def __enter__(self):
        self.session.start()
        return self

    def __exit__(self, et, ev, tb):
        try:
            self.profile = self.session.finish(ev)
        finally:
            self.session.close()
        if self.session.message:
            print(self.session.message, file=sys.stderr)
        return False

    @property
    def message(self):
        return self.session.message

"""One recording: start a backend, run the code, stop, read, run the processors, clean up.

Used by the ``%%profile`` magic and by the ``profmagic.profile()`` context
manager::

    with profmagic.profile("sampler", mode="both") as rec:
        work()
    rec.profile

With ``cluster=`` ("dask", a ``distributed.Client``, "ray"), every worker of that cluster is recorded
too (profmagic/cluster/): one Profile, the driver (this process) and one rank per worker.
"""
from __future__ import annotations

import os
import platform
import sys
import threading
import time
from dataclasses import fields, replace
from typing import Callable

from . import backends, interrupts, kernel, multi, nested, procfs, tempdirs, threads, transforms, validate
from .backends.base import Options, default_mode
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
    if options.extra.get("allocated"):
        return "every allocation: --allocated, slower to read back"
    if options.subprocesses:
        return "every allocation, as forked children need: slower to read back"
    return "aggregated: bytes at the high-water mark; --allocated records every allocation"


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
    """One recording. ``start()``; run the code; ``finish(error)`` -> Profile; ``close()`` always."""

    def __init__(self, backend: str = "auto", options: Options | None = None, *, cell: str | None = None,
                 cell_filename: str | None = None, file_names: dict | None = None,
                 announce: Callable[[str], None] | None = None, tracker=None, cluster=None):
        self.requested = backend
        self.tracker = tracker         # awaits.Tracker of a top-level-await cell
        self.options = options or Options()
        if cell_filename:
            self.options.cell_filename = cell_filename
        self.cell = cell
        self.file_names = file_names or {}
        self.announce = announce
        self.module = None
        self.why = ""
        self.recorder = None
        self.profile: Profile | None = None
        self.message: str | None = None
        self.error: BaseException | None = None
        self.children = None           # childsampler.Children while --subprocesses records children
        self.child_records: dict = {}   # (pid, image) -> that process image's capture
        self.child_failures: dict = {}  # pid -> why the start-up hook did not record that child
        self.child_t0 = 0.0
        self.cluster = self._cluster_recording(cluster)   # cluster.Recording of the workers, or None
        self.cluster_error: str | None = None

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

    def start(self) -> None:
        self.module, self.why = backends.choose(self.requested)
        o = self.options
        clocked = bool(self.module.CAPS.clocks)
        if not clocked:   # memory, not time: there is no clock to choose
            o.mode = None
        elif o.mode is None:
            o.mode = default_mode(self.module.CAPS, o)
        memray = self._memray() if self.memory else None
        for k, why in self.module.CAPS.both_excludes.items():
            if o.mode == "both" and getattr(o, k, False):
                raise ProfilerError(f"{self.name} cannot give --mode both with --{k}: {why}. "
                                    "Fix: --mode wall or --mode cpu; or --backend sampler for both clocks.")
        if o.gil and o.mode == "wall":
            self.warn("--gil overrides --idle: only samples holding the GIL are kept")
        if o.mode == "both" and self.module.CAPS.one_clock_per_run:
            raise ProfilerError(rerun_refused(self.name))
        o.pid = os.getpid()
        o.thread_native_id = threading.get_native_id()
        o.thread_ident = threading.get_ident()
        self.thread_name = threading.current_thread().name
        self.entries_above = exec_entries_above(sys._getframe())
        if not self.module.CAPS.inside or self.children_method is not None:
            tempdirs.sweep(validate.tmpdir())
        self.before = kernel.not_users_threads()
        if self.announce:
            what = f"{self.name} at {o.rate:g} Hz" if clocked else f"{self.name} ({memray_mode(o)})"
            if memray is not None:
                what += f", and memory with memray ({memray_mode(o)})"
            workers = f" and every {self.cluster.engine} worker" if self.cluster is not None else ""
            self.announce(f"recording with {what} (pid {o.pid}){workers}…")
        backend_options = o
        if self.children_method == "hook":
            from .childsampler import Children
            self.children = Children(o.rate)
            backend_options = replace(o, subprocesses=False, extra=dict(o.extra))
        elif self.children_method == "py-spy" and not self.module.CAPS.attach:
            raise ProfilerError("children='py-spy' needs --backend py-spy")
        self.recorder = backends.recorder(self.module, backend_options)
        if memray is not None:
            self.recorder = memray.TimeAndMemory(self.name, self.recorder, backend_options)
        try:
            if self.cluster is not None:   # first: the workers sample from the code's first moment
                self.cluster.start()
            if self.children is not None:
                self.children.start()
            self.recorder.start()
        except BaseException:
            with interrupts.deferred():
                self.close()
            raise
        nested.watch()
        self.t_wall = _wall()
        self.t_cpu = _cpu()
        self.t_delay = procfs.run_delay()

    def _memray(self):
        """backends.memray, once it is known that it can go with this backend (``memory``)."""
        from .backends import memray
        why = memray.refusal(self.name) or (
            "--memory records the parent process only; --backend memray --subprocesses records forked "
            "children's memory" if self.options.subprocesses else None)
        if why:
            raise ProfilerError(f"--memory with --backend {self.name}: {why}")
        ok, reason = memray.available()
        if not ok:
            raise ProfilerError(f"backend memray cannot record here: {reason}")
        return memray

    def warn(self, text: str) -> None:
        print(f"profmagic: {text}", file=sys.stderr)

    def close(self) -> None:
        nested.unwatch()
        rec, self.recorder = self.recorder, None
        try:
            if rec is not None:
                rec.close()
        finally:
            ch, self.children = self.children, None
            try:
                if ch is not None:
                    ch.close()
            finally:
                if self.cluster is not None:   # idempotent; stops any sampler a worker still runs
                    self.cluster.close()

    def finish(self, error: BaseException | None = None) -> Profile | None:
        """Stop, read and process. Call from the thread that ran the code, right after it."""
        wall = _wall() - self.t_wall
        cpu = _cpu() - self.t_cpu
        delay = procfs.run_delay()
        self.nested = nested.unwatch()
        self.error = error
        try:
            with interrupts.at(f"stopping {self.recording_what}", interrupts.LOST):
                with interrupts.deferred():   # a stop cut short loses track of the profiler's process
                    capture = self.recorder.stop()
                if self.children is not None:
                    self.child_records = self.children.stop()
                    self.child_t0 = self.children.t0
                    self.child_failures = self.children.failures
                if self.cluster is not None:
                    self._collect_workers()
            with interrupts.at(f"reading what {self.recording_what} recorded", interrupts.LOST):
                if self.memory:
                    profile = self._memray().read_both(self.module, capture, self.options)
                else:
                    profile = self.module.read(capture, self.options)
        finally:
            with interrupts.deferred():   # children reaped and files removed, even on a second Ctrl-C
                self.close()
        run_delay = None if delay is None or self.t_delay is None else delay - self.t_delay
        with interrupts.at("building the profile", interrupts.LOST):
            self.profile = self.process(profile, self.cell_context(wall, cpu, run_delay))
            if self.cluster is not None:
                self.profile = self._with_workers(self.profile)
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
        """The declared post-processing: the common processors, the backend's own, children, names."""
        own = getattr(self.module, "PROCESSORS", ())
        return transforms.PROCESSORS + tuple(own) + (self._with_children,) + transforms.FINAL

    def process(self, p: Profile, cell: Cell) -> Profile:
        clocked = bool(self.module.CAPS.clocks)   # memray has no rate and no samples
        requested_rate = float(self.options.rate) if clocked else None
        if self.children_method == "py-spy":
            p = transforms.group_processes(p, self._process_label)
        for step in self.processors():
            p = step(p, cell)
        thread = transforms.cell_thread(p, cell)
        rows = (p.stacks["thread"] == thread).to_numpy() if len(p.stacks) else []
        meta = dict(backend=self.name, backend_choice=self.why, requested_rate=requested_rate,
                    rate=(p.meta.get("rate") or requested_rate) if clocked else None,
                    cell_wall=cell.wall, cell_cpu=cell.cpu, cell_run_delay=cell.run_delay, duration=cell.wall, pid=self.options.pid, cell_thread=thread,
                    cell_thread_samples=int(p.stacks.loc[rows, "samples"].sum()) if len(p.stacks) else 0,
                    sample_count=p.sample_count, versions={**versions(), **dict(p.meta.versions)})
        if self.cell is not None:
            meta["cell"] = self.cell
        if self.error is not None:
            meta["partial"] = f"the code raised {type(self.error).__name__}; this profile covers it up to there"
        warnings = list(p.meta.warnings) + [w for w in (self.nested, _clock_replaced()) if w]
        if warnings:
            meta["warnings"] = warnings
        p = p.replace(meta=p.meta.replace(**meta))
        self.message = sampling_message(p, self.name, cell, float(meta["rate"])) if clocked else None
        return p.with_meta(message=self.message) if self.message else p

    def _process_label(self, pid: int, name: str | None = None) -> str:
        if pid == self.options.pid:
            return multi.process_label(pid, "kernel" if kernel.in_kernel() else "parent")
        return multi.process_label(pid, name or procfs.cmdline(pid))

    def _with_children(self, p: Profile, cell: Cell) -> Profile:
        """The parent's rows labelled with its process; each child's capture read, trimmed to the
        cell and appended; every process marked ended or running."""
        if self.children_method is None:
            return p
        from .formats import children
        o = self.options
        me = self._process_label(o.pid)
        p = multi.with_process(p, me, {"pid": o.pid, "backend": self.name, "role": "parent"})
        if self.children_method == "py-spy":
            info = dict(p.meta.processes)
            for lab in multi.processes(p):
                pid = info.get(lab, {}).get("pid")
                if pid is not None and pid != o.pid:
                    info[lab] = {**info[lab], "backend": "py-spy -s", "ended": procfs.ended(pid),
                                 "missing": "the first ~0.2-0.3 s of each child: py-spy -s finds children by polling"}
            return p.with_meta(processes=info,
                               children="py-spy -s (children found by polling; their start is missed)")
        parts, labels = [p], [me]
        last_image = dict(sorted(self.child_records))   # pid -> its last image (exec)
        unreadable = {}
        for (pid, image), data in sorted(self.child_records.items()):
            source = f"child {pid}" + (f" (exec {image})" if image else "")
            try:   # one bad capture must not lose the others, nor the parent's
                c = children.read(data, source=source, t0=self.child_t0)
            except ProfileFormatError as e:
                unreadable[source] = str(e)
                self.warn(f"{source} left out: its capture is unreadable ({e})")
                continue
            if cell.filename:   # a forked child carries the cell's frames: cut above them
                c = transforms.trim_to_cell(c, cell.filename, threads=[])
            lab = self._process_label(pid, multi.child_name(c))
            if lab in labels:   # the same pid and command line before and after an exec
                lab += f" · exec {image}"
            info = {"pid": pid, "ppid": c.meta.get("ppid"), "argv": c.meta.get("argv"),
                    "backend": "childsampler", "rate": c.meta.get("rate"),
                    "started_at": c.meta.get("started_at"),
                    "ended": procfs.ended(pid) or image < last_image[pid], "samples": c.sample_count}
            if image:
                info["exec"] = image   # this pid's image after its image-th exec
            if info["ended"]:
                info["ended_at"] = c.meta.get("last_sample_at")
            if c.meta.get("torn_lines"):
                info["torn_lines"] = c.meta["torn_lines"]
            parts.append(multi.with_process(c, lab, info))
            labels.append(lab)
        merged = multi.concat(parts, key="process", labels=labels)
        meta = p.meta.replace(
            processes=merged.meta.processes, unreadable_children=unreadable or None,
            children_not_recorded=self.child_failures or None,
            children=("each child sampled itself from its start (fork hook / sitecustomize); not recorded: "
                      "non-Python children and Pythons started with -S, -I or a cleared environment"))
        return merged.replace(meta=meta, metric=p.metric)


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

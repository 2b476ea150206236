"""Record one piece of code with one backend: resolve, start, run, stop, read, transform, clean up.

Used by the ``%%profile`` magic and by the ``profmagic.profile()`` context manager::

    with profmagic.profile("py-spy", idle=True) as rec:
        work()
    rec.profile
"""
from __future__ import annotations

import os
import re
import sys
import threading
import time
from dataclasses import fields, replace
from typing import Callable

import numpy as np

from . import backends, transforms
from .backends.base import Capture, Options, thread_label
from .errors import ProfileFormatError, ProfilerError
from .pyspy_cpu import runnable_seconds
from .profile import Profile

BACKENDS = ("auto",) + tuple(backends.names())
# Samplers whose weights are 1/requested rate per sample: their seconds are calibrated to the cell.
CALIBRATED = {"py-spy"}
# One clock per run: --mode both runs the code twice, and only when asked (--rerun).
ONE_CLOCK = {"pyinstrument", "cprofile"}
# CPU time only: in --mode both their wall time is unknown (NaN), never zero.
CPU_ONLY = {"perf": "perf samples cpu-clock, which counts on-CPU time only: a waiting thread is never "
                    "sampled, so wall time is unknown"}
# Calibrating on the cell thread's CPU time needs enough of it: at least MIN_PERIODS sampling
# periods (a thread that mostly waits for threads it started leaks a few "active" samples over almost
# no CPU: 5776 Hz was seen), and at most MAX_RATE_RATIO x the requested rate in samples per second the
# thread was runnable. py-spy without --idle counts a thread in state R as active, and R is on a core
# or waiting for one: on a loaded machine a 0.3 s CPU spin gave 180 such samples at 100 Hz, so the
# bound is over CPU + run-queue time (/proc schedstat), or over wall time where that is unknown.
MIN_PERIODS = 5
MAX_RATE_RATIO = 4.0


def run_delay() -> float | None:
    """Seconds the calling thread has waited on a run queue (runnable, not on a core), or None."""
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def rerun_refused(backend: str) -> str:
    return (f"{backend} measures one clock per run, so --mode both would run the code twice (once for "
            "wall time, once for CPU time). The code may not be safe to run twice, so profmagic never "
            "does it silently. Fix: add --rerun to allow the second run; or use --backend sampler "
            "(or py-spy, eu-stack), which give both clocks from one run.")


def resolve(name: str, options: Options) -> tuple[object, str]:
    """The backend module for ``name`` and a sentence saying what was chosen and why."""
    if name not in BACKENDS:
        raise ProfilerError(f"unknown backend {name!r}; choose one of: {', '.join(BACKENDS)}")
    if name != "auto":
        mod = backends.get(name)
        ok, reason = mod.available()
        if not ok:
            raise ProfilerError(f"backend {name} cannot record here: {reason}")
        return mod, f"{name}: {reason}"
    mod = backends.get("py-spy")
    ok, reason = mod.available()
    if ok:
        return mod, f"auto chose py-spy ({reason})"
    fallback = backends.get("sampler")
    return fallback, f"auto chose the built-in sampler: py-spy is not usable here ({reason})"


def make_options(**kw) -> Options:
    known = {f.name for f in fields(Options)}
    extra = {k: v for k, v in kw.items() if k not in known}
    opts = Options(**{k: v for k, v in kw.items() if k in known})
    opts.extra.update(extra)
    return opts


def _versions() -> dict:
    from . import __version__
    import platform
    v = {"profmagic": __version__, "python": platform.python_version()}
    for mod in ("IPython", "ipykernel"):
        m = sys.modules.get(mod)
        if m is not None:
            v[mod] = getattr(m, "__version__", None)
    return v


class Session:
    """One recording. ``start()``; run the code; ``finish(error)`` -> Profile (or None with no samples).

    The recorder is always closed in ``finish`` (or ``abort``), whatever happened.
    """

    def __init__(self, backend: str = "auto", options: Options | None = None, *, cell: str | None = None,
                 cell_filename: str | None = None, file_names: dict | None = None,
                 announce: Callable[[str], None] | None = None):
        self.requested = backend
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
        self.children = None          # childsampler.Children while --subprocesses records children
        self.child_records: dict | None = None
        self.child_failures: dict = {}   # pid -> why the start-up hook did not record that child
        self.t_delay = self.cell_delay = None   # run-queue seconds (run_delay): at start, then over the cell

    @property
    def children_method(self) -> str | None:
        """How children are recorded: "hook" (each child samples itself from its start) or
        "py-spy" (py-spy -s, which finds them by polling)."""
        o = self.options
        if not o.subprocesses:
            return None
        return o.extra.get("children", "hook")

    @property
    def name(self) -> str:
        return getattr(self.module, "NAME", self.requested)

    def start(self) -> None:
        self.module, self.why = resolve(self.requested, self.options)
        if self.options.gil and self.options.idle:
            self.warn("--gil overrides --idle: only samples holding the GIL are kept")
        o = self.options
        o.pid = os.getpid()
        o.thread_native_id = threading.get_native_id()
        o.thread_ident = threading.get_ident()
        self.thread_name = threading.current_thread().name
        # Threads that are not the user's: the kernel's own when in a kernel, else all alive now.
        self.before = not_users_threads()
        if self.announce:
            self.announce(f"recording with {self.name} at {o.rate:g} Hz (pid {o.pid})…")
        backend_options = o
        if self.children_method == "hook":
            from .childsampler import Children
            self.children = Children(o.rate)
            backend_options = replace(o, subprocesses=False)
        elif self.children_method == "py-spy" and self.name != "py-spy":
            raise ProfilerError("children='py-spy' needs --backend py-spy")
        if o.mode == "both" and self.name in ONE_CLOCK:
            raise ProfilerError(rerun_refused(self.name))
        if o.mode == "both" and self.name == "py-spy":
            from . import pyspy_cpu   # two py-spy at once: --idle (wall) and without (cpu)
            self.recorder = pyspy_cpu.PairRecorder(backend_options)
        else:
            self.recorder = self.module.Recorder(backend_options)
        try:
            if self.children is not None:
                self.children.start()
            self.recorder.start()
        except BaseException:
            self.close()
            raise
        self.t_wall = time.perf_counter()
        self.t_cpu = time.thread_time()
        self.t_delay = run_delay()

    def warn(self, text: str) -> None:
        print(f"profmagic: {text}", file=sys.stderr)

    def close(self) -> None:
        rec, self.recorder = self.recorder, None
        try:
            if rec is not None:
                rec.close()
        finally:
            ch, self.children = self.children, None
            if ch is not None:
                ch.close()

    def finish(self, error: BaseException | None = None) -> Profile | None:
        """Stop, read and transform. Call from the thread that ran the code, right after it."""
        cell_wall = time.perf_counter() - self.t_wall
        cell_cpu = time.thread_time() - self.t_cpu
        delay = run_delay()
        self.cell_delay = None if delay is None or self.t_delay is None else delay - self.t_delay
        self.error = error
        try:
            capture = self.recorder.stop()
            if self.children is not None:
                self.child_records = self.children.stop()
                self.child_t0 = self.children.t0
                self.child_failures = self.children.failures
            if isinstance(capture.meta.get("wall"), Capture):
                from . import pyspy_cpu
                profile = pyspy_cpu.read_pair(capture, self.options)
            else:
                profile = self.module.read(capture, self.options)
        finally:
            self.close()
        self.profile = self._transform(profile, cell_wall, cell_cpu)
        return self.profile

    def _transform(self, p: Profile, cell_wall: float, cell_cpu: float) -> Profile | None:
        o = self.options
        requested_rate = float(o.rate)
        mine = [t for t in p.threads if transforms.thread_native_id(t) == o.thread_native_id]
        cell_thread = mine[0] if mine else thread_label(o.thread_native_id, self.thread_name)
        if self.children_method == "py-spy":
            p = transforms.split_processes(p, lambda pid: self._process_label(pid))
        if not o.all_threads:
            p = transforms.drop_kernel_threads(p, o.thread_native_id, self.before)
        # py-spy caches thread names by pthread id, which a new thread may reuse: trust the live names.
        live = {t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}
        fix = {lab: thread_label(tid, live[tid]) for lab in p.threads
               if (tid := transforms.thread_native_id(lab)) in live}
        fix.setdefault(cell_thread, thread_label(o.thread_native_id, self.thread_name))
        p = transforms.relabel_threads(p, fix)
        cell_thread = fix[cell_thread]
        if o.cell_filename:
            p = transforms.trim_to_cell(p, o.cell_filename, threads=[cell_thread])
        if o.mode == "both":
            p = self._both(p)
        if self.name in CALIBRATED:
            if mine:
                p = self._calibrate(p, cell_thread, cell_wall, cell_cpu, requested_rate)
            else:
                p = p.replace(meta={**p.meta, "calibrated": False, "rate": requested_rate, "calibration_note":
                                    "not calibrated: the cell's thread has no samples; weights are 1/requested rate"})
        if self.children_method is not None:
            p = self._with_children(p)
        if self.file_names:
            p = transforms.rename_files(p, self.file_names)
        meta = dict(p.meta)
        rate = meta.get("rate") or requested_rate
        meta.update(backend=self.name, backend_choice=self.why, requested_rate=requested_rate, rate=rate,
                    cell_wall=cell_wall, cell_cpu=cell_cpu, cell_run_delay=self.cell_delay,
                    duration=cell_wall, pid=o.pid, cell_thread=cell_thread,
                    cell_thread_samples=int(p.stacks.loc[p.stacks["thread"] == cell_thread, "samples"].sum())
                    if len(p.stacks) else 0,
                    sample_count=p.sample_count,
                    versions={**_versions(), **(meta.get("versions") or {})})
        if self.cell is not None:
            meta["cell"] = self.cell
        if self.error is not None:
            meta["partial"] = f"the code raised {type(self.error).__name__}; this profile covers it up to there"
        p = p.replace(meta=meta)
        if p.is_empty:
            self.message = no_samples_message(self.name, cell_wall, cell_cpu, rate, p.metric)
            p.meta["message"] = self.message
        return p

    def _both(self, p: Profile) -> Profile:
        """--mode both: wall and cpu columns. What a backend cannot measure stays NaN, and is said."""
        st = p.stacks
        note = CPU_ONLY.get(self.name)
        if note is not None:
            if "cpu" not in st:
                st = st.assign(cpu=st["wall"] if "wall" in st else np.nan)
            st = st.assign(wall=np.nan)
            return p.replace(stacks=st, metric="cpu",
                             meta={**p.meta, "mode": "both", "unknown": {"wall": note}})
        for m in ("wall", "cpu"):
            if m not in st:
                st = st.assign(**{m: np.nan})
        return p.replace(stacks=st, meta={**p.meta, "mode": "both"})

    def _calibrate(self, p: Profile, thread: str, cell_wall: float, cell_cpu: float,
                   requested: float) -> Profile:
        """Weigh py-spy's samples by the inverse of the cell thread's effective rate (its samples over
        its measured time), so the seconds agree with %%time; the raw counts stay in ``samples``.
        ``rate`` becomes that per-thread rate, the requested one stays in ``requested_rate``."""
        from . import pyspy_cpu
        delay = self.cell_delay
        if "cpu" in p.stacks and "wall" in p.stacks and p.meta.get("mode") == "both":
            return pyspy_cpu.calibrate_both(p, thread, cell_wall, cell_cpu, requested, run_delay=delay)
        # --idle samples the cell thread at every tick: its wall time. Without, only while it runs.
        against = cell_wall if p.metric == "wall" else cell_cpu
        st = p.stacks
        n = int(st.loc[st["thread"] == thread, "samples"].sum()) if len(st) else 0
        runnable = runnable_seconds(cell_cpu, cell_wall, delay)
        if p.metric == "cpu" and n >= 5 and (against < MIN_PERIODS / requested
                                             or n / runnable > MAX_RATE_RATIO * requested):
            why = (f"not calibrated: the cell's thread has {n} samples over {against * 1e3:.1f} ms of CPU time, "
                   "too little CPU to calibrate on (it mostly waited); weights are 1/requested rate")
            return p.replace(meta={**p.meta, "calibrated": False, "calibration_note": why,
                                   "rate": requested})
        p = transforms.calibrate(p, thread, against)
        if not p.meta.get("calibrated"):
            p = p.replace(meta={**p.meta, "rate": requested, "calibration_note": (
                f"not calibrated: the cell's thread has {n} samples (under 5); weights are 1/requested rate")})
        return p

    def _process_label(self, pid: int, name: str | None = None) -> str:
        from .multi import process_label
        if pid == self.options.pid:
            return process_label(pid, "kernel" if "ipykernel" in sys.modules else "parent")
        return process_label(pid, name or _cmdline(pid))

    def _with_children(self, p: Profile) -> Profile:
        """The parent's rows labelled with its process; each child's capture read, trimmed to the
        cell and appended; every process marked ended or running."""
        from . import multi
        from .childsampler import process_state
        o = self.options
        me = self._process_label(o.pid)
        p = multi.with_process(p, me, {"pid": o.pid, "backend": self.name, "role": "parent"})
        if self.children_method == "py-spy":
            labels = multi.processes(p)
            info = dict(p.meta.get("processes") or {})
            for lab in labels:
                pid = info.get(lab, {}).get("pid")
                if pid is not None and pid != o.pid:
                    info[lab].update(backend="py-spy -s", ended=_ended(process_state(pid)),
                                     missing=("the first ~0.2-0.3 s of each child: py-spy -s finds "
                                              "children by polling"))
            return p.replace(meta={**p.meta, "processes": info,
                                   "children": "py-spy -s (children found by polling; their start is missed)"})
        parts, labels = [p], [me]
        records = self.child_records or {}
        last_image = {pid: image for pid, image in sorted(records)}
        unreadable = {}
        for (pid, image), data in sorted(records.items()):
            source = f"child {pid}" + (f" (exec {image})" if image else "")
            try:   # one bad capture must not lose the others, nor the parent's
                c = multi.read_child(data, source=source, t0=self.child_t0)
            except ProfileFormatError as e:
                unreadable[source] = str(e)
                self.warn(f"{source} left out: its capture is unreadable ({e})")
                continue
            if o.cell_filename:   # a forked child carries the cell's frames: cut above them
                c = transforms.trim_to_cell(c, o.cell_filename, threads=[])
            lab = self._process_label(pid, multi.child_name(c))
            if lab in labels:   # the same pid and command line before and after an exec
                lab += f" · exec {image}"
            state = process_state(pid)
            info = {"pid": pid, "ppid": c.meta.get("ppid"), "argv": c.meta.get("argv"),
                    "backend": "childsampler", "rate": c.meta.get("rate"),
                    "started_at": c.meta.get("started_at"), "ended": _ended(state) or image < last_image[pid],
                    "samples": c.sample_count}
            if image:
                info["exec"] = image   # this pid's image after its image-th exec
            if info["ended"]:
                info["ended_at"] = c.meta.get("last_sample_at")
            if c.meta.get("torn_lines"):
                info["torn_lines"] = c.meta["torn_lines"]
            parts.append(multi.with_process(c, lab, info))
            labels.append(lab)
        merged = multi.concat(parts, key="process", labels=labels)
        meta = {**p.meta, "processes": merged.meta["processes"], "threads": merged.meta["threads"],
                **({"unreadable_children": unreadable} if unreadable else {}),
                **({"children_not_recorded": self.child_failures} if self.child_failures else {}),
                "children": ("each child sampled itself from its start (fork hook / sitecustomize); "
                             "not recorded: non-Python children and Pythons started with -S, -I or a "
                             "cleared environment")}
        return merged.replace(meta=meta, metric=p.metric)


# The kernel's own threads (IOPub, heartbeat, control, ZMQ's I/O threads...), by name, for those it
# starts after the extension was loaded.
_KERNEL_THREAD = re.compile(r"^(IOPub|Heartbeat|Control|Shell channel|HistorySavingThread|ParentPoller"
                            r"|_watch_pipe_fd|ZMQbg/|Thread-\d+ \(_watch_pipe_fd\)|subshell-)")
_kernel_tids: set[int] | None = None


def _native_threads() -> dict[int, str]:
    """Native id -> name of every thread of this process, native ones included (from /proc)."""
    out = {}
    try:
        for t in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{t}/comm") as f:
                    out[int(t)] = f.read().strip()
            except OSError:
                pass
    except OSError:  # no /proc: Python threads only
        pass
    out.update({t.native_id: t.name for t in threading.enumerate() if t.native_id is not None})
    return out


def snapshot_kernel_threads() -> None:
    """Called when the extension loads: every thread alive then is the kernel's (or the imports')."""
    global _kernel_tids
    _kernel_tids = set(_native_threads())  # the cell's own thread is always kept, whichever it is


def not_users_threads() -> set[int]:
    """Threads to drop unless --all-threads: in a kernel, those alive when profmagic was imported or
    loaded, and those named like the kernel's. Threads the user started in earlier cells stay (a C++
    worker created by a previous cell is exactly what the case study needs). Outside a kernel: every
    thread alive when recording starts, so a ``with profmagic.profile()`` block shows its own."""
    live = _native_threads()
    if _kernel_tids is None:
        return set(live)
    return (_kernel_tids & set(live)) | {tid for tid, name in live.items() if _KERNEL_THREAD.match(name)}


if "ipykernel" in sys.modules:  # imported in a kernel without %load_ext: the snapshot is taken now
    snapshot_kernel_threads()


def no_samples_message(backend: str, cell_wall: float, cell_cpu: float, rate: float, metric: str) -> str:
    msg = (f"profmagic: no samples: the code ran {cell_wall * 1e3:.1f} ms wall ({cell_cpu * 1e3:.1f} ms CPU) "
           f"and {backend} samples at {rate:g} Hz (every {1e3 / rate:.1f} ms).")
    if backend == "py-spy" and cell_cpu > 2 / rate:
        return (msg + f" The code used {cell_cpu * 1e3:.0f} ms of CPU, more than two sampling periods, so "
                "py-spy should have seen it: py-spy could not read this stack (py-spy 0.4 records nothing "
                "for very deep stacks, such as 10,000-deep recursion). Use --backend sampler instead.")
    msg += " Run it longer (e.g. in a loop) or raise --rate."
    if metric == "cpu" and cell_wall > 2 / rate:
        msg += " This backend counted only CPU time here; add --idle for wall time."
    return msg


def _ended(state: str | None) -> bool:
    return state is None or state in ("Z", "X")


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return "?"
    text = " ".join([os.path.basename(argv[0])] + argv[1:]) if argv else "?"
    text = " ".join(text.split())
    return text if len(text) <= 60 else text[:57] + "..."


def record(backend: str, options: Options, run_callable: Callable[[], object], **session_kw) -> Profile:
    """Profile ``run_callable()``. If it raises, the partial profile is kept on the Session and the
    original exception propagates; use ``run()`` to get both."""
    profile, error = run(backend, options, run_callable, **session_kw)
    if error is not None:
        raise error
    return profile


def run(backend: str, options: Options, run_callable: Callable[[], object],
        **session_kw) -> tuple[Profile | None, BaseException | None]:
    """(profile, the exception the code raised or None). KeyboardInterrupt included."""
    if options.mode == "both" and backend in ONE_CLOCK:
        if not options.extra.get("rerun"):
            raise ProfilerError(rerun_refused(backend))
        return run_twice(backend, options, run_callable, **session_kw)
    s = Session(backend, options, **session_kw)
    s.start()
    error = None
    try:
        try:
            run_callable()
        except BaseException as e:  # noqa: B902 - the partial profile is shown, then it is re-raised
            error = e
        profile = s.finish(error)
    finally:
        s.close()
    return profile, error


RERUN_WARNING = ("WARNING: --rerun: {backend} measures one clock per run, so the code runs TWICE: first for "
                 "wall time, then for CPU time. Its side effects happen twice. The two metrics come "
                 "from two different runs.")


def run_twice(backend: str, options: Options, run_callable: Callable[[], object],
              **session_kw) -> tuple[Profile | None, BaseException | None]:
    """--mode both --rerun: run once with the wall clock and once with the CPU clock, then merge by
    stack. Never silent: it warns before the first run. A first run that raises is not repeated."""
    from . import pyspy_cpu
    print("profmagic: " + RERUN_WARNING.format(backend=backend), file=sys.stderr)
    wall, error = run(backend, replace(options, mode="wall", extra=dict(options.extra)), run_callable,
                      **session_kw)
    if error is not None or wall is None:
        return wall, error
    cpu, error = run(backend, replace(options, mode="cpu", extra=dict(options.extra)), run_callable,
                     **session_kw)
    if cpu is None or error is not None:
        return wall, error
    return pyspy_cpu.merge_runs(wall, cpu), None


class profile:
    """Context manager: ``with profmagic.profile("py-spy", idle=True) as rec: work()``; then
    ``rec.profile``. Exceptions from the block propagate after the profile is built."""

    def __init__(self, backend: str = "auto", **options):
        announce = options.pop("announce", lambda text: print(text, file=sys.stderr))
        if options.get("mode") == "both" and backend in ONE_CLOCK:
            raise ProfilerError(rerun_refused(backend).replace(
                "add --rerun to allow the second run", "a with block cannot run twice: profile a function "
                "with profmagic.recording.record(backend, options, fn) and rerun=True, or %%profile --rerun"))
        self.session = Session(backend, make_options(**options), announce=announce)
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

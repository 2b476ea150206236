"""py-spy attached to a running Python process (the kernel), out of process.

py-spy 0.4: ``record --pid`` prints "Sampling process ..." on stdout once it has attached, stops
and writes its file on SIGINT (SIGTERM writes none), and names each speedscope profile
``Thread <native tid> "<name>"``. Without ``--idle`` it drops samples of threads it sees as idle,
so its weights approximate CPU time; with ``--idle`` they are wall time. ``--mode both`` runs
two py-spy at once, with and without ``--idle`` (``PairRecorder``), stored as one container.

Two timings (``options.extra["timing"]``, labelled in ``meta["timing"]``):

* ``calibrated`` (the magic's default up to TIMED_ABOVE Hz): py-spy writes speedscope, whose samples
  carry no time, so each weighs 1/rate; ``calibrate_to_cell`` (a processor) scales them so the cell's
  thread sums to its measured time. Without a cell (attaching) they stay 1/rate.
* ``timed`` (attaching, ``profmagic record``, the magic above TIMED_ABOVE Hz): py-spy writes its
  timed format (chrometrace), read with each sample weighing the time to the next one on its thread;
  nothing is scaled. Only for wall time without ``--gil``: without ``--idle`` a waiting thread's
  stack would stay open across its wait. py-spy 0.4 names threads by pthread id there, so the
  recorder maps them to native ids and names (a ``threads.Watch``, a thread log, ``py-spy dump``).
  Its timestamps count from py-spy's start; put on this process's clock (``trace_options``), they
  cut the trace to the recorded code's run (``bounds``, else first sample to stop) and each thread
  at its end (py-spy writes nothing when a thread exits). Under ``--mode both`` the wall recording
  is timed and the cpu one stays speedscope: cpu = on-CPU samples x the timed recording's seconds
  per sample of the same thread (``transforms.combine_idle``).
"""
from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time

from dataclasses import dataclass, replace

import numpy as np

from .. import interrupts, procfs, threads
from ..errors import ProfilerError
from ..model import Profile, Raw
from ..transforms import Cell, calibrate, cell_thread
from ..tempdirs import TempDir
from .base import OWN_GROUP, Capabilities, Capture, Options, allow_tracer, ptrace_scope, reap, tool_version

NAME = "py-spy"
CAPS = Capabilities(clocks=("wall", "cpu"), weights="nominal", inside=False, attach=True, streams=False,
                    threads="python", native=True, both_excludes={
                        "native": "py-spy --native stops the process to read its stacks, and two py-spy (one per "
                                  "clock) cannot stop it at once",
                        "gil": "--gil keeps only samples that hold the GIL, neither clock"})
READY = b"Sampling process"
START_TIMEOUT = 20.0
MIN_RUN = 0.05
POLL = 0.0005   # s: how often py-spy's threads are counted until its sampling thread appears
TIMED = "timed (py-spy chrometrace)"
CALIBRATED = "calibrated to the cell (speedscope)"
NOMINAL = "1/rate per sample (speedscope; not calibrated)"
TIMED_NEEDS = ("py-spy's timed format needs wall time (--mode wall or both, i.e. --idle) without --gil: "
               "without --idle a waiting thread's stack stays open across its wait")


# Above this rate the timed format is the default (bench/RESULTS.md, "py-spy timed against py-spy
# calibrated": at 250 and 500 Hz calibrating put the other thread's seconds off by up to 5.5%, within 1%
# in 0 of 18 in the last run; timed kept them within 1%. At 100 Hz the two were within sampling noise).
TIMED_ABOVE = 100.0


def timing(options: Options) -> str:
    """"timed" or "calibrated": as asked (``extra["timing"]``), else timed above TIMED_ABOVE Hz where
    it can be (wall time, no --gil)."""
    asked = options.extra.get("timing")
    if asked:
        return asked
    can = options.mode in ("wall", "both") and not options.gil
    return "timed" if can and float(options.rate) > TIMED_ABOVE else "calibrated"


def timed(options: Options) -> bool:
    """Does this (single) py-spy write its timed format: timed, wall time, no --gil."""
    return timing(options) == "timed" and options.mode == "wall" and not options.gil


def binary() -> str | None:
    """``$PROFMAGIC_PYSPY`` when set (None if it is not executable), else py-spy next to the running
    interpreter (the venv), then on PATH."""
    chosen = os.environ.get("PROFMAGIC_PYSPY")
    if chosen:
        return chosen if os.access(chosen, os.X_OK) else None
    here = os.path.join(os.path.dirname(sys.executable), "py-spy")
    if os.access(here, os.X_OK):
        return here
    return shutil.which("py-spy")


def available() -> tuple[bool, str]:
    if not sys.platform.startswith("linux"):
        return False, "profmagic drives py-spy on Linux only; use --backend sampler"
    exe = binary()
    if exe is None:
        return False, "py-spy is not installed (pip install py-spy); or use --backend sampler"
    scope = ptrace_scope()
    if scope is not None and scope >= 2 and os.geteuid() != 0:
        return False, (f"Yama ptrace_scope is {scope}: py-spy may not attach to this kernel. Fix: "
                       "`echo 1 | sudo tee /proc/sys/kernel/yama/ptrace_scope`; or use --backend sampler")
    return True, f"py-spy at {exe}"


def version() -> str | None:
    exe = binary()
    return tool_version([exe, "--version"]) if exe else None


def attach_help(stderr: str, pid: int | None = None) -> str:
    scope = ptrace_scope()
    pid = os.getpid() if pid is None else pid
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip() and "backtrace" not in ln.lower()]
    cause = lines[0].strip() if lines else "py-spy exited before sampling"
    if not os.path.exists(f"/proc/{pid}"):
        return (f"py-spy could not attach to process {pid}: {cause}\n"
                f"Cause: process {pid} does not exist (it exited, or the pid is wrong).\n"
                "Fix: give the pid of a running Python process; or use --backend sampler in that process.")
    if procfs.is_python(pid) is not True and "executable" in cause:
        return (f"py-spy could not attach to process {pid} ({procfs.cmdline(pid)}): {cause}\n"
                f"Cause: process {pid} does not look like a Python program (its command is not python and "
                "/proc does not show a libpython), and py-spy reads Python stacks.\n"
                "Fix: give the pid of a Python process; for a native one use --backend perf or eu-stack.")
    return (f"py-spy could not attach to process {pid}: {cause}\n"
            f"Cause: reading another process's memory needs ptrace permission: py-spy must run as the same "
            f"user as the process, or with CAP_SYS_PTRACE "
            f"(Yama ptrace_scope={scope if scope is not None else 'n/a'}; in Docker, the SYS_PTRACE capability).\n"
            "Fix: run py-spy as the kernel's user, run the container with `--cap-add SYS_PTRACE`, or set "
            "`echo 0 | sudo tee /proc/sys/kernel/yama/ptrace_scope`.\n"
            "Way out: `%%profile --backend sampler` needs no ptrace.")


def thread_labels(pid: int) -> dict[int, dict]:
    """pthread id -> {"tid", "name", "start", "end"} of another process's threads alive now, from
    ``py-spy dump --json`` ({} when it cannot say)."""
    exe = binary()
    if exe is None or procfs.ended(pid):
        return {}
    try:
        out = subprocess.run([exe, "dump", "--pid", str(pid), "--json", "--nonblocking"], capture_output=True,
                             timeout=20, stdin=subprocess.DEVNULL).stdout
        doc = json.loads(out)
        return {int(t["thread_id"]): {"tid": t.get("os_thread_id"), "name": t.get("thread_name"),
                                      "start": None, "end": None}
                for t in doc if isinstance(t, dict) and t.get("pid", pid) == pid}
    except (OSError, subprocess.SubprocessError, ValueError, TypeError, KeyError):
        return {}


class Recorder:
    def __init__(self, options: Options):
        self.options = options
        self.timed = timed(options)
        self.tmp: TempDir | None = None
        self.proc: subprocess.Popen | None = None
        self.output: str | None = None
        self.status = b""
        self.spawned_at = self.ready_at = 0.0   # time.monotonic()
        self.began_at: float | None = None     # just before py-spy started its sampling thread
        self.sigint_at: float | None = None    # when it was told to stop, still sampling
        self.began_by: float | None = None     # first seen with its sampling thread
        self.exited_at: float | None = None    # seen exited, its file written
        self.started_at: float | None = None   # the recorded code's run, time.monotonic()
        self.ended_at: float | None = None
        self.known: dict[int, dict] = {}      # pthread id -> what is known of the thread
        self.watch: threads.Watch | None = None

    def bounds(self, start: float | None = None, end: float | None = None) -> None:
        """The recorded code ran from ``start`` to ``end`` (time.monotonic()): the timed trace is cut
        to it. Unset, it runs from py-spy's first sample to ``stop()``."""
        if start is not None:
            self.started_at = start
        if end is not None:
            self.ended_at = end

    def clock(self) -> Clock:
        return Clock(self.spawned_at, self.ready_at, self.began_at, self.began_by, self.sigint_at, self.exited_at)

    def command(self) -> list[str]:
        o = self.options
        cmd = [binary() or "py-spy", "record", "--pid", str(o.pid), "-f", "chrometrace" if self.timed else "speedscope",
               "-r", str(max(1, int(round(o.rate)))), "-o", self.output, "--full-filenames"]
        if o.mode == "both":
            raise ProfilerError("one py-spy records one clock; --mode both runs two (PairRecorder)")
        if o.gil:
            cmd.append("--gil")
        elif o.wall:
            cmd.append("--idle")
        if o.native:
            cmd.append("--native")      # only in blocking mode
        else:
            cmd.append("--nonblocking")
        if o.subprocesses:
            cmd.append("--subprocesses")
        return cmd

    def start(self) -> None:
        if binary() is None:
            raise ProfilerError("py-spy is not installed: `pip install py-spy`; or use --backend sampler")
        self.tmp = TempDir()   # a Ctrl-C before it is held: the recording's tempdirs.Scope removes it
        self.output = self.tmp.file("py-spy.trace.json" if self.timed else "py-spy.speedscope.json")
        self.spawned_at = time.monotonic()
        with interrupts.deferred():   # a Ctrl-C between Popen and the assignment would orphan py-spy
            self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, **OWN_GROUP)
        allow_tracer(self.proc.pid)
        self._wait_ready()

    def _wait_ready(self) -> None:
        """Block until py-spy says it samples (it has attached), or fail with its own words.

        Read with select, not a helper thread: py-spy caches thread names by pthread id, and a
        short-lived thread of ours would lend its name to the next thread the cell starts."""
        fd = self.proc.stdout.fileno()
        line = b""
        deadline = time.monotonic() + START_TIMEOUT
        tasks = f"/proc/{self.proc.pid}/task"
        alone = self.spawned_at   # the last moment py-spy was seen with one thread
        while b"\n" not in line:
            left = deadline - time.monotonic()
            if left <= 0:
                reap(self.proc, signal.SIGKILL)
                raise ProfilerError(f"py-spy did not start sampling within {START_TIMEOUT:.0f} s; "
                                    "use --backend sampler")
            if self.began_at is None:   # its timed trace counts from just before its sampling thread starts
                now = time.monotonic()
                try:
                    if len(os.listdir(tasks)) > 1:
                        self.began_at, self.began_by = alone, now
                    else:
                        alone = now
                except OSError:
                    self.began_at = alone
            ready, _, _ = select.select([fd], [], [], left if self.began_at is not None else min(left, POLL))
            if ready:
                chunk = os.read(fd, 4096)
                if not chunk:
                    break
                line += chunk
        self.status = line
        if READY in line:
            self.ready_at = time.monotonic()
            if self.timed:
                self._watch_threads()
            return
        try:
            self.proc.wait(2)  # it is exiting: read its stderr before reap() closes the pipe
        except subprocess.TimeoutExpired:
            pass
        err = self.proc.stderr.read().decode(errors="replace") if self.proc.poll() is not None else ""
        reap(self.proc, signal.SIGKILL)
        raise ProfilerError(attach_help(err or line.decode(errors="replace"), self.options.pid))

    def _watch_threads(self) -> None:
        """Where the thread names and ends come from: in this process, a ``threads.Watch``; in one
        profmagic started, its thread log (``extra["thread_log"]``); else ``py-spy dump``."""
        if self.options.pid == os.getpid():
            self.watch = threads.Watch()
            self.watch.start()
        elif not self.options.extra.get("thread_log"):
            self.known = thread_labels(self.options.pid)

    def _threads_at_stop(self) -> None:
        if self.watch is not None:
            self.known, self.watch = self.watch.stop(), None
        elif self.options.extra.get("thread_log"):
            self.known = threads.read_log(self.options.extra["thread_log"])
        else:   # the threads alive at the start and at the end
            self.known = {**self.known, **thread_labels(self.options.pid)}

    def stop(self) -> Capture:
        proc, self.proc = self.proc, None
        if proc is None:
            raise ProfilerError("py-spy was not started")
        stop_at = time.monotonic()
        try:   # whatever interrupts this (Ctrl-C in the wait below), py-spy is reaped
            if self.watch is not None:
                self._threads_at_stop()
            # py-spy installs its SIGINT handler just after saying it samples; a SIGINT before that kills
            # it without a file. Give it that moment (only a cell shorter than MIN_RUN waits).
            wait = self.ready_at + MIN_RUN - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            self.sigint_at = time.monotonic() if proc.poll() is None else None
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=30)
            self.exited_at = time.monotonic()
        except subprocess.TimeoutExpired:
            reap(proc, signal.SIGKILL)
            raise ProfilerError("py-spy did not stop within 30 s of SIGINT") from None
        finally:
            reap(proc)
        msg = (err or out).decode(errors="replace").strip()
        if proc.returncode is not None and proc.returncode < 0:
            sig = signal.Signals(-proc.returncode)
            raise ProfilerError(f"py-spy was killed by {sig.name} ({signal.strsignal(sig)}) before it wrote "
                                "a complete profile; this cell's profile is lost. Fix: run the cell again (and "
                                "check `ulimit -f` and what else kills processes here); or use --backend sampler")
        if proc.returncode or not self.output or not os.path.exists(self.output):
            raise ProfilerError(f"py-spy could not write its profile (exit {proc.returncode}): {msg[-500:]}. "
                                f"Fix: check free space and write access in {os.path.dirname(self.output)} "
                                "(set TMPDIR elsewhere); or use --backend sampler, which writes no file")
        with open(self.output, "rb") as f:
            data = f.read()
        status = (self.status + out).decode(errors="replace")
        meta = {"status": status, "exit": proc.returncode}
        if not self.timed:
            return Capture(data, "speedscope", meta)
        if self.options.pid != os.getpid():
            self._threads_at_stop()
        end = stop_at if self.ended_at is None else min(self.ended_at, stop_at)
        meta["reader_options"] = trace_options(data, status, self.known, self.clock(),
                                               self.started_at, end, float(self.options.rate))
        return Capture(data, "chrome_trace", meta)

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if self.watch is not None:
            watch, self.watch = self.watch, None
            watch.stop()
        if proc is not None:
            reap(proc)
        if self.tmp is not None:
            self.tmp.close()
            self.tmp = None


class PairRecorder:
    """Two py-spy at once on the same process, one with ``--idle`` (wall) and one without (cpu);
    ``stop()`` returns one container Capture holding both files."""

    def __init__(self, options: Options):
        self.options = options
        self.recorders = [Recorder(replace(options, mode=m, gil=False, native=False, extra=dict(options.extra)))
                          for m in ("wall", "cpu")]

    def start(self) -> None:
        try:
            for r in self.recorders:
                r.start()
        except BaseException:
            self.close()
            raise
        self.bounds(start=time.monotonic())   # the code runs once both sample

    def bounds(self, start: float | None = None, end: float | None = None) -> None:
        for r in self.recorders:
            r.bounds(start, end)

    def stop(self) -> Capture:
        from ..formats import container
        wall, cpu = (r.stop() for r in self.recorders)
        if wall.format == "chrome_trace":
            first = ("wall.trace.json", wall.data, "chrome_trace", "wall", wall.meta["reader_options"])
        else:
            first = ("wall.speedscope.json", wall.data, "speedscope", "wall", {"metric": "wall"})
        data = container.write([first, ("cpu.speedscope.json", cpu.data, "speedscope", "cpu", {"metric": "cpu"})],
                               combine="idle-pair", meta={"backend": NAME})
        return Capture(data, container.NAME, {"wall": wall.meta, "cpu": cpu.meta})

    def close(self) -> None:
        for r in self.recorders:
            r.close()


def recorder(options: Options):
    """The recorder for ``options``: one py-spy, or a pair for ``--mode both``."""
    if options.extra.get("timing") == "timed" and (options.mode == "cpu" or options.gil):
        raise ProfilerError(TIMED_NEEDS)
    return PairRecorder(options) if options.mode == "both" else Recorder(options)


@dataclass
class Clock:
    """A py-spy recorder's moments, time.monotonic(); None where not seen."""
    spawned: float                  # started
    ready: float                    # said it samples
    alone: float | None = None      # last seen with one thread
    threaded: float | None = None   # first seen with its sampling thread
    sigint: float | None = None     # sent SIGINT while sampling
    exited: float | None = None     # seen exited, its file written


def trace_zero(clock: Clock, last: float) -> tuple[float, float, float]:
    """When py-spy's timed trace counts from, time.monotonic(): (earliest, latest, the one taken).

    py-spy 0.4 stamps with CLOCK_MONOTONIC (Rust's Instant) counted from when it made its recorder,
    just before it starts its sampling thread; its first sample comes after it says it samples, and
    it closes the slices still open with the moment it writes, after SIGINT and before it exits
    (chrometrace.rs; main.rs record_samples; sampler.rs). ``last``: the trace's last event, µs. So
    the zero follows its start, the last moment it had one thread and SIGINT minus ``last``, and
    precedes its sampling thread's first sight, its saying it samples and its exit minus ``last``
    (each as this process saw it: a moment seen late only widens the span). The middle is taken:
    off by at most half that span. (Its saying it samples minus its first sample is no bound: this
    process may read that line after the first sample.) Through its start alone (the old reading) it was off by up to 28
    ms under load (py-spy's own start-up); bench/RESULTS.md, "py-spy's timed error"."""
    c = clock
    lo = max(t for t in (c.spawned, c.alone, None if c.sigint is None else c.sigint - last * 1e-6)
             if t is not None)
    hi = min(t for t in (c.threaded, c.ready, None if c.exited is None else c.exited - last * 1e-6)
             if t is not None)
    if hi < lo:   # a bound broke (the process changed under py-spy): keep the one that cannot
        hi = lo
    return lo, hi, (lo + hi) / 2


def trace_options(data: bytes, status: str, known: dict, clock: Clock, started_at: float | None,
                  ended_at: float, rate: float) -> dict:
    """``chrome_trace.read`` options for py-spy's timed trace: thread labels (pthread id -> native id
    and name), the window of the recorded code's run and the ends and starts of threads, on the
    trace's clock, and the effective rate (py-spy's own sample count over the seconds its threads
    were sampled) that turns each stretch's length into a sample count.

    ``clock``: a ``Clock`` of the recorder's moments; ``trace_zero`` puts the trace on
    time.monotonic()."""
    from ..threads import thread_label
    opts: dict = {"metric": "wall", "weigh": "interval", "rate": rate}
    labels = {str(i): {"label": thread_label(k.get("tid"), k.get("name")), "tid": k.get("tid"), "name": k.get("name")}
              for i, k in known.items() if k.get("tid") is not None}
    if labels:
        opts["labels"] = labels
    try:   # the reader reports a damaged file; here only what can be measured is taken
        doc = json.loads(data)
        ts: dict = {}   # each thread's first sample
        for ev in doc:
            if ev.get("ph") == "B":
                ts[ev["tid"]] = min(ts.get(ev["tid"], float("inf")), float(ev["ts"]))
        last = max(float(ev["ts"]) for ev in doc)
    except (ValueError, TypeError, KeyError, AttributeError):
        return opts
    if not ts:
        return opts
    first = min(ts.values())

    zero = trace_zero(clock, last)[2]

    def on_trace(t: float) -> float:   # time.monotonic() -> the trace's microseconds
        return (t - zero) * 1e6

    lo = on_trace(started_at) if started_at is not None else first
    hi = on_trace(ended_at)
    opts["window"] = [lo, hi]
    ends = {str(i): on_trace(k["end"]) for i, k in known.items() if k.get("end") is not None}
    if ends:
        opts["ends"] = ends
    # py-spy's first sample of a thread comes an exponential wait after the thread began, or after the
    # recorded code began (more when py-spy gets no core): without this, that time was lost (0.4-1% of
    # a 2 s run here; bench/RESULTS.md, "py-spy's timed error, traced to its cause").
    starts = {str(i): on_trace(k["start"]) for i, k in known.items() if k.get("start") is not None}
    if starts:
        opts["starts"] = starts
    m = _COUNTS.search(status.encode())
    sampled = sum(max(0.0, min(last, float(ends.get(str(tid), last))) - t0) for tid, t0 in ts.items()) * 1e-6
    if m and int(m.group(1)) and sampled > 0:
        opts["rate"] = int(m.group(1)) / sampled
    return opts


def read(capture: Capture, options: Options) -> Profile:
    from .. import formats
    metric = "both" if options.mode == "both" else ("wall" if options.wall and not options.gil else "cpu")
    is_timed = timing(options) == "timed" and metric != "cpu"
    if capture.format == "speedscope":
        raw = Raw(capture.data, "speedscope", filename="py-spy.speedscope.json", options={"metric": metric})
        p = formats.load(raw)
    elif capture.format == "chrome_trace":
        raw = Raw(capture.data, "chrome_trace", filename="py-spy.trace.json",
                  options=capture.meta.get("reader_options") or {"metric": "wall", "rate": float(options.rate)})
        p = formats.load(raw)
    else:
        p = formats.read(capture.data, capture.format, source="py-spy")
    rate = float(options.rate)
    if is_timed:
        got = (capture.meta.get("wall") or {}).get("reader_options") if metric == "both" else \
            capture.meta.get("reader_options")
        rate = float((got or {}).get("rate") or rate)
    meta = dict(backend=NAME, rate=rate, requested_rate=float(options.rate),
                versions={"py-spy": version()}, pid=options.pid, tool_report=reported(capture.meta),
                timing=TIMED if is_timed else NOMINAL)
    if is_timed:
        meta["timing_note"] = (
            "each sample weighs the time to py-spy's next sample of its thread (py-spy stamps a sample when "
            "it takes it, and writes events where a stack changes); sample counts are that time x py-spy's "
            f"effective rate ({rate:.4g} Hz: its own sample count over the seconds it sampled)")
        meta["approximate"] = "sample counts estimated from each stack's time x py-spy's effective rate"
        if metric == "both":
            meta["cpu_method"] = ("two py-spy at once: --idle in its timed format (wall) and speedscope without "
                                  "--idle (cpu); cpu = on-CPU samples x the timed recording's seconds per sample "
                                  "of the same thread")
            meta["time_order"] = ("not kept under --mode both: the cpu recording has no times (--mode wall keeps "
                                  "the timed recording's order)")
            meta["approximate"] = ("py-spy's idle detection decides on/off-CPU; wall sample counts estimated from "
                                   "time x py-spy's effective rate")
    if options.gil:
        meta["metric_note"] = ("--gil: only samples holding the GIL; weights approximate the GIL-holding "
                               "time (1/rate each)")
    elif metric == "cpu":
        meta["metric_note"] = ("py-spy without --idle drops samples of threads it sees as idle, so its "
                               "weights approximate CPU time (1/rate each)")
    if options.native:   # C/C++ frames named as perf and eu-stack name them (formats/native_names.py)
        from ..formats import native_names
        p = native_names.rename(p, ("native", "other"))
    if metric == "both":   # why off-CPU, from the leaf alone (reasons.py); --idle alone cannot tell busy from waiting
        from .. import reasons
        p = reasons.leaf_reasons(p)
        meta["reasons"] = {
            "from": "each stack's leaf: the Python function and the call its line makes (read from the "
                    "source; reasons.RULES, with no kernel word); off-CPU is the --idle recording's time "
                    "less the active samples'",
            "cannot_see": "the kernel's state, wchan or system call (a wait whose leaf line names no "
                          "blocking call is 'unknown': the GIL, a C call it cannot name); run-queue time "
                          "(py-spy counts a runnable thread as active: it is in cpu); the leaf instruction "
                          "(a line whose calls give two reasons says nothing)"}
    # A capture without samples has no time column: keep the reader's metric then.
    out_metric = "wall" if metric == "both" else metric
    return p.replace(meta=p.meta.replace(**meta), metric=out_metric if out_metric in p.metrics else p.metric)


_COUNTS = re.compile(rb"Samples: (\d+) Errors: (\d+)")
_BEHIND = re.compile(rb"([\d.]+)s behind in sampling")


def reported(meta: dict) -> str | None:
    """What py-spy itself said about its sampling: stack read errors and falling behind."""
    status = "".join(m.get("status", "") for m in ([meta.get("wall") or {}, meta.get("cpu") or {}]
                                                   if "wall" in meta else [meta])).encode()
    errors = sum(int(e) for _, e in _COUNTS.findall(status))
    behind = max((float(b) for b in _BEHIND.findall(status)), default=0.0)
    said = ([f"py-spy reported {errors} error(s) reading stacks"] if errors else []) + \
        ([f"py-spy fell {behind:g} s behind in sampling"] if behind else [])
    return "; ".join(said) or None


# -- seconds that add up: py-spy's weights are 1/requested rate -----------------------------------------
# Calibrating on the cell thread's CPU time needs enough of it: at least MIN_PERIODS sampling
# periods (a thread that mostly waits for threads it started leaks a few "active" samples over almost
# no CPU: 5776 Hz was seen), and at most MAX_RATE_RATIO x the requested rate in samples per second the
# thread was runnable. py-spy without --idle counts a thread in state R as active, and R is on a core
# or waiting for one, so the bound is over CPU + run-queue time (/proc schedstat), or over wall time
# where that is unknown.
MIN_PERIODS = 5
MAX_RATE_RATIO = 4.0


def runnable_seconds(cpu: float, wall: float, delay: float | None) -> float:
    """Time a thread was in state R (on a core or waiting for one): CPU + run-queue wait, at most wall."""
    return wall if delay is None else min(wall, cpu + delay)


def calibrate_to_cell(p: Profile, cell: Cell) -> Profile:
    """Weigh py-spy's samples by the inverse of the cell thread's effective rate (its samples over
    its measured time), so the seconds agree with %%time; the raw counts stay in ``samples``.
    ``rate`` becomes that per-thread rate, the requested one stays in ``requested_rate``."""
    if p.meta.get("timing") == TIMED:   # real times: nothing is scaled
        return p.with_meta(calibrated=False)
    requested = float(p.meta.get("requested_rate") or p.meta.get("rate") or 100.0)
    thread = cell_thread(p, cell)
    if thread not in p.threads:
        return p.with_meta(calibrated=False, rate=requested, calibration_note=(
            "not calibrated: the cell's thread has no samples; weights are 1/requested rate"))
    if {"wall", "cpu"} <= set(p.metrics):
        return calibrate_both(p, thread, cell.wall, cell.cpu, requested, run_delay=cell.run_delay)
    # --idle samples the cell thread at every tick: its wall time. Without, only while it runs.
    against = cell.wall if p.metric == "wall" else cell.cpu
    st = p.stacks
    n = int(st.loc[(st["thread"] == thread).to_numpy(), "samples"].sum()) if len(st) else 0
    runnable = runnable_seconds(cell.cpu, cell.wall, cell.run_delay)
    if p.metric == "cpu" and n >= 5 and (against < MIN_PERIODS / requested
                                         or n / runnable > MAX_RATE_RATIO * requested):
        return p.with_meta(calibrated=False, rate=requested, calibration_note=(
            f"not calibrated: the cell's thread has {n} samples over {against * 1e3:.1f} ms of CPU time, "
            "too little CPU to calibrate on (it mostly waited); weights are 1/requested rate"))
    p = calibrate(p, thread, against)
    if p.meta.get("calibrated"):
        return p.with_meta(timing=CALIBRATED, **({"calibrated_wall": float(against)} if p.metric == "wall" else {}))
    return p.with_meta(rate=requested, calibration_note=(
        f"not calibrated: the cell's thread has {n} samples (under 5); weights are 1/requested rate"))


def calibrate_both(profile: Profile, thread: str, wall_s: float, cpu_s: float,
                   requested: float | None = None, run_delay: float | None = None) -> Profile:
    """Scale the wall and cpu columns so that ``thread`` (the cell's) sums to its measured ``wall_s``
    and ``cpu_s``. Raw counts stay.

    The --idle recording samples the thread at every tick, so its samples over ``wall_s`` are the
    per-thread effective rate (``meta["rate"]``). The cpu column gets its own factor only when the
    thread has 5 or more on-CPU samples over at least 5 sampling periods of CPU, at no more than 4x
    that rate over the time it was runnable (CPU + ``run_delay``, or ``wall_s`` when that is
    unknown). Otherwise (a cell thread that mostly waits for threads it started) the wall factor,
    as both py-spy tick together."""
    st = profile.stacks
    mine = (st["thread"] == thread).to_numpy()
    requested = float(requested or profile.meta.get("requested_rate") or profile.meta.get("rate") or 100.0)
    n_wall = float(st.loc[mine, "samples"].sum())
    have_wall = float(np.nansum(st.loc[mine, "wall"]))
    have_cpu = float(np.nansum(st.loc[mine, "cpu"]))
    meta = dict(requested_rate=requested, calibrated=False)
    if n_wall < 5 or have_wall <= 0 or not wall_s or wall_s <= 0:
        return profile.with_meta(**meta, rate=requested, calibration_note=(
            f"not calibrated: the cell's thread has {n_wall:.0f} samples (under 5); weights are 1/requested rate"))
    k_wall = wall_s / have_wall
    n_cpu = have_cpu * n_wall / have_wall   # cpu weights are samples x the wall recording's s/sample
    eff = n_wall / wall_s
    runnable = runnable_seconds(cpu_s or 0.0, wall_s, run_delay)
    if n_cpu >= 5 and cpu_s and cpu_s >= 5 / requested and n_cpu / runnable <= 4 * eff:
        k_cpu = cpu_s / have_cpu
        meta["calibrated_cpu"] = float(cpu_s)
    else:
        k_cpu = k_wall
        meta["cpu_calibration_note"] = (
            f"cpu weighted at the wall rate (other threads): the cell's thread has {n_cpu:.0f} on-CPU "
            f"samples for {cpu_s:.3f} s of CPU, too few or too many to calibrate on")
    # The cell's own thread sums to its measured CPU time, spread over its on-CPU samples.
    k_mine = cpu_s / have_cpu if have_cpu > 0 and cpu_s is not None else k_cpu
    st = st.assign(wall=st["wall"] * k_wall, cpu=st["cpu"] * np.where(mine, k_mine, k_cpu))
    meta.update(calibrated=True, calibrated_wall=float(wall_s), rate=eff, timing=CALIBRATED)
    return profile.replace(stacks=st, meta=profile.meta.replace(**meta))


PROCESSORS = (calibrate_to_cell,)

"""cProfile: deterministic, every call and return of the thread that starts it.

``cProfile.Profile(time.perf_counter)`` measures wall time; ``cProfile.Profile(time.thread_time)``
measures the thread's CPU time (a sleep costs nothing). One clock per run, so ``--mode both``
is refused. The raw capture is the pstats bytes (what ``dump_stats`` writes); the stacks read
from them are approximate (see formats/pstats.py) and the flat table is the primary view.

Only the thread that calls ``start()`` is profiled, and start/stop must run on that thread.
Imports nothing heavy at module level, so the conflict check runs on any Python.
"""
from __future__ import annotations

import marshal
import sys
import threading
import time

from ..errors import ProfilerError
from ..threads import thread_label
from .base import Capabilities, Capture, Options

NAME = "cprofile"
CAPS = Capabilities(clocks=("wall", "cpu"), weights="measured", inside=True, threads="cell", one_clock_per_run=True)
TIMERS = {"wall": ("time.perf_counter", time.perf_counter), "cpu": ("time.thread_time", time.thread_time)}


def available() -> tuple[bool, str]:
    return True, "cProfile (standard library): traces every call; high overhead on call-heavy code"


def active_profiler() -> str | None:
    """What profiling tool is active here already, if any."""
    mon = getattr(sys, "monitoring", None)
    if mon is not None:  # 3.12+: cProfile takes the PROFILER tool id
        tool = mon.get_tool(mon.PROFILER_ID)
        if tool is not None:
            return f"{tool!r} (holds sys.monitoring.PROFILER_ID)"
    hook = sys.getprofile()
    if hook is not None:
        return f"{hook!r} (installed with sys.setprofile)"
    return None


def _conflict(what: str | None) -> ProfilerError:
    what = what or "another profiling tool"
    return ProfilerError(
        f"cannot start cProfile: {what} is already active in this process. Stop it first "
        "(e.g. call .disable() on the other cProfile.Profile, or end the %prun/%%pyinstrument/"
        "profiler that started it), or record with another backend: --backend sampler or py-spy.")


class Recorder:
    def __init__(self, options: Options):
        if options.mode not in TIMERS:
            raise ProfilerError(f"cProfile measures one clock per run: use --mode wall or --mode cpu, "
                                f"not {options.mode!r} (--backend sampler gives both from one run)")
        self.options = options
        self._prof = None
        self._enabled = False
        self._thread = None
        self._t0 = 0.0

    def start(self) -> None:
        import cProfile
        if self._prof is not None:
            raise ProfilerError("this cProfile recorder was already started; make a new one")
        other = active_profiler()
        if other is not None:
            raise _conflict(other)
        _, timer = TIMERS[self.options.mode]
        self._prof = cProfile.Profile(timer)
        t = threading.current_thread()
        self._thread = (t.native_id, t.name)
        self._t0 = time.perf_counter()
        try:
            self._prof.enable()
        except ValueError as e:  # 3.12+: "Another profiling tool is already active"
            raise _conflict(active_profiler()) from e
        self._enabled = True

    def stop(self) -> Capture:
        if self._prof is None:
            raise ProfilerError("cProfile was never started")
        self._disable()
        duration = time.perf_counter() - self._t0
        self._prof.create_stats()
        data = marshal.dumps(self._prof.stats)
        meta = {
            "backend": NAME,
            "metric": self.options.mode,
            "mode": self.options.mode,
            "timer": TIMERS[self.options.mode][0],
            "rate": None,
            "duration": duration,
            "thread": thread_label(*self._thread),
            "thread_attrs": {"tid": self._thread[0], "name": self._thread[1], "pid": self.options.pid,
                             "backend": NAME, "python": True},
            "cell_thread": thread_label(*self._thread),
            "python": sys.version.split()[0],
            "pid": self.options.pid,
        }
        self._prof = None
        return Capture(data, "pstats", meta)

    def _disable(self) -> None:
        if self._enabled:
            self._enabled = False
            self._prof.disable()

    def close(self) -> None:
        if self._prof is not None:
            self._disable()
            self._prof = None


def read(capture: Capture, options: Options):
    from ..formats import pstats
    metric = capture.meta.get("metric") or options.mode
    m = dict(capture.meta)
    p = pstats.read(capture.data, source="<cprofile>", metric=metric, thread=m.get("thread") or "pstats",
                    thread_attrs=m.pop("thread_attrs", None))
    return p.replace(meta=p.meta.replace(**m))

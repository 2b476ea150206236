"""pyinstrument, in-process: samples the thread that calls ``start()`` (start and stop must run
on that thread; threads the cell starts are not seen).

Wall mode is pyinstrument's default timer. CPU mode rests on an internal API: pyinstrument has
no public timer option, so we set ``get_stack_sampler().timer_func = time.thread_time`` and reset
it after; meta["timer"] says so. ``async_mode`` defaults to "disabled" (Options.extra may set
it): ``%%pyinstrument --async_mode=enabled`` breaks on IPython >= 9.16, and a plain per-thread
profile already covers a top-level ``await`` cell, which runs on the same thread.
Raw capture: pyinstrument's own session JSON plus an ``x-profmagic`` block it ignores.
"""
from __future__ import annotations

import json
import sys
import threading
import time

from ..errors import ProfilerError
from ..threads import thread_label
from .base import Capabilities, Capture, Options

NAME = "pyinstrument"
CAPS = Capabilities(clocks=("wall", "cpu"), weights="measured", inside=True, threads="cell", one_clock_per_run=True)
CPU_TIMER = ("time.thread_time, set through pyinstrument's internal StackSampler.timer_func "
             "(no public option; reset after recording)")


def available() -> tuple[bool, str]:
    try:
        import pyinstrument
    except ImportError:
        return False, "pyinstrument is not installed: pip install pyinstrument (or use --backend sampler)"
    return True, f"pyinstrument {pyinstrument.__version__}, in-process, the cell's thread only"


def _sampler():
    from pyinstrument.stack_sampler import get_stack_sampler
    return get_stack_sampler()


class Recorder:
    def __init__(self, options: Options):
        if options.mode not in ("wall", "cpu"):
            raise ProfilerError(f"pyinstrument measures one clock per run: use --mode wall or --mode cpu, "
                                f"not {options.mode!r} (--backend sampler gives both from one run)")
        self.options = options
        self._prof = None
        self._timer_set = False
        self._thread = None

    def start(self) -> None:
        import pyinstrument
        if self._prof is not None:
            raise ProfilerError("this pyinstrument recorder was already started; make a new one")
        sampler = _sampler()
        if sampler.subscribers or sys.getprofile() is not None:
            what = "pyinstrument" if sampler.subscribers else repr(sys.getprofile())
            raise ProfilerError(
                f"cannot start pyinstrument: {what} is already profiling this thread (sys.setprofile). "
                "Stop it first (end the other profiler or %prun/%%pyinstrument), or record with another "
                "backend: --backend sampler or py-spy.")
        t = threading.current_thread()
        self._thread = (t.ident, t.native_id, t.name)
        self._prof = pyinstrument.Profiler(interval=1.0 / float(self.options.rate),
                                           async_mode=self.options.extra.get("async_mode", "disabled"))
        if self.options.mode == "cpu":
            sampler.timer_func = time.thread_time
            self._timer_set = True
        try:
            self._prof.start(caller_frame=sys._getframe(1))
        except BaseException:
            self._reset_timer()
            self._prof = None
            raise

    def _reset_timer(self) -> None:
        if self._timer_set:
            self._timer_set = False
            _sampler().timer_func = None

    def stop(self) -> Capture:
        import pyinstrument
        if self._prof is None:
            raise ProfilerError("pyinstrument was never started")
        try:
            session = self._prof.stop()
        finally:
            self._reset_timer()
            self._prof = None
        ident, nid, name = self._thread
        label = thread_label(nid, name)
        doc = session.to_json()
        meta = {
            "backend": NAME,
            "metric": self.options.mode,
            "mode": self.options.mode,
            "timer": CPU_TIMER if self.options.mode == "cpu" else "pyinstrument's default wall-clock timer",
            "internal_api": self.options.mode == "cpu",
            "rate": session.sample_count / session.duration if session.duration else None,
            "requested_rate": float(self.options.rate),
            "duration": session.duration,
            "samples": session.sample_count,
            "cell_thread": label,
            "pyinstrument": pyinstrument.__version__,
            "python": sys.version.split()[0],
            "pid": self.options.pid,
        }
        doc["x-profmagic"] = dict(meta, thread_labels={str(ident): label}, threads=[
            {"label": label, "tid": nid, "name": name, "pid": self.options.pid, "python": True}])
        return Capture(json.dumps(doc).encode("utf-8"), "pyinstrument", meta)

    def close(self) -> None:
        if self._prof is not None:
            try:
                if self._prof.is_running:
                    self._prof.stop()
            finally:
                self._prof = None
                self._reset_timer()
        self._reset_timer()


def read(capture: Capture, options: Options):
    from ..formats import pyinstrument
    p = pyinstrument.read(capture.data, source="<pyinstrument>")
    return p.replace(meta=p.meta.replace(**capture.meta))

"""The built-in sampler: a thread in this process samples ``sys._current_frames()``.

Every sample carries ``wall`` (seconds since the previous pass) and ``cpu`` (the thread's CPU
clock delta over that time, split with the previous sample where the stack changed: see
``transforms.split_cpu_at_stack_changes``), so one run gives both metrics. It needs no ptrace, so it works on
Binder, Colab and in Docker. The GIL switch interval caps the rate it can reach: a CPU-bound
thread keeps the GIL for up to ``sys.getswitchinterval()`` seconds, so the achieved rate is
measured and reported, never the requested one.

Per-thread CPU clocks and the sampling loop are shared with children and cluster workers
(``profmagic/sampling.py``).
"""
from __future__ import annotations

import os
import sys
import threading
import time
from time import perf_counter

from .. import awaits, reasons
from ..errors import ProfilerError
from ..model import Raw
from ..sampling import Codes, ThreadClock, code_name, every
from ..transforms.cpu_split import split_cpu_at_stack_changes
from ..threads import mark_own, thread_label
from .base import Capabilities, Capture, Options

NAME = "sampler"
CAPS = Capabilities(clocks=("wall", "cpu"), weights="measured", inside=True, attach=False, streams=True,
                    threads="python", awaits=True)


def available() -> tuple[bool, str]:
    if not hasattr(sys, "_current_frames"):
        return False, "this Python has no sys._current_frames(); use --backend pyinstrument or cprofile"
    if not hasattr(time, "pthread_getcpuclockid"):
        return False, ("this platform has no per-thread CPU clocks (time.pthread_getcpuclockid); "
                       "use --backend pyinstrument or cprofile")
    return True, "built-in sampler: samples every Python thread from inside the process; needs no ptrace"


READ_REASONS = True   # read /proc for each sample's reason (bench/bench_sampler.py turns it off to compare)
FEW_OFF, READ_EVERY = reasons.FEW_OFF, reasons.READ_EVERY   # (shared with the child sampler)


class _Thread(ThreadClock):
    __slots__ = ("label", "proc", "off", "seen", "next_read", "memo")

    def __init__(self, ident: int, native_id: int | None, label: str):
        super().__init__(ident, native_id)
        self.label = label
        self.proc = reasons.ProcReader(os.getpid(), native_id) if native_id is not None and READ_REASONS else None
        self.off = 0.0          # off-CPU seconds since the last run-queue read
        self.seen = None        # (leaf frame's code, instruction, reason) of the last /proc read
        self.next_read = 0.0    # perf_counter time before which no /proc read is made
        self.memo: dict = {}    # (code, instruction) -> the reason the last read there gave

    def reason(self, f, wall: float, cpu: float, now: float) -> tuple[str, float]:
        """This interval's reason and run-queue seconds (``reasons.interval_reason``)."""
        return reasons.interval_reason(self, f, wall, cpu, now)


class Recorder:
    def __init__(self, options: Options):
        self.options = options
        self.interval = 1.0 / float(options.rate)
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._builder = None
        self._codes = Codes(self._new_code)
        self._threads: dict[tuple, _Thread] = {}  # (ident, native id) -> state
        self._seen: list[str] = []
        self.ticks = 0
        self._t0 = self._t1 = 0.0

    # -- sampling thread -------------------------------------------------------
    def _live(self) -> dict[int, threading.Thread]:
        return {t.ident: t for t in threading.enumerate() if t.ident is not None}

    def _state(self, ident: int, live: dict) -> _Thread:
        t = live.get(ident)
        nid = getattr(t, "native_id", None) if t is not None else None
        key = (ident, nid)
        st = self._threads.get(key)
        if st is None:
            name = t.name if t is not None else "?"
            st = self._threads[key] = _Thread(ident, nid, thread_label(nid, name))
            self._builder.thread(st.label, tid=nid, name=name, pid=os.getpid(), backend=NAME, python=True)
        return st

    def _baseline(self, me: int) -> None:
        live = self._live()
        for ident in sys._current_frames():
            if ident != me:
                self._state(ident, live).baseline()

    def _new_code(self, code, line: int) -> int:
        return self._builder.frame(code_name(code), code.co_filename, line, "python")

    def _tick(self, me: int, now: float, wall: float) -> None:
        frames = sys._current_frames()
        # This thread's frame (this call) holds the dict: a cycle, keeping every thread's frames (and the
        # cell's objects) alive until gc ran.
        frames.pop(me, None)
        live = self._live()
        b = self._builder
        t = now - self._t0
        for ident, f in frames.items():
            if ident == me:
                continue
            st = self._state(ident, live)
            chain = awaits.waiting(ident)
            if chain is not None:   # the cell awaits: its coroutines, not the event loop's select
                stack = [self._codes.code(c) for c in chain] + [b.frame(awaits.AWAIT, None, None, "other")]
            else:
                stack = self._codes.stack(f)
            cpu = st.delta()
            if READ_REASONS:
                off = wall - cpu if cpu == cpu else 0.0
                if off <= FEW_OFF * wall:   # on a core (interval_reason's first test, without the call)
                    if off > 0.0:
                        st.off += off
                    r, runq = reasons.CPU, 0.0
                else:
                    r, runq = st.reason(f, wall, cpu, now)
                b.add(b.stack(st.label, stack, reason=r), samples=1, time=t, wall=wall, cpu=cpu,
                      columns={"reason": r, "runq": runq})
            else:
                b.add(b.stack(st.label, stack), samples=1, time=t, wall=wall, cpu=cpu)
        self.ticks += 1

    def _run(self) -> None:
        mark_own()
        me = threading.get_ident()
        try:
            self._t0 = perf_counter()
            self._baseline(me)
            self._ready.set()
            self._t1 = every(self.interval, self._stop, lambda now, wall: self._tick(me, now, wall), self._t0)
        except BaseException as e:  # handed to the recording thread by stop()
            self._error = e
            self._ready.set()

    # -- interface ---------------------------------------------------------------
    def start(self) -> None:
        from ..model import StackBuilder
        if self._thread is not None:
            raise ProfilerError("this sampler recorder was already started; make a new one")
        self._builder = StackBuilder()
        self._thread = threading.Thread(target=self._run, name="profmagic-sampler", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self.close()
            raise ProfilerError(f"the built-in sampler failed to start: {self._error!r}")

    def live(self):
        """The samples so far (``StackBuilder.rows``) and the rate reached, or None."""
        b = self._builder
        if b is None or not self.ticks:
            return None
        elapsed = perf_counter() - self._t0
        return b.rows(), self.ticks / elapsed if elapsed > 0 else 0.0

    def _join(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()

    def stop(self) -> Capture:
        from ..formats import speedscope
        if self._thread is None:
            raise ProfilerError("the sampler was never started")
        self._join()
        if self._error is not None:
            raise ProfilerError(f"the built-in sampler failed while recording: {self._error!r}")
        duration = max(self._t1 - self._t0, 0.0)
        achieved = self.ticks / duration if duration > 0 else 0.0
        cell = next((st.label for (ident, nid), st in self._threads.items()
                     if nid == self.options.thread_native_id), None)
        meta = {
            "backend": NAME,
            "metrics": ["wall", "cpu"],
            "mode": self.options.mode,
            "rate": achieved,
            "requested_rate": float(self.options.rate),
            "ticks": self.ticks,
            "duration": duration,
            "cell_thread": cell,
            "python": sys.version.split()[0],
            "pid": self.options.pid,
            "reasons": {"from": "each thread's run-queue time (schedstat), its state, wchan and system call "
                                "(/proc) and its leaf Python call (reasons.RULES), read where it was off-CPU, at most "
                                f"once per {READ_EVERY * 1e3:g} ms per thread; an interval between reads "
                                "carries the reason the last read at its leaf instruction gave (else the "
                                "thread's last), and the next read's run-queue time covers it"
                                if READ_REASONS else None,
                        "cannot_see": "native frames (a futex under a call it cannot name is 'unknown'); "
                                      "what a thread did between passes; the run-queue time after a "
                                      f"thread's last read (at most {READ_EVERY * 1e3:g} ms of its wall "
                                      "time)"},
            "note": ("wall = time since the previous sampling pass; cpu = the thread's CPU clock over "
                     "it, split with the previous sample where the stack changed; CPU used by a thread "
                     "after the last pass before it ended is not seen"),
        }
        # Written with wall as the primary metric; read() restores the mode's metric.
        profile = split_cpu_at_stack_changes(self._builder.build(metric="wall", meta=meta))
        data = speedscope.write(profile)
        self._builder = None
        self._codes.clear()
        return Capture(data, speedscope.NAME, meta)

    def close(self) -> None:
        self._join()
        self._builder = None
        self._codes.clear()
        for st in self._threads.values():
            if st.proc is not None:
                st.proc.close()
        self._threads.clear()


def read(capture: Capture, options: Options):
    from .. import formats
    metric = "cpu" if options.mode == "cpu" else "wall"
    p = formats.load(Raw(capture.data, "speedscope", filename="sampler.speedscope.json"))
    return p.replace(meta=p.meta.replace(**capture.meta), metric=metric)

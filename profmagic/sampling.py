"""What every in-process sampler shares: the loop, the stack walk, and per-thread CPU clocks.

Used by the built-in sampler (backends/sampler.py), by child processes (childsampler.py) and by
cluster workers (cluster/worker.py). Standard library only: a spawned child loads this file
before its own imports and must not pay for pandas.

Thread CPU clocks: ``time.pthread_getcpuclockid(ident)`` reads the thread's pthread descriptor,
which dangles once the thread has exited. For threads whose native id is known we build the
same clock id the kernel understands from the tid (glibc's ``make_thread_cpuclock``:
``(~tid << 3) | CPUCLOCK_SCHED | CPUCLOCK_PERTHREAD``); the kernel answers EINVAL for a dead
thread instead of reading freed memory.
"""
from __future__ import annotations

import math
import threading
import time
from time import clock_gettime, perf_counter   # bound now: code that mocks time.* must not change them
from typing import Callable


def tid_cpu_clock(native_id: int) -> int:
    """The kernel's per-thread CPU clock id for a Linux tid (what glibc builds from pd->tid)."""
    return (~native_id << 3) | 6


class ThreadClock:
    """One thread's CPU clock and its last reading; ``delta()`` is the CPU used since then."""
    __slots__ = ("clock", "last")

    def __init__(self, ident: int, native_id: int | None):
        if native_id is not None:
            self.clock = tid_cpu_clock(native_id)
        else:  # a thread ``threading`` does not know: only its pthread id is at hand
            try:
                self.clock = time.pthread_getcpuclockid(ident)
            except OSError:
                self.clock = None
        self.last = 0.0   # a thread first seen mid-recording counts all its CPU since the last pass

    def read(self) -> float:
        if self.clock is None:
            return math.nan
        try:
            return clock_gettime(self.clock)
        except OSError:  # the thread ended between the frame snapshot and this read
            return math.nan

    def baseline(self) -> None:
        """Count from now: CPU the thread used before the recording is not the recording's."""
        c = self.read()
        self.last = 0.0 if math.isnan(c) else c

    def delta(self) -> float:
        c = self.read()
        if math.isnan(c):
            return c
        d, self.last = c - self.last, c
        return d


class Codes:
    """A small id per (code object, line executing): ``new(code, line)`` makes it on first sight.
    The line is the one running (``f_lineno``), so the Source view can give time per line; frames
    of one function still merge by (name, file). Codes are kept alive, so their ``id()`` is never
    reused for another code during the recording."""

    def __init__(self, new: Callable[[object, int], int]):
        self._ids: dict[tuple, tuple] = {}
        self._new = new

    def code(self, code, line: int | None = None) -> int:
        """The id of one code object at ``line`` (default: its first line)."""
        key = (id(code), line or code.co_firstlineno)
        hit = self._ids.get(key)
        if hit is None:
            hit = self._ids[key] = (code, self._new(code, key[1]))
        return hit[1]

    def stack(self, f) -> list[int]:
        """The ids of frame ``f`` and its callers, root first, each at the line it is running."""
        ids = self._ids
        out = []
        while f is not None:
            code = f.f_code
            key = (id(code), f.f_lineno or code.co_firstlineno)
            hit = ids.get(key)
            if hit is None:
                hit = ids[key] = (code, self._new(code, key[1]))
            out.append(hit[1])
            f = f.f_back
        out.reverse()
        return out

    def clear(self) -> None:
        self._ids.clear()


def code_name(code) -> str:
    return getattr(code, "co_qualname", code.co_name)


def every(interval: float, stop: threading.Event, tick: Callable[[float, float], object],
          start: float | None = None) -> float:
    """Call ``tick(now, seconds since the previous pass)`` every ``interval`` seconds from ``start``
    (a perf_counter time; default now) until ``stop`` is set or ``tick`` returns False; returns the
    end time. Deadlines are absolute, so a late wake-up (waiting for the GIL) does not slow the
    rate; missed ones are skipped, not burst."""
    last = perf_counter() if start is None else start
    due = last + interval
    while not stop.wait(max(0.0, due - perf_counter())):
        now = perf_counter()
        go_on = tick(now, now - last)
        last = now
        due += interval
        if due < now:
            due = now + interval
        if go_on is False:
            break
    return perf_counter()

"""When a thread of this process last left its core, on the perf_counter clock (Linux with the
scheduler's debug file, /proc/self/task/<tid>/sched).

The scheduler stamps ``se.exec_start`` each time it accounts a thread's run, last when the thread
leaves its core: for a blocked thread, the moment it blocked. The stamp is in the clock of the CPU
it ran on (the run queue's task clock), which runs behind CLOCK_MONOTONIC by that CPU's interrupt
and steal time: seconds apart between CPUs, drifting by about 0.1 ms a second here. Each CPU's
offset is taken from the calling thread's own entry (stamped when it last went on a core, or at the
last scheduler tick), so it is late by at most that: 20-60 µs measured here. The samplers use it to
place a stack change between two waits (docs/uncertainty.md, "placed changes").
"""
from __future__ import annotations

import os
import threading
from time import perf_counter

from .reasons import ProcReader

STALE = 1.0   # seconds


def _exec_start(text: str | None) -> float | None:
    """``se.exec_start`` (milliseconds in the file) in seconds."""
    if not text:
        return None
    i = text.find("se.exec_start")
    if i < 0:
        return None
    try:
        return float(text[text.index(":", i) + 1:text.index("\n", i)]) * 1e-3
    except ValueError:
        return None


def _state_cpu(stat: str | None) -> tuple[str | None, int | None]:
    """(state letter, the CPU it last ran on) from a ``stat`` line."""
    if not stat:
        return None, None
    fields = stat[stat.rfind(")") + 2:].split()
    try:
        return fields[0], int(fields[36])
    except (IndexError, ValueError):
        return fields[0] if fields else None, None


def _runs(schedstat: str | None) -> int | None:
    """Times the thread went on a core so far (schedstat's third field)."""
    try:
        return int(schedstat.split()[2]) if schedstat else None
    except (IndexError, ValueError):
        return None


class LastRan:
    """Made and used on the sampling thread. ``blocked(tid)`` -> (perf_counter time the thread
    blocked, times it went on a core since the previous call for it) while it is blocked (state S
    or D), else None."""

    def __init__(self):
        self.me = ProcReader(os.getpid(), threading.get_native_id())
        self.ok = _exec_start(self.me._read("sched")) is not None
        self.offset: dict[int, tuple] = {}   # cpu -> (perf_counter seconds minus its task clock, when taken)
        self.readers: dict[int, ProcReader] = {}
        self.runs: dict[int, int] = {}

    def calibrate(self) -> None:
        """This thread's own stamp against perf_counter now: its CPU's offset."""
        e = _exec_start(self.me._read("sched"))
        now = perf_counter()
        _, cpu = _state_cpu(self.me._read("stat"))
        if e is not None and cpu is not None:
            self.offset[cpu] = (now - e, now)

    def blocked(self, tid: int, reader: ProcReader | None = None) -> tuple[float, int] | None:
        """``reader``: the caller's open files of this thread, if it keeps some (else LastRan's own)."""
        before = self.runs.pop(tid, None)
        r = self.count(tid, reader)
        runs = self.runs.get(tid)
        state, cpu = _state_cpu(r._read("stat"))
        off = self.offset.get(cpu)
        # An offset drifts by about 0.1 ms a second: one older than STALE seconds is not used.
        if state not in ("S", "D") or runs is None or before is None or off is None or perf_counter() - off[1] > STALE:
            return None
        e = _exec_start(r._read("sched"))
        return None if e is None else (e + off[0], runs - before)

    def count(self, tid: int, reader: ProcReader | None = None) -> ProcReader:
        """Count this thread's runs from now; the reader used."""
        r = reader or self.readers.get(tid)
        if r is None:
            r = self.readers[tid] = ProcReader(os.getpid(), tid)
        runs = _runs(r._read("schedstat"))
        if runs is not None:
            self.runs[tid] = runs
        return r

    def prune(self, alive) -> None:
        """Close the files of threads not in ``alive`` (native ids): ended threads keep none open."""
        for tid in [t for t in self.readers if t not in alive]:
            self.readers.pop(tid).close()
            self.runs.pop(tid, None)

    def close(self) -> None:
        self.me.close()
        for r in self.readers.values():
            r.close()
        self.readers.clear()

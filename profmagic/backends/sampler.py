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

from .. import awaits, interrupts, lastran, reasons
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
CPU = reasons.CPU
PLACE_RUNS = 6   # a change is placed by the scheduler's stamp only if the thread went on a core at most this often since its last change


class _Thread(ThreadClock):
    __slots__ = ("label", "proc", "off", "seen", "next_read", "memo",
                 "where", "chain", "stack", "sid", "r", "wait", "tid", "key", "nid", "off_before")

    def __init__(self, ident: int, native_id: int | None, label: str):
        super().__init__(ident, native_id)
        self.label = label
        self.proc = reasons.ProcReader(os.getpid(), native_id) if native_id is not None and READ_REASONS else None
        self.off = 0.0          # off-CPU seconds since the last run-queue read
        self.seen = None        # (leaf frame's code, instruction, reason) of the last /proc read
        self.next_read = 0.0    # perf_counter time before which no /proc read is made
        self.memo: dict = {}    # (code, instruction) -> the reason the last read there gave
        # The previous sample: where it was (_where), the awaits chain, the stack's frame ids, its
        # stack row, its reason, and that reason again if it was read at this leaf instruction (so
        # the same wait repeats it: Recorder._tick).
        self.where = self.chain = self.stack = self.r = self.wait = None
        self.sid = -1
        self.tid = -1           # its id in the StackBuilder
        self.key = ()           # the stack as a tuple (with reasons)
        self.nid = native_id
        self.off_before = False   # the previous sample's interval was off-CPU

    def reason(self, f, wall: float, cpu: float, now: float) -> tuple[str, float]:
        """This interval's reason and run-queue seconds (``reasons.interval_reason``)."""
        return reasons.interval_reason(self, f, wall, cpu, now)


def _where(f) -> list:
    """Code object and instruction of frame ``f`` and each caller, leaf first: two samples with equal
    lists recorded the same stack. No frame is kept: a frame object held past its return keeps its
    locals alive, which the sampler's own reference did for a tick (an array freed up to 10 ms late
    raised a cell's peak memory by that array)."""
    out = []
    while f is not None:
        out.append(f.f_code)
        out.append(f.f_lasti)
        f = f.f_back
    return out


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
        self._n = 0                        # samples added so far
        self._rows: dict[tuple, int] = {}  # (thread id, stack, reason) -> stack row, with reasons
        self._runq: dict[int, float] = {}  # sample -> its run-queue seconds, where a /proc read measured some
        self._placed: dict[int, tuple] = {}  # sample -> (where its stack change was placed: seconds from the start, runs)
        self._lastran = None   # lastran.LastRan, made on the sampling thread
        self._calibrated = False
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
            st.tid = self._builder.thread(st.label, tid=nid, name=name, pid=os.getpid(), backend=NAME, python=True)
        return st

    def _baseline(self, me: int) -> None:
        live = self._live()
        frames = sys._current_frames()
        frames.pop(me, None)
        now = perf_counter()
        for ident, f in frames.items():
            st = self._state(ident, live)
            st.baseline()
            if st.proc is not None:   # its /proc files opened and read now, not in a pass
                self._first_read(st, f, now)

    def _first_read(self, st: _Thread, f, now: float) -> None:
        """The reason of the wait each thread is in at the start: a thread still at that instruction
        at the first pass gets it without a read, as a wait seen again does."""
        # No interval yet: off-CPU time 1 against no run-queue time lets the state and calls speak.
        r = reasons.sampled_reason(1.0, 0.0, st.proc, reasons.python_leaf(f))
        st.seen = (f.f_code, f.f_lasti, r)
        st.memo[(f.f_code, f.f_lasti)] = r
        st.next_read = now + READ_EVERY

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
        on = READ_REASONS
        for ident, f in frames.items():
            st = self._state(ident, live)
            chain = awaits.waiting(ident)
            cpu = st.delta()
            # Every frame at the same instruction (and the same awaits chain): the same stack, whose
            # previous row is reused.
            where = _where(f)
            same = where == st.where and chain is st.chain
            if on:
                if same and st.wait is not None and cpu == 0.0:
                    # Still in the wait whose reason was read here (it never ran: a loop that re-enters
                    # the same call runs between): interval_reason would give it again, and the row
                    # is the previous sample's.
                    st.off += wall - cpu
                    sid = st.sid
                elif same and st.r is CPU and wall - cpu <= FEW_OFF * wall:   # (NaN: not <=)
                    if wall > cpu:   # on a core again, at the same place: the same row
                        st.off += wall - cpu
                    sid = st.sid
                else:
                    sid = self._reason_row(st, f, chain, same, wall, cpu, now)
            elif same:
                sid = st.sid
            else:
                st.stack = self._stack(chain, f)
                sid = b.stack(st.tid, st.stack)
            if self._lastran is not None:
                self._place(st, sid, wall, cpu, now)
            b.add(sid, samples=1, time=t, wall=wall, cpu=cpu)
            self._n += 1
            st.where, st.chain, st.sid = where, chain, sid
        self._calibrated = False
        self.ticks += 1
        if self._lastran is not None and len(self._lastran.readers) > 64 and not self.ticks % 100:
            self._lastran.prune({getattr(live.get(i), "native_id", None) for i in frames})

    def _place(self, st: _Thread, sid: int, wall: float, cpu: float, now: float) -> None:
        """Where a stack change between two waits lies. The thread was off-CPU over its previous
        interval and mostly over this one, and is blocked now: it woke, went on a core a few times
        (a wake, waits for a lock or the GIL), changed stack holding the GIL and blocked at the
        scheduler's stamp (lastran.py). So the change lies close before the stamp: within this
        interval's CPU if it went on a core at most twice (a wake and the GIL); the split
        (transforms/cpu_split.py) puts it there. A change the stamp cannot place keeps the split by
        CPU rates."""
        before = st.off_before
        st.off_before = not (cpu == cpu and cpu > FEW_OFF * wall)
        if st.nid is None or sid == st.sid or st.sid < 0:
            return
        if not (before and cpu == cpu and cpu < 0.5 * wall):
            self._lastran.count(st.nid, st.proc)   # its runs counted from this change
            return
        if not self._calibrated:
            self._lastran.calibrate()
            self._calibrated = True
        got = self._lastran.blocked(st.nid, st.proc)   # (the reasons' open files of the thread, if any)
        if got is not None and got[1] <= PLACE_RUNS and now - wall <= got[0] <= now:
            self._placed[self._n] = (max(got[0] - cpu, now - wall) - self._t0, got[1])

    def _reason_row(self, st: _Thread, f, chain, same: bool, wall: float, cpu: float, now: float) -> int:
        """The stack row of a sample with its reason (``_tick``; a wait seen again is decided there)."""
        off = wall - cpu if cpu == cpu else 0.0
        runq = 0.0
        if off <= FEW_OFF * wall:   # on a core (interval_reason's first test, without the call)
            if off > 0.0:
                st.off += off
            r, wait = reasons.CPU, None
        elif st.proc is not None and st.seen is not None and now < st.next_read:
            # Between reads: interval_reason's carry, inlined (the call cost more than the carry).
            st.off += off
            seen, code, at = st.seen, f.f_code, f.f_lasti
            if seen[0] is code and seen[1] == at:
                r = wait = seen[2]
            else:
                r, wait = st.memo.get((code, at), seen[2]), None
        else:
            r, runq = st.reason(f, wall, cpu, now)
            last = st.seen
            # A reason read at this instruction is repeated by _tick's test; one carried is not.
            wait = r if st.proc is None or (last is not None and last[2] is r and last[0] is f.f_code
                                            and last[1] == f.f_lasti) else None
        if runq:
            self._runq[self._n] = runq
        if same and r is st.r:
            sid = st.sid
        else:
            if not same:
                st.stack = self._stack(chain, f)
                st.key = tuple(st.stack)
            key = (st.tid, st.key, r)
            sid = self._rows.get(key)
            if sid is None:   # (the builder's keyword key costs more: asked once per row)
                sid = self._rows[key] = self._builder.stack(st.tid, st.key, reason=r)
        st.r, st.wait = r, wait
        return sid

    def _stack(self, chain, f) -> list[int]:
        if chain is not None:   # the cell awaits: its coroutines, not the event loop's select
            return [self._codes.code(c) for c in chain] + [self._builder.frame(awaits.AWAIT, None, None, "other")]
        return self._codes.stack(f)

    def _run(self) -> None:
        mark_own()
        me = threading.get_ident()
        try:
            self._lastran = lastran.LastRan()
            if not self._lastran.ok:   # no scheduler stamps: changes are split by CPU rates only
                self._lastran.close()
                self._lastran = None
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
        reasons.forget_gil_words()
        interrupts.start_thread(threading.Thread(target=self._run, name="profmagic-sampler", daemon=True),
                                self, "_thread")
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
                                      "what a thread did between passes; the run-queue time after the "
                                      "last read of a thread that ended before the recording did (at most "
                                      f"{READ_EVERY * 1e3:g} ms of its wall time)"},
            "note": ("wall = time since the previous sampling pass; cpu = the thread's CPU clock over "
                     "it, split with the previous sample where the stack changed; CPU used by a thread "
                     "after the last pass before it ended is not seen"),
        }
        # Written with wall as the primary metric; read() restores the mode's metric.
        if READ_REASONS:
            self._reason_columns()
        if self._placed:
            import numpy as np
            at, runs = np.full(self._n, np.nan), np.full(self._n, np.nan)
            i = np.fromiter(self._placed, dtype=np.int64)
            at[i] = [v[0] for v in self._placed.values()]
            runs[i] = [v[1] for v in self._placed.values()]
            self._builder.sample_column("change_at", at)
            self._builder.sample_column("change_runs", runs)
        profile = split_cpu_at_stack_changes(self._builder.build(metric="wall", meta=meta))
        data = speedscope.write(profile)
        self._builder = None
        self._codes.clear()
        return Capture(data, speedscope.NAME, meta)

    def _reason_columns(self) -> None:
        """Each sample's reason (its row's: rows are keyed by reason) and run-queue seconds: 0 but
        where a read measured some, and each live thread's since its last read on its last sample
        (reading at most every ``READ_EVERY`` loses only an ended thread's last ones)."""
        import numpy as np
        b = self._builder
        sids = b.sample_stacks()
        n = max(self._rows.values(), default=-1) + 1   # (with reasons, every row is made by _reason_row)
        row_reason, row_thread = np.full(n, reasons.UNKNOWN, dtype=object), np.full(n, -1, dtype=np.int64)
        for (tid, _, r), sid in self._rows.items():
            row_reason[sid], row_thread[sid] = r, tid
        runq = np.zeros(len(sids))
        if self._runq:
            at = np.fromiter(self._runq, dtype=np.int64, count=len(self._runq))
            runq[at] = np.fromiter(self._runq.values(), dtype=np.float64, count=len(self._runq))
        if len(sids):
            threads = row_thread[sids]
            for st in self._threads.values():
                if st.proc is not None and st.tid >= 0:
                    q = st.proc.runq_delta()
                    at = np.flatnonzero(threads == st.tid)
                    if q > 0.0 and len(at):
                        runq[at[-1]] += q
        b.sample_column("reason", row_reason[sids])
        b.sample_column("runq", runq)

    def close(self) -> None:
        self._join()
        if self._lastran is not None:
            self._lastran.close()
            self._lastran = None
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

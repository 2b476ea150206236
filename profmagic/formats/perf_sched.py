"""``perf script`` text with scheduler events -> wall and CPU time of every thread.

Read by ``perf_script.read`` when the text holds context-switch records: what profmagic's perf
recorder writes for ``--mode wall``/``both``::

    perf record -e cpu-clock/period=P,name=cpu-clock/ -e sched:sched_switch \\
                -e sched:sched_waking/call-graph=fp/ --switch-events --call-graph dwarf,32768 \\
                -k CLOCK_MONOTONIC -p PID
    perf script -F comm,pid,tid,time,period,event,ip,sym,dso,trace \\
                --show-switch-events --show-task-events --show-lost-events

with a first line ``# profmagic perf-sched start=T0 end=T1 ...`` (CLOCK_MONOTONIC seconds) that
bounds the recording, names the threads alive at its start and gives the CPU time the kernel
charged each thread in it (``/proc/PID/task/TID/schedstat`` read at both ends). Per thread, in time
order:

* ``PERF_RECORD_SWITCH OUT`` / ``IN`` mark when it left and got back a core (exact times).
* ``sched:sched_switch`` fires as it leaves, with its stack: each off-CPU interval (OUT to the
  next IN) is wall time of that stack, CPU 0; ``state`` says why it left (``S`` sleep, ``D``
  disk/uninterruptible, ``R`` preempted: runnable, waiting for a core).
* ``cpu-clock`` samples fire every P ns of the thread's CPU time. A sample's wall is the thread's
  on-CPU time since its previous sample (from the switch records), as the kernel's timer carries
  the unfinished period over a switch. Its CPU is that time scaled by the thread's CPU as the
  kernel charged it over its on-CPU time in the recording (at most 1; 1 without the header's
  figure): the switch records also count time the kernel does not charge the thread, a VM's CPU
  stolen by the host (1-2 % here under load, /proc/stat's steal) and part of perf's 32 KB stack
  copy at each switch (~10 of its ~20 us, measured here). On-CPU time after a thread's last
  sample goes to that sample's stack (to the switch-out stacks when the thread has no sample).
* A cpu-clock sample whose leaf is ``finish_task_switch`` was taken as the thread got its core
  back, before it ran: a period the kernel's timer carried over the switch, as it ran out when the
  thread left. Its stack is where the thread stopped (a sleep), not where it spent the period: its
  time goes to the thread's next sample (``meta["carried_samples"]`` counts them). Measured here,
  with plain ``perf record -e cpu-clock`` too: about one per 80 sleeps of a thread busy 30 ms and
  asleep 20 ms, which gave the sleep 10 ms of CPU each.
* ``sched:sched_waking`` (or ``sched_wakeup`` in older captures) fires in the thread that wakes another
  (only threads of the process are recorded): the off-CPU interval it ends gets ``woken_by``, and from
  the wakeup to the switch-in the thread was runnable, waiting for a core: that part is a sample of its
  own, reason ``core``. The waker's stack at the wakeup is the wakeup's own call graph (kernel frames:
  perf records it with frame pointers) under the user frames of the waker's next stack record (its
  sched_switch or cpu-clock sample) within ``WAKER_NEAR`` after, else its last one within
  ``WAKER_NEAR`` before: a wakeup often preempts the waker in the very syscall that woke (``ended``
  ``thread``). A wakeup in a timer interrupt ends the wait by ``timeout``, one from a signal's delivery
  by ``signal``, another interrupt's by ``interrupt``. With ``--system`` (perf.py) every CPU's wakeups
  are appended: a waker in another process is named ``COMM (pid P)`` (``ended`` ``process``).
  A capture with lean switches (perf.py's ``lean_switches``) has no wakeup records and switch-out
  stacks without kernel frames: no wakers, reasons from the state and the native frames alone.
* Each sample has a ``reason`` (profmagic/reasons.py): ``cpu`` on a core; off-CPU, from the
  switch-out state (``R``: preempted, ``core``) and the switch-out stack's kernel and native leaf
  frames; ``unknown`` for the labelled rows.
* ``PERF_RECORD_FORK``/``EXIT`` bound threads born or ended during the recording.

So every thread's wall is the time it existed in the recording, its CPU what the kernel charged
it (or its time on a core), and off-CPU (wall - CPU) the rest. What no event covers is counted in labelled rows, never
dropped: a thread whose first event is a switch-in was off-CPU since before the recording in a
stack perf did not see (``OFF_BEFORE``); a thread alive at the start with no event at all
(``NOT_SEEN``, from the header's thread list); intervals broken by lost events (``LOST``).
"""
from __future__ import annotations

import math
import re
from urllib.parse import quote, unquote

import numpy as np

from .. import reasons
from ..errors import ProfileFormatError
from ..model import Profile, Raw, StackBuilder
from ._perf_common import SideBand

HEADER = "# profmagic perf-sched"
OFF_BEFORE = "[off-CPU since before the thread's first event: stack not recorded]"
NOT_SEEN = "[no event: the thread did not run during the recording]"
LOST = "[events lost: on- or off-CPU unknown]"
ON_UNSAMPLED = "[on-CPU, no cpu-clock sample: stack not recorded]"
NO_STACK = "[switched out: stack not recorded]"
ON_CPU_STATE = "on-CPU"
# The kernel function a thread returns through when it gets a core back (finish_task_switch.isra.0 ...).
SWITCH_IN_LEAF = "finish_task_switch"
_FORK = re.compile(r"^\((\d+):(\d+)\)")
_PREV_STATE = re.compile(r"\bprev_state=(\S+)")
_WAKEE = re.compile(r"\bpid=(\d+)")
_IN_IRQ = re.compile(r"interrupt|irq|hrtimer_wakeup")
SWITCH_EVENT = "sched:sched_switch"
WAKEUP_EVENTS = ("sched:sched_wakeup", "sched:sched_waking")
WAKER_NEAR = 0.002   # seconds: how far a waker's own stack record may be from its wakeup (module docstring)
_TIMER = re.compile(r"hrtimer_wakeup|it_real_fn|process_timeout|tick_sched|timerfd_tmrproc")
_SIGNAL = re.compile(r"signal_wake_up|complete_signal")
CPU_EVENT = "cpu-clock"


def is_sched(text: str) -> bool:
    """Does this perf script text carry the context-switch records this reader needs?"""
    return text.startswith(HEADER) or ("PERF_RECORD_SWITCH" in text and SWITCH_EVENT + ":" in text)


def header_line(start: float, end: float, pid: int, threads: dict[int, str], cpu: dict[int, int]) -> str:
    """``cpu``: tid -> nanoseconds of CPU the kernel charged the thread between start and end."""
    alive = ",".join(f"{tid}:{quote(comm, safe='')}" for tid, comm in sorted(threads.items()))
    charged = ",".join(f"{tid}:{ns}" for tid, ns in sorted(cpu.items()))
    return f"{HEADER} start={start:.6f} end={end:.6f} pid={pid} threads={alive} cpu={charged}\n"


def header_facts(text: str, source: str = "<input>") -> dict:
    """The recorder's header: start, end (CLOCK_MONOTONIC s), pid, threads (tid -> comm), cpu
    (tid -> seconds charged)."""
    if not text.startswith(HEADER):
        return {}
    out: dict = {}
    line = text[len(HEADER):text.find("\n")]
    try:
        for part in line.split():
            k, _, v = part.partition("=")
            if k in ("start", "end"):
                out[k] = float(v)
                if not math.isfinite(out[k]):
                    raise ValueError(v)
            elif k == "pid":
                out[k] = int(v)
            elif k == "threads":
                out[k] = {int(t): unquote(c) for t, _, c in (x.partition(":") for x in v.split(",") if x)}
            elif k == "cpu":
                out[k] = {int(t): int(ns) * 1e-9 for t, _, ns in (x.partition(":") for x in v.split(",") if x)}
    except ValueError as e:
        raise ProfileFormatError(f"bad {k}= in the recorder's header ({e}); expected start=SECONDS end=SECONDS "
                                 "pid=N threads=TID:COMM,... cpu=TID:NS,...", source=source, line=1) from None
    if out.get("end", 0) < out.get("start", 0):
        raise ProfileFormatError("the recorder's header ends before it starts", source=source, line=1)
    return out


class _Thread:
    """One thread's walk through its events."""
    __slots__ = ("label", "start", "end", "on", "since", "chunks", "last_sample", "switch", "out",
                 "woken_by", "woken_at", "seen", "on_cpu", "on_rows", "wake")

    def __init__(self, label: str, start: float):
        self.label = label
        self.start = start          # when it entered the recording (window start or its fork)
        self.end = None             # its exit, if during the recording
        self.on = None              # on a core? None until an event says
        self.since = start          # start of the current on- or off-CPU stretch
        self.chunks = []            # [(seconds, switch-out row)]: on-CPU time since its last cpu-clock sample
        self.last_sample = None     # index of its last cpu-clock sample
        self.switch = None          # (row, state) of the sched_switch just before a switch-out
        self.out = None             # (row, state) of the current off-CPU stretch
        self.woken_by = None
        self.woken_at = None        # when a recorded sched_wakeup made it runnable again
        self.seen = False
        self.on_cpu = 0.0           # on-CPU seconds in the recording, and the output samples holding them
        self.on_rows: set[int] = set()
        self.wake = None            # the wakeup that ended the current off-CPU stretch (Timeline.wakeup)


class Timeline:
    """Every thread's on- and off-CPU stretches, turned into time-ordered weighted samples."""

    def __init__(self, b: StackBuilder, start: float, end: float, labels: dict[int, str],
                 charged: dict[int, float] | None = None):
        self.b, self.start, self.end, self.labels = b, start, end, labels
        self.charged = charged or {}            # tid -> CPU seconds the kernel charged in the recording
        self.threads: dict[int, _Thread] = {}
        self.sid, self.time, self.wall, self.cpu, self.state, self.woken_by = [], [], [], [], [], []
        self.reason: list[str] = []
        self.wake: list = []                    # per sample: None or (waker tid, time, pid, label, frames, ended)
        self.marks: dict[int, list] = {}        # tid -> [(time, stack row)] of its stack records
        self.labelled: dict[str, int] = {}      # label -> frame id
        self.label_rows: dict[int, tuple] = {}  # row -> (label, thread)
        self.lost = self.inconsistent = self.carried = 0

    # -- output ---------------------------------------------------------------------------
    def _add(self, sid: int, t: float, wall: float, cpu: float, state: str, woken_by: str | None = None,
             reason: str = reasons.CPU, wake=None) -> None:
        self.reason.append(reason)
        self.wake.append(wake)
        self.sid.append(sid)
        self.time.append(t)
        self.wall.append(wall)
        self.cpu.append(cpu)
        self.state.append(state)
        self.woken_by.append(woken_by)

    def _label_row(self, th: _Thread, label: str) -> int:
        """The thread's row for time no event explains, named by ``label``."""
        if label not in self.labelled:
            self.labelled[label] = self.b.frame(label, None, None, "other")
        sid = self.b.stack(th.label, (self.labelled[label],))
        self.label_rows[sid] = (label, th.label)
        return sid

    def _uncovered(self, th: _Thread, label: str, t: float, seconds: float, cpu: float = 0.0) -> None:
        self._add(self._label_row(th, label), t, seconds, cpu, "?", reason=reasons.CPU if cpu else reasons.UNKNOWN)

    def _on_cpu_until(self, th: _Thread, t: float, out_row: int | None) -> None:
        if t > th.since:
            th.chunks.append((t - th.since, out_row))
            th.on_cpu += t - th.since

    def _off_cpu_until(self, th: _Thread, t: float) -> None:
        if t <= th.since:
            return
        if th.out is None:
            self._uncovered(th, OFF_BEFORE, th.since, t - th.since)
        elif th.woken_at is not None and th.since < th.woken_at < t and th.out[2] != reasons.CORE:
            # Woken, then runnable until it got a core: that part is waiting for a core.
            self._add(th.out[0], th.since, th.woken_at - th.since, 0.0, th.out[1], th.woken_by, th.out[2], th.wake)
            self._add(th.out[0], th.woken_at, t - th.woken_at, 0.0, th.out[1], th.woken_by, reasons.CORE, th.wake)
        else:
            self._add(th.out[0], th.since, t - th.since, 0.0, th.out[1], th.woken_by, th.out[2], th.wake)

    # -- events -----------------------------------------------------------------------------
    def thread(self, tid: int) -> _Thread:
        th = self.threads.get(tid)
        if th is None:
            th = self.threads[tid] = _Thread(self.labels.get(tid) or f"Thread {tid}", self.start)
        return th

    def born(self, tid: int, t: float) -> None:
        th = self.thread(tid)
        if self.start < t <= self.end and not th.seen:
            th.start = th.since = t

    def died(self, tid: int, t: float) -> None:
        if t <= self.end:
            self.thread(tid).end = max(t, self.start)

    def switch_out(self, tid: int, t: float) -> None:
        th = self.thread(tid)
        th.seen = True
        t = min(max(t, th.start), self.end)
        if th.on is False:          # an IN was lost: where it ran is unknown
            self.inconsistent += 1
            self._uncovered(th, LOST, th.since, t - th.since)
        else:                       # on-CPU since the last IN (or since it entered the recording)
            self._on_cpu_until(th, t, th.switch[0] if th.switch else None)
        th.out = th.switch or (self._label_row(th, NO_STACK), "?", reasons.UNKNOWN)
        th.switch, th.on, th.since, th.woken_by, th.woken_at, th.wake = None, False, t, None, None, None

    def switch_in(self, tid: int, t: float) -> None:
        th = self.thread(tid)
        th.seen = True
        t = min(max(t, th.start), self.end)
        if th.on is True:           # an OUT was lost
            self.inconsistent += 1
            self._on_cpu_until(th, t, None)
        else:
            self._off_cpu_until(th, t)
        th.on, th.since, th.out, th.switch = True, t, None, None

    def cpu_sample(self, tid: int, t: float, row: int | None) -> None:
        """A cpu-clock sample: the thread's on-CPU time since its previous one, in ``row``; with
        ``row`` None (a period carried over a switch, module docstring), left to the next one."""
        th = self.thread(tid)
        th.seen = True
        if not self.start <= t <= self.end:
            return
        if th.on is False:          # running, though its switch-in was lost
            self.inconsistent += 1
            self._uncovered(th, LOST, th.since, t - th.since)
            th.since = t
        th.on = True
        self._on_cpu_until(th, t, None)
        if row is None:
            self.carried += 1
            th.since = t
            return
        self.marks.setdefault(tid, []).append((t, row))
        cpu = sum(c for c, _ in th.chunks)
        th.on_rows.add(len(self.sid))
        th.chunks, th.since, th.last_sample = [], t, len(self.sid)
        self._add(row, t, cpu, cpu, ON_CPU_STATE)

    def switch_sample(self, tid: int, row: int, trace: str, reason_of=None, t: float | None = None) -> None:
        """sched_switch: the stack (and prev_state) the thread is about to leave its core in;
        ``reason_of(state)`` says why (reasons.py), from that state and the stack's leaf frames."""
        th = self.thread(tid)
        th.seen = True
        m = _PREV_STATE.search(trace)
        state = m.group(1) if m else "?"
        th.switch = (row, state, reason_of(state) if reason_of else reasons.UNKNOWN)
        if t is not None:
            self.marks.setdefault(tid, []).append((t, row))

    def wakeup(self, waker_tid: int, trace: str, t: float | None = None, by_waker: bool = True,
               waker: tuple | None = None) -> None:
        """sched_wakeup: the wakee is runnable from ``t``; ``by_waker``: the running thread woke it
        (not an interrupt, a timer's). ``waker``: (pid, label or None for a thread of the process,
        the wakeup's frame names root first, ended: thread/process/timeout/signal/interrupt)."""
        m = _WAKEE.search(trace)
        wakee = self.threads.get(int(m.group(1))) if m else None
        if wakee is not None and wakee.on is False and int(m.group(1)) != waker_tid:
            foreign = waker is not None and waker[1] is not None
            if by_waker:
                wakee.woken_by = waker[1] if foreign else self.thread(waker_tid).label
            if t is not None and wakee.woken_at is None:
                wakee.woken_at = t
                if waker is not None:
                    wakee.wake = (waker_tid, t, waker[0], wakee.woken_by, waker[2], waker[3])

    # -- the end ------------------------------------------------------------------------------
    def finish(self, alive: dict[int, str]) -> None:
        """Close every thread at its exit or the recording's end. ``alive``: tid -> label of the
        threads the recorder saw at the start (those without any event get a labelled row)."""
        for tid, label in alive.items():
            if tid not in self.threads:
                self.labels.setdefault(tid, label)
                self._uncovered(self.thread(tid), NOT_SEEN, self.start, self.end - self.start)
        for tid, th in self.threads.items():
            if not th.seen:
                continue
            stop = min(th.end if th.end is not None else self.end, self.end)
            if th.on is False:
                self._off_cpu_until(th, stop)
            elif th.on is True:
                self._on_cpu_until(th, stop, None)
            # On-CPU time after the thread's last sample: to that sample, else to the switch-out stacks.
            for secs, row in th.chunks:
                th.on_rows.add(len(self.sid) if th.last_sample is None else th.last_sample)
                if th.last_sample is not None:
                    self.wall[th.last_sample] += secs
                    self.cpu[th.last_sample] += secs
                elif row is not None:
                    self._add(row, th.since, secs, secs, ON_CPU_STATE)
                else:
                    self._uncovered(th, ON_UNSAMPLED, th.since, secs, cpu=secs)
            th.chunks = []
            # CPU as the kernel charged it (module docstring)
            if tid in self.charged and th.on_cpu > 0:
                share = min(1.0, self.charged[tid] / th.on_cpu)
                for i in th.on_rows:
                    self.cpu[i] *= share

    def uncovered(self) -> dict:
        """label -> thread -> seconds of the labelled rows."""
        out: dict = {}
        for sid, w in zip(self.sid, self.wall):
            if sid in self.label_rows:
                label, th = self.label_rows[sid]
                per = out.setdefault(label, {})
                per[th] = per.get(th, 0.0) + w
        return out

    def waker_stacks(self, b: StackBuilder, names: dict) -> tuple[list, list, list]:
        """Per sample: the waker's stack at the wakeup (frame names, root first; module docstring),
        the waker's pid, and how the wait ended."""
        stacks, pids, ended, done = [], [], [], {}
        for w in self.wake:
            if w is None:
                stacks.append(None), pids.append(None), ended.append(None)
                continue
            hit = done.get(id(w))
            if hit is None:
                tid, t, pid, _, frames, how = w
                user = ()
                if how in ("thread", "process"):   # the waker's own user frames, from its nearest stack record
                    marks = self.marks.get(tid, [])
                    i = int(np.searchsorted([m[0] for m in marks], t))   # (few wakeups: a list per call is fine)
                    row = (marks[i][1] if i < len(marks) and marks[i][0] - t <= WAKER_NEAR else
                           marks[i - 1][1] if i > 0 and t - marks[i - 1][0] <= WAKER_NEAR else None)
                    if row is not None:
                        user = tuple(names.get(f, "") for f in b._stack_frames[row] if b._frames[f][3] != "kernel")
                hit = done[id(w)] = (user + frames, pid, how)
            stacks.append(hit[0]), pids.append(hit[1]), ended.append(hit[2])
        return stacks, pids, ended

    def add_to(self, b: StackBuilder, names: dict | None = None) -> None:
        order = np.argsort(np.asarray(self.time), kind="stable")
        stacks, pids, ended = self.waker_stacks(b, names or {})
        # Each (stack row, reason) is a row of its own, with a reason column (filterable as thread is):
        # a row takes its first sample's reason; another reason makes a twin row. (The builder's
        # own lists: its rows were made by the parser, before any reason was known.)
        col = b._extra.setdefault("reason", [])
        col.extend([None] * (len(b._stack_frames) - len(col)))
        rows: dict[tuple, int] = {}
        sids = []
        for sid, r in zip(self.sid, self.reason):
            if col[sid] is None:
                col[sid] = r
            hit = sid if col[sid] == r else rows.get((sid, r))
            if hit is None:
                hit = rows[(sid, r)] = b.stack(b._stack_thread[sid], b._stack_frames[sid], reason=r)
            sids.append(hit)
        b.add_samples(np.asarray(sids, dtype=np.int64)[order], time=np.asarray(self.time)[order],
                      wall=np.asarray(self.wall)[order], cpu=np.asarray(self.cpu)[order],
                      columns={"state": np.asarray(self.state, dtype=object)[order],
                               "woken_by": np.asarray(self.woken_by, dtype=object)[order],
                               "reason": np.asarray(self.reason, dtype=object)[order],
                               "waker_stack": _objects(stacks)[order],
                               "waker_pid": np.asarray(pids, dtype=object)[order],
                               "ended": np.asarray(ended, dtype=object)[order]})


def _objects(values: list) -> np.ndarray:
    """An object array of ``values`` as they are (tuples stay elements)."""
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        out[i] = v
    return out


def read(text: str, records: list, b: StackBuilder, data: bytes, source: str, row_of, thread_name,
         frame_names: dict, meta: dict, options: dict | None = None) -> Profile:
    """Wall and CPU from ``records`` (the Parser's Samples and SideBands, in input order); ``row_of``
    gives a Sample's stack row in ``b``, ``thread_name(comm, pid, tid)`` a thread's label,
    ``frame_names`` a frame id's name."""
    facts = header_facts(text, source)
    times = [r.time for r in records if r.time > 0]  # (PERF_RECORD_COMM lines print time 0; NaN fails)
    if not times and "start" in facts and "end" in facts:   # the recorder's window: a process that slept
        times = [facts["start"], facts["end"]]              # through it has its threads "not seen" in it
    if not times:
        raise ProfileFormatError("perf script with switch records but no timestamps: wall time needs "
                                 "the time field (perf script -F ...,time)", source=source, offset=0)
    labels: dict[int, str] = {}
    who: dict[int, tuple] = {tid: (facts.get("pid"), comm) for tid, comm in (facts.get("threads") or {}).items()}
    for r in records:  # a thread's label from its own records (a FORK line is its parent's), the last:
        labels[r.tid] = r.thread   # a thread that execs is one thread, named by its comm after the exec
        who[r.tid] = (r.pid, r.comm)
    tl = Timeline(b, facts.get("start", min(times)), facts.get("end", max(times)), labels, facts.get("cpu"))
    why: dict[tuple, str] = {}
    pid0 = facts.get("pid")
    if any(a.time > b.time for a, b in zip(records, records[1:]) if a.time > 0 and b.time > 0):
        records = sorted(records, key=lambda r: r.time)   # --system: another recording's wakeups appended

    def reason_of(r):   # why a thread left its core: its state and its stack's leaf frames (reasons.py)
        def of(state: str) -> str:
            key = (id(r.leaf_first), state)
            hit = why.get(key)
            if hit is None:
                hit = why[key] = reasons.classify(state, frames=[(frame_names.get(f, ""), b._frames[f][3])
                                                                 for f in r.leaf_first[:64]])
            return hit
        return of
    for r in records:
        if not r.time > 0:
            continue
        if isinstance(r, SideBand):
            if r.kind == "SWITCH":
                (tl.switch_out if r.text.startswith("OUT") else tl.switch_in)(r.tid, r.time)
            elif r.kind in ("FORK", "EXIT"):
                m = _FORK.match(r.text)
                if m:
                    (tl.born if r.kind == "FORK" else tl.died)(int(m.group(2)), r.time)
            elif r.kind == "LOST":
                tl.lost += 1
        elif r.event == CPU_EVENT:
            carried = r.leaf_first and frame_names.get(r.leaf_first[0], "").startswith(SWITCH_IN_LEAF)
            tl.cpu_sample(r.tid, r.time, None if carried else row_of(r))
        elif r.event == SWITCH_EVENT:
            tl.switch_sample(r.tid, row_of(r), r.trace, reason_of(r), r.time)
        elif r.event in WAKEUP_EVENTS:   # (a wakeup in an interrupt, a timer's, is not the running thread's doing)
            names = [frame_names.get(f, "") for f in r.leaf_first]
            irq = any(_IN_IRQ.search(n) for n in names)
            foreign = pid0 is not None and r.pid != pid0
            how = ("timeout" if any(_TIMER.search(n) for n in names) else "interrupt" if irq
                   else "signal" if any(_SIGNAL.search(n) for n in names) else "process" if foreign else "thread")
            # another process's thread: one the recording follows (a child) has its label, else comm and pid
            label = f"{r.comm} (pid {r.pid})" if foreign and r.tid not in tl.threads and not irq else None
            tl.wakeup(r.tid, r.trace, r.time, not irq, (r.pid, label, tuple(names[::-1]), how))
    tl.finish({tid: thread_name(comm, facts.get("pid"), tid) for tid, comm in (facts.get("threads") or {}).items()})
    if not tl.sid:
        raise ProfileFormatError("no cpu-clock sample or context switch inside the recording",
                                 source=source, offset=0)
    for tid, th in tl.threads.items():  # also threads seen in no sample: the header's, switch records'
        pid, comm = who.get(tid, (None, None))
        b.thread(th.label, tid=tid, pid=pid, name=comm)
    tl.add_to(b, frame_names)
    meta = {"event": CPU_EVENT, "window": [tl.start, tl.end], "duration": tl.end - tl.start,
            "lost_events": tl.lost, "inconsistent_switches": tl.inconsistent, "uncovered": tl.uncovered(),
            "carried_samples": tl.carried,
            "reasons": {"from": "the state at switch-out (sched_switch prev_state) and the switch-out stack's "
                                "kernel and native leaf frames (reasons.RULES)",
                        "cannot_see": "Python leaf calls (a futex with no GIL or lock frame is 'unknown'); "
                                      "the run-queue time after a wakeup it did not record (a timer's, another "
                                      "process's): that stays in the wait's reason"},
            "metrics": ["wall", "cpu"],
            "wall_attribution": ("each thread's time in the recording: on-CPU time to its cpu-clock samples' "
                                 "stacks, each off-CPU stretch (sched_switch out to the next switch in) to "
                                 "the stack it switched out in; time no event covers in labelled rows"),
            "cpu_attribution": ("each cpu-clock sample gets the thread's on-CPU time since its previous sample "
                                "(PERF_RECORD_SWITCH in/out) as wall, and as CPU that time scaled by "
                                "the CPU the kernel charged the thread over its on-CPU time (schedstat, at most 1); "
                                "a sample taken as the thread got its core back (leaf finish_task_switch) leaves "
                                "its time to the next"),
            "samples_are": "cpu-clock samples and off-CPU stretches, one sample each", **meta}
    return b.build(metric="wall", meta=meta, raw=Raw(data, "perf_script", options=options or {}))

"""Workloads that measure their own off-CPU split, for tests/test_reasons.py.

``run(scenario, seconds)`` runs the scenario's threads and returns, per thread id, what the thread
measured of itself: ``wall``, ``cpu`` and ``core`` (``/proc/self/task/<tid>/schedstat``: time on a
core, time runnable waiting for one) and the seconds of its scenario's reason: ``sleep`` (time in
``time.sleep``), ``io`` (in ``os.read`` of a slow pipe), ``lock`` (in ``Lock.acquire`` while another
thread holds it), each less the run-queue time in those calls, or ``gil`` (two spinning threads: wall - cpu - core).
``core``: three spinning processes pinned to one core (this thread and two children). ``queued``:
the run-queue time that followed the waits' wake-ups (inside the measured calls; all of ``core``
for the spinners), which a backend sees only where it sees the wakeup.

As a script (``python reason_work.py SCENARIO SECONDS``) it prints ``ready``, waits for a line on
stdin (the recorder is attached), runs, prints the result as one JSON line, and waits for another
line (or the end of stdin) before it exits.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

SCENARIOS = {"gil": ("spin-a", "spin-b"), "sleep": ("sleeper",), "pipe": ("reader",), "lock": ("waiter",),
             "core": ("pinned",)}


def _sched(tid: int) -> tuple[float, float]:
    with open(f"/proc/self/task/{tid}/schedstat") as f:
        run, wait = f.read().split()[:2]
    return int(run) / 1e9, int(wait) / 1e9


class _Measure:
    def __init__(self, out: dict, reason: str):
        self.out, self.reason, self.spent, self.queued = out, reason, 0.0, 0.0

    def __enter__(self):
        self.tid = threading.get_native_id()
        self.t0, (self.c0, self.q0) = time.perf_counter(), _sched(self.tid)
        return self

    def before(self) -> tuple[float, float]:
        q = _sched(self.tid)[1]   # read first: its file read may wait for the GIL, which is not the call's time
        return time.perf_counter(), q

    def after(self, mark: tuple[float, float]) -> None:
        """The time since ``before()``, less the run-queue time in it, added to ``spent``. (The
        call between them is made in the workload's own frame: a sampler names the leaf call.)"""
        t = time.perf_counter()
        queued = _sched(self.tid)[1] - mark[1]
        self.spent += t - mark[0] - queued
        self.queued += queued

    def __exit__(self, *exc):
        wall = time.perf_counter() - self.t0
        c1, q1 = _sched(self.tid)
        cpu, core = c1 - self.c0, q1 - self.q0
        queued = self.queued   # run-queue time after the waits' wake-ups
        if self.reason == "gil":
            spent, queued = wall - cpu - core, core
        elif self.reason == "core":
            spent, queued = core, 0.0
        else:   # time in the calls, less the run-queue time in them (their wake-ups)
            spent = self.spent
        self.out[self.tid] = {"name": threading.current_thread().name, "wall": wall, "cpu": cpu, "core": core,
                              "reason": self.reason, self.reason: spent, "queued": queued}


def _spin(out, end):
    with _Measure(out, "gil"):
        x = 0
        while time.monotonic() < end:
            for _ in range(20000):
                x += 1


def _sleeper(out, end):
    with _Measure(out, "sleep") as m:
        while time.monotonic() < end:
            t = m.before()
            time.sleep(0.02)
            m.after(t)
            t = time.thread_time() + 0.005
            while time.thread_time() < t:   # 5 ms of CPU between the sleeps
                pass


def _reader(out, end, fd):
    with _Measure(out, "io") as m:
        while time.monotonic() < end:
            t = m.before()
            os.read(fd, 1)
            m.after(t)


def _writer(end, fd):
    while time.monotonic() < end + 0.2:
        time.sleep(0.02)
        os.write(fd, b"x")


def _holder(lock, end):
    while time.monotonic() < end + 0.1:
        with lock:
            time.sleep(0.03)
        time.sleep(0.001)


def _waiter(out, end, lock):
    with _Measure(out, "lock") as m:
        while time.monotonic() < end:
            t = m.before()
            lock.acquire()
            m.after(t)
            lock.release()
            time.sleep(0.0005)


def _pinned(out, end, cpu):
    os.sched_setaffinity(0, {cpu})
    with _Measure(out, "core"):
        x = 0
        while time.monotonic() < end:
            for _ in range(20000):
                x += 1


def run(scenario: str, seconds: float) -> dict:
    out: dict = {}
    end = time.monotonic() + seconds
    threads, extra, procs = [], [], []
    if scenario == "gil":
        threads = [threading.Thread(target=_spin, args=(out, end), name=n) for n in SCENARIOS["gil"]]
    elif scenario == "sleep":
        threads = [threading.Thread(target=_sleeper, args=(out, end), name="sleeper")]
    elif scenario == "pipe":
        r, w = os.pipe()
        threads = [threading.Thread(target=_reader, args=(out, end, r), name="reader")]
        extra = [threading.Thread(target=_writer, args=(end, w), name="writer")]
    elif scenario == "lock":
        lock = threading.Lock()
        extra = [threading.Thread(target=_holder, args=(lock, end), name="holder")]
        threads = [threading.Thread(target=_waiter, args=(out, end, lock), name="waiter")]
    elif scenario == "core":
        cpu = min(os.sched_getaffinity(0))
        for _ in range(2):
            procs.append(subprocess.Popen([sys.executable, "-c", "import os,sys\nos.sched_setaffinity(0, {%d})\n"
                                           "while True: pass" % cpu]))
        threads = [threading.Thread(target=_pinned, args=(out, end, cpu), name="pinned")]
    else:
        raise ValueError(scenario)
    try:
        for t in extra + threads:
            t.start()
        for t in threads + extra:
            t.join()
    finally:
        for p in procs:
            p.kill()
            p.wait()
        if scenario == "pipe":
            os.close(r)
            os.close(w)
    return out


if __name__ == "__main__":
    print("ready", flush=True)
    sys.stdin.readline()
    print(json.dumps(run(sys.argv[1], float(sys.argv[2]))), flush=True)
    sys.stdin.readline()   # alive until the recorder is done: eu-stack resolves addresses in this process

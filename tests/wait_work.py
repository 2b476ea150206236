"""Workloads for tests/test_waits.py, run as a child: ``wait_work.py SCENARIO SECONDS``. Prints
``ready``, waits for ``go`` on stdin, runs, prints one JSON line of what it measured of itself.

* ``event``: the main thread waits on a threading.Event that thread ``wk-setter`` sets after a busy
  loop of SECONDS in ``busy_until`` (its CPU time measured: ``setter_cpu``).
* ``timeout``: the main thread waits on an Event nobody sets, with a timeout, then computes.
* ``pipe``: the main thread reads a pipe a child process writes to after a busy loop.
* ``stdin``: the main thread reads a line the test process writes (its parent: another process).
"""
import json
import os
import subprocess
import sys
import threading
import time


def busy_until(end):
    x = 0
    while time.perf_counter() < end:
        x += 1
    return x


def event(seconds):
    out = {}
    ev = threading.Event()

    def setter():
        c0 = time.thread_time()
        busy_until(time.perf_counter() + seconds)
        out["setter_cpu"] = time.thread_time() - c0
        ev.set()
    th = threading.Thread(target=setter, name="wk-setter")
    t0 = time.perf_counter()
    th.start()
    ev.wait()
    out["waited"] = time.perf_counter() - t0
    th.join()
    out["wall"] = time.perf_counter() - t0
    return out


def timeout(seconds):
    t0 = time.perf_counter()
    threading.Event().wait(seconds / 2)
    waited = time.perf_counter() - t0
    busy_until(time.perf_counter() + seconds / 4)
    return {"waited": waited, "wall": time.perf_counter() - t0}


CHILD = "import sys, time\nend = time.perf_counter() + float(sys.argv[1])\nwhile time.perf_counter() < end: pass\nsys.stdout.write('x'); sys.stdout.flush()\n"


def pipe(seconds):
    t0 = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(seconds / 2)], stdout=subprocess.PIPE)
    got = os.read(child.stdout.fileno(), 1)
    waited = time.perf_counter() - t0
    child.wait()
    return {"waited": waited, "wall": time.perf_counter() - t0, "child": child.pid, "got": got.decode()}


def stdin(seconds):
    t0 = time.perf_counter()
    sys.stdin.readline()          # the test process writes this line: a waker in another process
    waited = time.perf_counter() - t0
    busy_until(time.perf_counter() + seconds / 4)
    return {"waited": waited, "wall": time.perf_counter() - t0}


SCENARIOS = {"event": event, "timeout": timeout, "pipe": pipe, "stdin": stdin}

if __name__ == "__main__":
    print("ready", flush=True)
    sys.stdin.readline()
    print(json.dumps(SCENARIOS[sys.argv[1]](float(sys.argv[2]))), flush=True)

"""Notebook 05's Dask job: one worker is a straggler because its tasks wait on a lock.

Each partition of the job is loaded (``load``) and then scored (``score``) against a reference
table on the worker that holds the partition's shard. Every worker process has its own table,
behind a lock. One worker also hosts the table's reloader, a background thread that reloads the
table every ``PERIOD`` seconds:

- ``reloader(fixed=False)`` holds the lock while it loads (``LOAD_S`` seconds of I/O: a sleep here),
  so the tasks on that worker wait for the lock most of the time;
- ``reloader(fixed=True)`` loads first, then swaps the new table in under the lock (microseconds).

Each task measures itself (wall, CPU, pid), so the profile can be checked against it.
"""
from __future__ import annotations

import os
import threading
import time

ROWS = 1000          # rows of the reference table
LOOKUPS = 60         # lookups per score task
WORK_S = 0.001       # CPU seconds of work per lookup: 0.06 s of CPU per score task
LOAD_S = 0.15        # the reload's I/O
PERIOD = 0.2         # a reload starts every PERIOD seconds
PARTS = 16


class Table:
    """The reference table of this worker process."""

    def __init__(self):
        self.lock = threading.Lock()
        self.rows = list(range(ROWS))
        self.version = 0

    def lookup(self, i: int) -> int:
        with self.lock:
            return self.rows[i % len(self.rows)]

    def reload(self, fixed: bool) -> None:
        if fixed:
            rows = _download()          # the I/O outside the lock
            with self.lock:
                self.rows, self.version = rows, self.version + 1
        else:
            with self.lock:             # the bug: the lock is held through the I/O
                self.rows, self.version = _download(), self.version + 1


TABLE = Table()
_RELOADER: dict = {}


def _download() -> list:
    time.sleep(LOAD_S)
    return list(range(ROWS))


def _burn(seconds: float) -> None:
    c0 = time.thread_time()
    while time.thread_time() - c0 < seconds:
        pass


def _reload_loop(stop: threading.Event, fixed: bool) -> None:
    while not stop.is_set():
        t0 = time.monotonic()
        TABLE.reload(fixed)
        stop.wait(max(0.0, PERIOD - (time.monotonic() - t0)))


def start_reloader(fixed: bool = False) -> int:
    """Start this process's reloader (run on one worker with ``client.run``); returns the pid."""
    stop_reloader()
    stop = threading.Event()
    t = threading.Thread(target=_reload_loop, args=(stop, fixed), name="table-reloader", daemon=True)
    _RELOADER.update(stop=stop, thread=t)
    t.start()
    return os.getpid()


def stop_reloader() -> int:
    """Stop this process's reloader, if any; returns how many reloads it did."""
    stop, t = _RELOADER.pop("stop", None), _RELOADER.pop("thread", None)
    if stop is not None:
        stop.set()
        t.join()
    return TABLE.version


def _measured(kind: str, fn, *args) -> dict:
    t0, c0 = time.perf_counter(), time.thread_time()
    value = fn(*args)
    return {"task": kind, "wall": time.perf_counter() - t0, "cpu": time.thread_time() - c0, "pid": os.getpid(),
            "value": value}


def load(part: int) -> dict:
    """Read one partition: a little I/O and parsing."""
    def work():
        time.sleep(0.02)
        _burn(0.02)
        return list(range(part * LOOKUPS, (part + 1) * LOOKUPS))
    return _measured("load", work)


def score(loaded: dict) -> dict:
    """Score one partition: a lookup in the reference table per row, then a little work."""
    def work():
        total = 0
        for i in loaded["value"]:
            total += TABLE.lookup(i)
            _burn(WORK_S)
        return total
    return _measured("score", work)


def run_job(client, parts: int = PARTS) -> list[dict]:
    """The job: partitions sharded round-robin over the workers, each loaded and scored where its
    shard is; returns every task's own measurement."""
    workers = sorted(client.run(os.getpid))
    loaded = [client.submit(load, i, workers=[workers[i % len(workers)]], pure=False) for i in range(parts)]
    scored = [client.submit(score, f, workers=[workers[i % len(workers)]], pure=False) for i, f in enumerate(loaded)]
    return [{**r, "value": None} for r in client.gather(loaded) + client.gather(scored)]

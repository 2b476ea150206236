"""The in-worker side of a cluster recording (standard library only).

One ``WorkerSampler`` per worker process samples every Python thread there, with the shared loop
of ``profmagic/sampling.py``: each pass gives a thread's stack, the wall time since the previous
pass and its CPU clock's delta. Each sample is labelled with the task its thread was running
(``task_of()``: Dask's ``{thread ident: key}``; or ``stack_task(frames)``: the task found on the
stack, for Ray). Samples are aggregated here, in the worker: what goes back through the engine is
the distinct (thread, task, stack) rows with their sample count, wall and CPU, plus a bounded,
evenly thinned list of time-ordered samples (``MAX_SAMPLES``). ``payload()`` is that, zlib-
compressed: ``MAGIC``, the JSON length (4 bytes, big-endian), the JSON (frames, threads, tasks,
stack rows, facts), then the samples as four packed arrays in the worker's byte order: time
(float64 s), stack row (int32), wall and cpu (float32 s; cpu NaN where the clock was unreadable).
``cluster/assemble.py`` reads it.

With ``spill=path``, the sampler rewrites its payload there every ``flush`` seconds (a fresh
``O_EXCL | O_NOFOLLOW`` file, then renamed; in a folder that must be a private one of ours, else
it does not spill and says so in ``error``), so a worker killed mid-recording keeps what it had
written; the engine side collects the file from the node and removes it. A sampler stops by itself after ``max_seconds`` (a recording
whose driver went away does not sample forever).
"""
from __future__ import annotations

import json
import os
import socket
import struct
import sys
import threading
import time
import zlib
from array import array
from typing import Callable

from ..interrupts import start_thread
from ..sampling import Codes, ThreadClock, code_name, every
from .channel import THREADS, private_dir, write_new

PAYLOAD_VERSION = 1
MAGIC = b"PMW1"
SAMPLE_ARRAYS = (("time", "d"), ("stack", "i"), ("wall", "f"), ("cpu", "f"))
MAX_SAMPLES = 20_000      # time-ordered samples kept per worker; the stack rows hold every sample
SAMPLE_BUDGET = 2_000_000  # ... and over the whole cluster: the driver holds them all in pandas
MIN_SAMPLES = 1_000
MAX_KEYS = 100_000        # distinct task keys counted per worker


def samples_per_worker(workers: int) -> int:
    """Time-ordered samples each worker keeps: MAX_SAMPLES, less on a cluster so large that the
    driver would hold more than SAMPLE_BUDGET (2,000 each at 1,000 workers)."""
    return max(MIN_SAMPLES, min(MAX_SAMPLES, SAMPLE_BUDGET // max(1, int(workers))))


class WorkerSampler:
    """Samples this process from a thread of its own. ``start()``, ``stop()``, then ``payload()``.

    ``threads="tasks"`` keeps only samples of threads running a task (a worker's event loop and
    idle pool threads would otherwise add seconds of idle wall time per thread); the CPU the other
    threads used is still summed into ``other_cpu``. ``threads="all"`` keeps every thread.
    """

    def __init__(self, rate: float = 100.0, *, task_of: Callable[[], dict] | None = None,
                 prefix: Callable[[object], str] = str, stack_task: Callable[[list], str | None] | None = None,
                 threads: str = "tasks", max_samples: int = MAX_SAMPLES, spill: str | None = None,
                 flush: float = 1.0, max_seconds: float = 3600.0, info: dict | None = None):
        if not rate or rate <= 0:
            raise ValueError(f"rate must be a positive number of Hz, got {rate!r}")
        if threads not in THREADS:
            raise ValueError(f"threads must be one of {THREADS}, got {threads!r}")
        self.rate = float(rate)
        self.interval = 1.0 / self.rate
        self.task_of = task_of
        self.prefix = prefix
        self.stack_task = stack_task
        self.threads_mode = threads
        self.max_samples = max(2, int(max_samples))
        self.spill = spill
        self.flush = float(flush)
        self.max_seconds = float(max_seconds)
        self.info = dict(info or {})
        self.frames: list[list] = []                  # [name, file, line]
        self.codes = Codes(self._new_code)
        self.threads: list[list] = []                 # [native id, name]
        self._thread_idx: dict[tuple, int] = {}
        self._clocks: dict[tuple, ThreadClock] = {}
        self.tasks: list[str] = []
        self._task_idx: dict[str, int] = {}
        self._prefix_of: dict = {}                    # task key -> prefix (keys repeat every pass)
        self._stack_task: dict[tuple, str | None] = {}
        self.keys: dict[str, set] = {}                # prefix -> distinct keys seen
        self._nkeys = 0
        self.rows: dict[tuple, int] = {}              # (thread, task, stack) -> row
        self.row_keys: list[tuple] = []
        self.n: list[int] = []
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self.samples = {name: array(code) for name, code in SAMPLE_ARRAYS}   # time-ordered, thinned
        self._pass = array("q")                       # each kept sample's pass number (not sent)
        self.stride = 1                               # one kept sample per `stride` passes
        self.other_cpu = 0.0
        self.passes = 0
        self.ended: str | None = None
        self.error: str | None = None
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()                 # payload() from another thread vs the sampler
        self.t0_epoch = self.t0 = self.t1 = 0.0
        self.sampler_cpu = 0.0                        # this sampler thread's own CPU time: its cost
        self._last_flush = 0.0

    # -- sampling ------------------------------------------------------------------------
    def _new_code(self, code, line: int) -> int:
        self.frames.append([code_name(code), code.co_filename, line])
        return len(self.frames) - 1

    def _thread_state(self, ident: int, live: dict) -> tuple[int, ThreadClock]:
        t = live.get(ident)
        nid = getattr(t, "native_id", None)
        key = (ident, nid)
        idx = self._thread_idx.get(key)
        if idx is None:
            idx = self._thread_idx[key] = len(self.threads)
            self.threads.append([nid, t.name if t is not None else "?"])
            self._clocks[key] = ThreadClock(ident, nid)
        return idx, self._clocks[key]

    def _task(self, label: str | None) -> int:
        if label is None:
            return -1
        i = self._task_idx.get(label)
        if i is None:
            i = self._task_idx[label] = len(self.tasks)
            self.tasks.append(label)
        return i

    def _label(self, key) -> str:
        p = self._prefix_of.get(key)
        if p is None:
            p = self._prefix_of[key] = str(self.prefix(key))
            if self._nkeys < MAX_KEYS:
                self.keys.setdefault(p, set()).add(key)
                self._nkeys += 1
        return p

    def _tick(self, me: int, now: float, wall: float) -> bool:
        frames = sys._current_frames()
        frames.pop(me, None)   # this call's frame holds the dict: a cycle, keeping every frame (and its locals) until gc
        live = {t.ident: t for t in threading.enumerate()}
        running = self.task_of() if self.task_of is not None else {}
        t = now - self.t0
        keep = self.passes % self.stride == 0
        with self._lock:
            for ident, f in frames.items():
                tidx, clock = self._thread_state(ident, live)
                cpu = clock.delta()
                key = running.get(ident)
                label = None if key is None else self._label(key)
                stack = None
                if label is None and self.stack_task is not None:
                    stack = tuple(self.codes.stack(f))
                    label = self._stack_task.get(stack, False)
                    if label is False:
                        label = self._stack_task[stack] = self.stack_task([self.frames[i] for i in stack])
                if label is None and self.threads_mode == "tasks":
                    if cpu == cpu:
                        self.other_cpu += cpu
                    continue
                if stack is None:
                    stack = tuple(self.codes.stack(f))
                rk = (tidx, self._task(label), stack)
                row = self.rows.get(rk)
                if row is None:
                    row = self.rows[rk] = len(self.row_keys)
                    self.row_keys.append(rk)
                    self.n.append(0)
                    self.wall.append(0.0)
                    self.cpu.append(0.0)
                self.n[row] += 1
                self.wall[row] += wall
                self.cpu[row] += cpu if cpu == cpu else 0.0
                if keep:
                    sm = self.samples
                    sm["time"].append(t)
                    sm["stack"].append(row)
                    sm["wall"].append(wall)
                    sm["cpu"].append(cpu)
                    self._pass.append(self.passes)
            self.passes += 1
            if len(self._pass) >= self.max_samples:
                self._thin()
        if self.spill and now - self._last_flush >= self.flush:
            self._last_flush = now
            self._write_spill()
        if now - self.t0 >= self.max_seconds:
            self.ended = f"stopped by itself after max_seconds={self.max_seconds:g}"
            return False
        return True

    def _thin(self) -> None:
        """Keep every other kept pass (all threads' samples of it), so the list stays even in time."""
        self.stride *= 2
        keep = [i for i, p in enumerate(self._pass) if p % self.stride == 0]
        self.samples = {k: array(a.typecode, (a[i] for i in keep)) for k, a in self.samples.items()}
        self._pass = array("q", (self._pass[i] for i in keep))

    def _baseline(self, me: int) -> None:
        live = {t.ident: t for t in threading.enumerate()}
        for ident in sys._current_frames():
            if ident != me:
                self._thread_state(ident, live)[1].baseline()

    def _run(self) -> None:
        me = threading.get_ident()
        try:
            self.t0 = self._last_flush = time.perf_counter()
            self.t0_epoch = time.time()
            self._baseline(me)
            self._ready.set()
            c0 = time.thread_time()
            self.t1 = every(self.interval, self._stop, lambda now, wall: self._tick(me, now, wall), self.t0)
            self.sampler_cpu = time.thread_time() - c0
        except BaseException as e:  # reported in the payload, not lost in a thread
            self.error = f"{type(e).__name__}: {e}"
            self.t1 = time.perf_counter()
            self._ready.set()

    def _write_spill(self) -> None:
        try:
            write_new(self.spill, self.payload())
        except OSError as e:
            self.error = f"could not write {self.spill}: {e}"

    # -- interface -----------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("this worker sampler was already started")
        if self.spill:
            try:   # a folder someone else made, or a symlink: sample without spilling, and say so
                private_dir(os.path.dirname(self.spill))
            except OSError as e:
                self.error = f"no spill file: {e}"
                self.spill = None
        start_thread(threading.Thread(target=self._run, name="profmagic-worker-sampler", daemon=True), self, "_thread")
        self._ready.wait()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, keep_spill: bool = False) -> bytes:
        """Stop sampling, remove the spill file (``keep_spill``: write the last payload there, for
        the engine to collect from a worker that is going away), and return the payload."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        if self.ended is None:
            self.ended = "stopped"
        data = self.payload()
        if self.spill and keep_spill:
            try:
                write_new(self.spill, data)
            except OSError:
                pass
        elif self.spill:
            try:
                os.unlink(self.spill)
            except FileNotFoundError:
                pass
            try:
                os.rmdir(os.path.dirname(self.spill))   # the last one out removes the session's folder
            except OSError:
                pass
        return data

    def payload(self) -> bytes:
        with self._lock:
            end = self.t1 if self.t1 else time.perf_counter()
            doc = {
                "v": PAYLOAD_VERSION, "pid": os.getpid(), "host": socket.gethostname(),
                "info": self.info, "rate": self.rate, "t0": self.t0_epoch,
                "duration": max(end - self.t0, 0.0), "passes": self.passes, "threads_mode": self.threads_mode,
                "frames": self.frames, "threads": self.threads, "tasks": self.tasks,
                "stacks": [[tk[0], tk[1], list(tk[2]), n, w, c]
                           for tk, n, w, c in zip(self.row_keys, self.n, self.wall, self.cpu)],
                "n_samples": len(self.samples["time"]), "byteorder": sys.byteorder,
                "stride": self.stride, "other_cpu": self.other_cpu, "sampler_cpu": self.sampler_cpu,
                "task_keys": {p: len(k) for p, k in self.keys.items()},
                "keys_capped": self._nkeys >= MAX_KEYS, "ended": self.ended, "error": self.error,
                "written": time.time(),
            }
            head = json.dumps(doc, separators=(",", ":")).encode()
            body = b"".join(self.samples[name].tobytes() for name, _ in SAMPLE_ARRAYS)
        return zlib.compress(MAGIC + struct.pack("!I", len(head)) + head + body, 6)


def profmagic_threads() -> list[str]:
    """Names of this process's profmagic threads still alive (none once a recording is over)."""
    return [t.name for t in threading.enumerate() if t.name.startswith("profmagic-") and t.is_alive()]

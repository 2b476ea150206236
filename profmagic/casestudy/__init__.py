"""The article's case study as a small, real workload.

A C++ engine (worker.cpp) keeps a task queue drained by one ``std::thread`` worker with no Python
state. Python submits ops; ``Tensor.result()`` (like ``tensor.numpy()``) and ``Tensor.shape`` (a
shape not known ahead) block until the worker is done. For every op the worker calls
``get_device_properties()``, which holds a lock shared by every process (``flock``) for
``hold_ms``: its cost grows with the number of processes. ``cache=True`` is the fix: ask once.

The extension is compiled with the system ``g++`` on first use into a cache directory
(``$PROFMAGIC_CACHE`` or ``~/.cache/profmagic``) and loaded through ctypes, which releases the GIL
during every call, so a waiting main thread is off-CPU and other threads run.
"""
from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .. import cbuild

SOURCE = Path(__file__).with_name("worker.cpp")
CXXFLAGS = ["-O2", "-g", "-fno-omit-frame-pointer", "-fno-optimize-sibling-calls", "-fPIC",
            "-shared", "-pthread"]
DEFAULT_HOLD_MS = 2.0
DEFAULT_N = 500000
OPS_PER_STEP = 4

_lib = None


def cache_dir() -> Path:
    """The case study's private build folder (also its lock file's): cbuild refuses one another user may write."""
    return cbuild.cache_dir("casestudy")


def compiler() -> str:
    return cbuild.compiler(cxx=True)


def build(force: bool = False) -> Path:
    """Compile worker.cpp once per (source, flags, compiler); return the path of the .so."""
    return cbuild.build("libworker", SOURCE, "casestudy", CXXFLAGS, cxx=True, force=force)


def library() -> ctypes.CDLL:
    global _lib
    if _lib is None:
        lib = ctypes.CDLL(str(build()))  # CDLL (not PyDLL): the GIL is released in every call
        lib.cs_create.restype = ctypes.c_void_p
        lib.cs_create.argtypes = [ctypes.c_char_p, ctypes.c_double, ctypes.c_int, ctypes.c_int]
        lib.cs_submit.restype = ctypes.c_uint64
        lib.cs_submit.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.cs_wait.restype = ctypes.c_int
        lib.cs_wait.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.POINTER(ctypes.c_float), ctypes.c_int]
        lib.cs_props_calls.restype = ctypes.c_long
        lib.cs_props_calls.argtypes = [ctypes.c_void_p]
        lib.cs_worker_tid.restype = ctypes.c_long
        lib.cs_worker_tid.argtypes = [ctypes.c_void_p]
        lib.cs_destroy.restype = None
        lib.cs_destroy.argtypes = [ctypes.c_void_p]
        _lib = lib
    return _lib


def default_lock() -> str:
    return str(cache_dir() / "device.lock")


class Tensor:
    """The handle of one submitted op. Reading it waits for the worker."""

    def __init__(self, engine: "Engine", op_id: int):
        self._engine, self._id = engine, op_id

    def result(self) -> list[float]:
        """Blocks until the worker has run this op (a sync, like ``tensor.numpy()``)."""
        return self._engine._wait(self._id)

    @property
    def shape(self) -> tuple[int]:
        """Blocks too: the output's length is known only once the op ran."""
        return (self._engine._wait_len(self._id),)


class Engine:
    """One C++ engine with its worker thread. ``with Engine() as e: e.topk(10).result()``."""

    def __init__(self, cache: bool = False, hold_ms: float = DEFAULT_HOLD_MS, n: int = DEFAULT_N,
                 lock_path: str | None = None):
        self.cache, self.hold_ms, self.n = cache, hold_ms, n
        self.lock_path = lock_path or default_lock()
        self._lib = library()
        self._h = self._lib.cs_create(self.lock_path.encode(), float(hold_ms), int(cache), int(n))
        if not self._h:
            raise OSError(f"cannot open the lock file {self.lock_path}")
        self._buf = (ctypes.c_float * 64)()

    def topk(self, k: int = 10) -> Tensor:
        return Tensor(self, self._lib.cs_submit(self._h, k))

    def _wait(self, op_id: int) -> list[float]:
        n = self._lib.cs_wait(self._h, op_id, self._buf, len(self._buf))
        return list(self._buf[:min(n, len(self._buf))])

    def _wait_len(self, op_id: int) -> int:
        return self._lib.cs_wait(self._h, op_id, None, 0)

    @property
    def props_calls(self) -> int:
        """How many times the worker called get_device_properties()."""
        return self._lib.cs_props_calls(self._h)

    @property
    def worker_tid(self) -> int:
        """The worker's native thread id (its thread is named ``cs-worker``)."""
        return self._lib.cs_worker_tid(self._h)

    def close(self) -> None:
        if self._h:
            self._lib.cs_destroy(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def prepare_batch(size: int = 2000) -> int:
    """The step's own Python work (on-CPU, in the main thread)."""
    acc = 0
    for i in range(size):
        acc = (acc * 31 + i) % 1000003
    return acc


def train_step(engine: Engine, ops: int = OPS_PER_STEP) -> float:
    """One step: prepare in Python, submit ``ops`` ops, read a shape, then a result (two syncs)."""
    prepare_batch()
    outs = [engine.topk(8 + i) for i in range(ops)]
    n = outs[0].shape[0]       # sync 1: a shape not known ahead
    values = outs[-1].result()  # sync 2: like tensor.numpy()
    return n + values[0]


def run(steps: int, engine: Engine) -> float:
    """Run ``steps`` steps; return the mean seconds per step."""
    t0 = time.perf_counter()
    for _ in range(steps):
        train_step(engine)
    return (time.perf_counter() - t0) / steps


def scaling(processes=(1, 2, 4), steps: int = 40, cache: bool = False, hold_ms: float = DEFAULT_HOLD_MS,
            n: int = DEFAULT_N, timeout: float = 120.0):
    """Run ``k`` independent processes for each k, all sharing one lock file, started together.

    Returns a DataFrame: processes, step_ms (mean over the processes), slowdown (vs the first row).
    """
    import pandas as pd
    build()
    rows = []
    with tempfile.TemporaryDirectory(prefix="profmagic-case-") as tmp:
        lock = os.path.join(tmp, "device.lock")
        for k in processes:
            per = _run_group(k, steps, cache, hold_ms, n, lock, timeout)
            rows.append({"processes": k, "step_ms": 1000 * sum(per) / len(per),
                         "worst_ms": 1000 * max(per)})
    df = pd.DataFrame(rows)
    df["slowdown"] = df["step_ms"] / df["step_ms"].iloc[0]
    return df


class ranks:
    """``with ranks(3): ...``: ``k`` other processes run the (uncached unless ``cache``) steps in a loop,
    sharing the default lock with this one, until the block ends; then they are stopped and reaped."""

    def __init__(self, k: int, cache: bool = False, hold_ms: float = DEFAULT_HOLD_MS, n: int = DEFAULT_N,
                 lock_path: str | None = None):
        self.args = ["--forever", "--hold-ms", str(hold_ms), "--n", str(n), "--lock", lock_path or default_lock()]
        self.args += ["--cache"] if cache else []
        self.k, self.procs = k, []

    def __enter__(self):
        build()
        try:
            self.procs = [_spawn(self.args) for _ in range(self.k)]
            for p in self.procs:
                line = p.stdout.readline()
                if line.strip() != "ready":
                    raise RuntimeError(f"case-study rank failed: {line}{p.stderr.read()}")
                p.stdin.write("go\n")
                p.stdin.flush()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
            p.communicate()
        self.procs = []


def _spawn(args) -> subprocess.Popen:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return subprocess.Popen([sys.executable, "-m", "profmagic.casestudy", *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _run_group(k, steps, cache, hold_ms, n, lock, timeout) -> list[float]:
    args = ["--steps", str(steps), "--hold-ms", str(hold_ms), "--n", str(n), "--lock", lock]
    procs = [_spawn(args + (["--cache"] if cache else [])) for _ in range(k)]
    try:
        for p in procs:  # every child is warmed up before any starts measuring
            line = p.stdout.readline()
            if line.strip() != "ready":
                raise RuntimeError(f"case-study child failed: {line}{p.stderr.read()}")
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        out = []
        for p in procs:
            stdout, stderr = p.communicate(timeout=timeout)
            if p.returncode != 0:
                raise RuntimeError(f"case-study child exited {p.returncode}: {stderr}")
            out.append(json.loads(stdout)["step_s"])
        return out
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()

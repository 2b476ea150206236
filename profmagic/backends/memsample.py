"""Sampled allocation tracking in this process, for memory beside time (``--memory``), with no
profile function: a small C extension (memsample.c, compiled at first use by ``cbuild``) wraps Python's
MEM and OBJ allocator domains, and numpy's data allocator where numpy has one (NEP 49, numpy 1.22+).

Each allocation takes its size off a per-thread countdown; when the countdown crosses zero the
allocation is sampled (a Poisson process over bytes, mean ``interval``), weighted by the inverse of
its chance to be sampled (``size / (1 - exp(-size / interval))``), its Python stack captured by walking
the thread's frames (no allocation), and its pointer kept so that its free is seen. From the sampled
allocations and frees, the reader estimates live bytes over time, the high-water mark and the bytes
alive there per (thread, stack), and the bytes and count allocated per stack.

Unseen: allocations straight from malloc by C code (not through Python's allocators or numpy's
handler); the RAW domain unless ``memory_raw`` (its calls may come without the GIL: those are
counted with no stack); numpy arrays made in threads the cell started (numpy's handler is per context).

A figure of ``B`` bytes made of small allocations has a standard error of about sqrt(B x interval)
(each sample stands for ``interval`` bytes): ``halfwidth`` gives the 95% interval, which overstates
it for allocations larger than the interval (they are sampled with near certainty).
"""
from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

from .. import cbuild, interrupts
from ..errors import ProfilerError
from ..formats import memsample as fmt
from ..model import Profile
from .base import Capture, Options

NAME = "memsample"
SOURCE = Path(__file__).with_name("memsample.c")
INTERVAL = 32 * 1024   # bytes; bench/RESULTS.md, "Sampled allocation tracking": cost and error per interval
BUSY = ("--memory's sampled tracker is already recording in this process (a cell profiled with --memory "
        "inside another?): one recording at a time")
_mod = None


def _numpy_flags() -> list[str]:
    try:
        import numpy
    except ImportError:
        return []
    if tuple(int(x) for x in numpy.__version__.split(".")[:2]) < (1, 22):
        return []   # no PyDataMem_SetHandler before numpy 1.22: numpy's buffers unseen
    return ["-DMS_NUMPY", "-I", numpy.get_include(), f"-DMS_NUMPY_VERSION=\"{numpy.__version__}\""]


def module():
    """The compiled extension, built on first use (cached per source, compiler and Python)."""
    global _mod
    if _mod is None:
        try:
            path = cbuild.build_module("_memsample", SOURCE, "memsample", _numpy_flags())
        except cbuild.BuildError as e:
            raise ProfilerError(f"--memory's sampled tracker could not be built: {e}") from None
        _mod = cbuild.load_module("profmagic.backends._memsample", path)
    return _mod


def available() -> tuple[bool, str]:
    if sys.implementation.name != "cpython" or sys.version_info < (3, 11):
        return False, "the sampled tracker needs CPython 3.11 or later"
    try:
        cbuild.compiler()
        cbuild.python_headers()
    except cbuild.BuildError as e:
        return False, str(e)
    return True, "profmagic's sampled allocation tracker (a C extension built at first use)"


def _names() -> dict[int, str]:
    return {t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}


class Recorder:
    def __init__(self, options: Options):
        ok, why = available()
        if not ok:
            raise ProfilerError(f"--memory cannot record here: {why}")
        extra = options.extra
        self.interval = float(extra.get("memory_interval", INTERVAL))
        self.raw = bool(extra.get("memory_raw", False))
        self.options = options
        self.started = False
        self.names: dict[int, str] = {}
        self.t0_unix: float | None = None
        self.mod = module()   # built now (about a second, once per machine), before any recorder starts

    def start(self) -> None:
        m = self.mod
        if self.started:
            raise ProfilerError("this sampled memory recorder was already started; make a new one")
        if m.running():
            raise ProfilerError(BUSY)
        self.names = _names()
        self.t0_unix = time.time()
        with interrupts.deferred():   # Ctrl-C between the start and the flag would leave it tracking
            try:
                m.start(interval=self.interval, raw=self.raw, numpy=m.has_numpy())
            except RuntimeError as e:
                raise ProfilerError(f"--memory's sampled tracker could not start: {e}") from None
            self.started = True

    def stop(self) -> Capture:
        with interrupts.deferred():
            events, stacks, info = self.mod.stop()
            self.started = False
        t_end = time.monotonic_ns()
        names = {**self.names, **_names()}
        info = {**info, "t_end_ns": t_end, "t0_unix": self.t0_unix, "numpy": self.mod.has_numpy(), "raw": self.raw,
                "pid": os.getpid(), "main": threading.get_native_id()}
        return Capture(fmt.write(events, info, names, stacks), NAME, {"info": info})

    def close(self) -> None:
        with interrupts.deferred():
            if self.started:
                self.started = False
                self.mod.stop()


def read(capture: Capture, options: Options | None = None) -> Profile:
    """The Profile of a sampled capture (formats/memsample.py): ``bytes`` estimated alive at the
    high-water mark, ``allocated`` and ``allocations`` estimated, per (thread, stack)."""
    return fmt.read(capture.data, "<memsample>")

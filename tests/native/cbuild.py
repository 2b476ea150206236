"""Build the C test workloads in tests/native/ with gcc (the tests call this; nothing is committed built)."""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))


def build_cthread(outdir) -> str:
    """Compile cthread.c into ``outdir``/libcthread.so and return its path."""
    if shutil.which("gcc") is None:
        raise RuntimeError("gcc is needed to build tests/native/cthread.c")
    out = os.path.join(os.fspath(outdir), "libcthread.so")
    subprocess.run(["gcc", "-O1", "-g", "-fno-omit-frame-pointer", "-shared", "-fPIC", "-o", out,
                    os.path.join(HERE, "cthread.c"), "-lpthread"], check=True)
    return out


def load_cthread(path: str) -> ctypes.CDLL:
    lib = ctypes.CDLL(path)
    lib.cthread_start.argtypes = [ctypes.c_double, ctypes.c_double, ctypes.c_int]
    lib.cthread_busy_total_ms.restype = ctypes.c_double
    lib.cthread_sleep_total_ms.restype = ctypes.c_double
    return lib

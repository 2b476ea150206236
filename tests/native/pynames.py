"""A C busy loop called from Python, for checking that native stacks name the Python caller
(tests/test_python_names.py and bench/bench_perf.py)."""
from __future__ import annotations

import textwrap

import tools

# The interpreter of each version found here (tests/tools.py: next to sys.executable, on PATH, pyenv).
PYTHONS = {v: [p] if (p := tools.find(f"python{v}")) else [] for v in ("3.11", "3.12", "3.13")}

# ``python -c CTYPES_OUTER libcthread.so``: outer() calls the C busy loop forever; "ready" first.
CTYPES_OUTER = textwrap.dedent("""\
    import ctypes, sys
    lib = ctypes.CDLL(sys.argv[1])
    lib.cthread_busy.argtypes = [ctypes.c_double]
    def outer():
        while True:
            lib.cthread_busy(20.0)
    print("ready", flush=True)
    outer()
    """)


def share_above(p, leaf: str = "cthread_busy", caller: str = "outer") -> tuple[float, int]:
    """Of the samples whose stack holds native ``leaf``, the share that also holds Python ``caller``
    above it, and how many samples that is."""
    n = hit = 0
    for st, w in zip(p.stacks["stack"], p.stacks["samples"]):
        names = [(p.frames.at[f, "name"], p.frames.at[f, "kind"]) for f in st]
        if (leaf, "native") in names:
            n += w
            hit += w * ((caller, "python") in names[:names.index((leaf, "native"))])
    return (hit / n if n else float("nan")), int(n)

"""Small helpers the teaching notebooks share: shares of functions per thread, read off a Profile."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd


def threads(profile, match) -> list[str]:
    """Thread labels of ``profile`` matching ``match``: a native id (int) or a regex on the label."""
    t = profile.thread_table
    if isinstance(match, int):
        return [lab for lab, tid in zip(t["label"], t["tid"]) if tid is not pd.NA and int(tid) == match]
    return [lab for lab in t["label"] if re.search(match, str(lab))]


def _rows(profile, thread=None):
    st = profile.stacks
    if thread is None:
        return np.ones(len(st), dtype=bool)
    names = set(threads(profile, thread)) if not isinstance(thread, (list, tuple, set)) else set(thread)
    return st["thread"].isin(names).to_numpy()


def seconds(profile, functions=None, thread=None, metric: str | None = None, named: bool = False) -> float:
    """Weight (``metric``) of the stacks of ``thread`` that contain any of ``functions`` (names or
    regexes); all stacks of the thread when ``functions`` is None. ``named``: only stacks with a
    Python frame (a native profiler's stack that got no Python names has none)."""
    metric = metric or profile.metric
    rows = _rows(profile, thread)
    w = profile.weights(metric).fillna(0).to_numpy(dtype=float)
    if named:
        py = set(profile.frames.index[(profile.frames["kind"] == "python").to_numpy()])
        rows = rows & np.fromiter((any(f in py for f in s) for s in profile.stacks["stack"]), dtype=bool,
                                  count=len(profile.stacks))
    if functions is not None:
        if isinstance(functions, str):
            functions = [functions]
        pat = re.compile("|".join(f"(?:{f})" for f in functions))
        hit = {fid for fid, name in profile.frames["name"].items() if pat.fullmatch(str(name))}
        has = np.fromiter((any(f in hit for f in s) for s in profile.stacks["stack"]), dtype=bool,
                          count=len(profile.stacks))
        rows = rows & has
    return float(w[rows].sum())


def share(profile, functions, thread=None, metric: str | None = None) -> float:
    """``seconds(functions, thread)`` / ``seconds(None, thread)``: 0..1 (NaN when the thread has nothing)."""
    whole = seconds(profile, None, thread, metric)
    return seconds(profile, functions, thread, metric) / whole if whole else float("nan")


def sees(profile, functions, thread=None) -> bool:
    """Does any sample of ``thread`` contain one of ``functions``? (Event-based profiles such as
    cProfile's carry time but no sample counts: their primary metric is used too.)"""
    return any(seconds(profile, functions, thread, m) > 0 for m in {"samples", profile.metric})


# -- the "three targets" program of notebooks 02 and 03 -------------------------------------------
# Python code in a Python thread, a C extension called from it (zlib), and a pure C++ thread
# (the case-study engine's worker). Each part does a fixed amount of work, so that a profiler's
# overhead shows as a longer run.
ZDATA = bytes(range(256)) * 2048          # 512 KiB


def python_work(n: int) -> int:
    """Pure Python, on-CPU."""
    acc = 0
    for i in range(n):
        acc = (acc + i * i) % 1000003
    return acc


def c_extension_work(n: int) -> int:
    """A C extension called from Python: zlib's deflate, on-CPU in native frames."""
    size = 0
    for _ in range(n):
        size += len(__import__("zlib").compress(ZDATA, 6))
    return size


def wait_for_c_thread(engine, n: int) -> float:
    """Submit ``n`` ops to the pure C++ worker and wait for the last: the main thread is off-CPU."""
    last = None
    for _ in range(n):
        last = engine.topk(4)
    return last.result()[0]


def three_targets(engine, sizes: dict) -> None:
    python_work(sizes["python"])
    c_extension_work(sizes["c_extension"])
    wait_for_c_thread(engine, sizes["c_thread"])


def calibrate_sizes(engine, seconds: float = 0.25) -> dict:
    """Work sizes that take about ``seconds`` each here, measured once without a profiler."""
    import time
    out = {}
    for key, fn, arg in (("python", python_work, 20000), ("c_extension", c_extension_work, 1),
                         ("c_thread", lambda n: wait_for_c_thread(engine, n), 10)):
        while True:  # grow the trial until it is long enough to time
            t = time.perf_counter()
            fn(arg)
            dt = time.perf_counter() - t
            if dt > seconds / 4:
                break
            arg *= 2
        out[key] = max(1, int(arg * seconds / dt))
    return out


def only_thread(profile, match, label: str):
    """Keep the one thread matching ``match`` (see ``threads``) and call it ``label``, so that two
    runs whose threads had different ids can be compared."""
    found = threads(profile, match)
    if not found:
        raise ValueError(f"no thread matches {match!r}; threads: {profile.threads}")
    from ..transforms.ops import keep_threads, relabel_threads
    return relabel_threads(keep_threads(profile, [found[0]]), {found[0]: label})

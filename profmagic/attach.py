"""Attach to processes that are already running (training workers started elsewhere).

``profmagic.attach([1234, 5678], duration=10)`` or ``%profile --pid 1234,5678 --duration 10``:
one out-of-process recorder per pid, all started before any is stopped, for ``duration`` seconds
or until Ctrl-C; one Profile with a ``process`` column.
"""
from __future__ import annotations

import os
import time

from . import multi
from .childsampler import process_state
from .errors import ProfilerError
from .profile import Profile
from .recording import _cmdline, _ended, _versions, default_mode, make_options, resolve

# Backends that record another process from outside (the others run inside the profiled process).
OUTSIDE = ("py-spy", "eu-stack", "perf", "py-spy+eu-stack")


def parse_pids(text) -> list[int]:
    """``"1234,5678"`` / ``[1234, "5678"]`` -> [1234, 5678]."""
    items = text.replace(",", " ").split() if isinstance(text, str) else list(text)
    try:
        pids = [int(x) for x in items]
    except (TypeError, ValueError):
        raise ProfilerError(f"--pid takes process ids separated by commas, e.g. 1234,5678; got {text!r}") from None
    if not pids:
        raise ProfilerError("--pid needs at least one process id")
    return list(dict.fromkeys(pids))


def attach(pids, duration: float | None = 10.0, backend: str = "py-spy", *, rate: float = 100.0,
           idle: bool = True, native: bool = False, mode: str | None = None, announce=None) -> Profile:
    """Record ``pids`` for ``duration`` seconds (None: until Ctrl-C). ``idle=True`` (default) samples
    waiting threads too, so the metric is wall time. A process that ends meanwhile keeps what was
    sampled and is marked ``ended`` in ``meta["processes"]``. ``mode`` (default: the backend's own)
    is as ``--mode``: perf records off-CPU time too with wall or both."""
    pids = parse_pids(pids)
    if backend == "auto":
        backend = "py-spy"
    if backend not in OUTSIDE:
        raise ProfilerError(f"backend {backend} runs inside the profiled process and cannot attach to "
                            f"another one; use one of: {', '.join(OUTSIDE)}")
    for pid in pids:
        if pid == os.getpid():
            raise ProfilerError(f"{pid} is this process; use %%profile (or profmagic.profile()) for it")
        if process_state(pid) in (None, "Z", "X"):
            raise ProfilerError(f"no running process {pid}")
    if duration is not None and duration <= 0:
        raise ProfilerError(f"--duration must be positive seconds, got {duration}")
    recs = []
    try:
        for pid in pids:
            o = make_options(rate=rate, idle=idle, native=native, pid=pid, all_threads=True,
                             mode=mode or default_mode(backend))
            mod, why = resolve(backend, o)
            rec = mod.Recorder(o)
            recs.append((pid, mod, o, rec, _cmdline(pid)))   # closed in finally even if start fails
            rec.start()
        if announce:
            announce(f"recording {len(pids)} process(es) with {backend} at {rate:g} Hz "
                     + (f"for {duration:g} s…" if duration is not None else "until interrupted…"))
        t0 = time.perf_counter()
        interrupted = False
        try:
            while duration is None or time.perf_counter() - t0 < duration:
                if all(process_state(pid) in (None, "Z", "X") for pid in pids):
                    break
                time.sleep(min(0.05, max(0.0, duration - (time.perf_counter() - t0))) if duration else 0.05)
        except KeyboardInterrupt:
            interrupted = True
        wall = time.perf_counter() - t0
        parts, labels = [], []
        for pid, mod, o, rec, argv in recs:
            p = mod.read(rec.stop(), o)
            lab = multi.process_label(pid, argv)
            ended = _ended(process_state(pid))
            info = {"pid": pid, "argv": argv, "backend": mod.NAME, "ended": ended}
            if ended:
                info["ended_note"] = "the process ended during the recording; samples up to its end are kept"
            parts.append(multi.with_process(p, lab, info))
            labels.append(lab)
    finally:
        for _, _, _, rec, _ in recs:
            rec.close()
    out = multi.concat(parts, key="process", labels=labels)
    meta = dict(out.meta)
    meta.update(backend=recs[0][1].NAME, attached=pids, duration=wall, requested_duration=duration,
                rate=float(rate), requested_rate=float(rate), versions={**_versions(),
                                                                        **(parts[0].meta.get("versions") or {})})
    if interrupted:
        meta["partial"] = f"interrupted after {wall:.2f} s"
    return out.replace(meta=meta, metric=parts[0].metric)

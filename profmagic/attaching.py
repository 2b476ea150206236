"""Attach to processes that are already running (training workers started elsewhere).

``profmagic.attach([1234, 5678], duration=10)`` or ``%profile --pid 1234,5678 --duration 10``:
one recorder per pid from a backend that can attach, all started before any is stopped, for
``duration`` seconds or until Ctrl-C; one Profile with a ``process`` per pid.
"""
from __future__ import annotations

import os
import time

from . import backends, multi, procfs, validate
import pandas as pd

from .errors import ProfileFormatError, ProfilerError
from .model import Profile, make_frames
from .session import make_options, versions


def attach(pids, duration: float | None = 10.0, backend: str = "py-spy", *, rate: float = 100.0,
           mode: str | None = None, idle: bool | None = None, native: bool = False, timing: str | None = None,
           announce=None) -> Profile:
    """Record ``pids`` for ``duration`` seconds (None: until Ctrl-C). The default clock is wall time
    (py-spy's ``--idle``: waiting threads are sampled too). A process that ends meanwhile keeps what
    was sampled and is marked ``ended`` in ``meta["processes"]``.

    ``timing`` (py-spy): "timed" (the default for wall time: there is no cell to calibrate to, so
    each sample weighs the time to py-spy's next sample of its thread) or "calibrated" (1/rate per
    sample; the only choice for --mode cpu)."""
    pids = validate.pids(pids)
    duration = validate.duration(duration)
    timing = validate.timing(timing)
    if backend == "auto":
        backend = backends.AUTO[0]
    mod = backends.get(backend) if backend in backends.MODULES else None
    if mod is None or not mod.CAPS.attach:
        can = [n for n in backends.names() if backends.get(n).CAPS.attach]
        raise ProfilerError(f"backend {backend} runs inside the profiled process and cannot attach to "
                            f"another one; use one of: {', '.join(can)}")
    for pid in pids:
        if pid == os.getpid():
            raise ProfilerError(f"{pid} is this process; use %%profile (or profmagic.profile()) for it")
        if procfs.ended(pid):
            raise ProfilerError(f"no running process {pid}")
        if mod.CAPS.threads == "python" and procfs.is_python(pid) is False:
            raise ProfilerError(f"process {pid} ({procfs.cmdline(pid)}) is not a Python process: {backend} reads "
                                "Python stacks. Fix: --backend perf or eu-stack record any process's native stacks")
    if mode is None:   # wall time (py-spy's --idle) unless the backend says otherwise (perf: cpu-clock)
        mode = "cpu" if idle is False else "wall" if idle else (mod.CAPS.default or "wall")
    if timing is None:
        timing = "timed" if mode != "cpu" else "calibrated"
    recs = []
    try:
        for pid in pids:
            o = make_options(rate=rate, mode=mode, native=native, pid=pid, all_threads=True, timing=timing)
            mod, _ = backends.choose(backend)
            rec = backends.recorder(mod, o)
            recs.append((pid, mod, o, rec, procfs.cmdline(pid)))   # closed in finally even if start fails
            rec.start()
        if announce:
            announce(f"recording {len(pids)} process(es) with {backend} at {rate:g} Hz "
                     + (f"for {duration:g} s…" if duration is not None else "until interrupted…"))
        t0 = time.perf_counter()
        interrupted = False
        try:
            while duration is None or time.perf_counter() - t0 < duration:
                if all(procfs.ended(pid) for pid in pids):
                    break
                time.sleep(min(0.05, max(0.0, duration - (time.perf_counter() - t0))) if duration else 0.05)
        except KeyboardInterrupt:
            interrupted = True
        wall = time.perf_counter() - t0
        parts, labels = [], []
        for pid, mod, o, rec, argv in recs:
            cap = rec.stop()
            try:
                p = mod.read(cap, o)
            except ProfileFormatError:
                if cap.data:          # a damaged capture is an error; an empty one recorded nothing
                    raise
                p = Profile(make_frames([], [], [], []), pd.DataFrame({"thread": [], "stack": [], "samples": []}),
                            meta={"backend": mod.NAME, "message": f"{mod.NAME} recorded nothing for process {pid} "
                                  "(it never ran on a CPU while recorded, or wrote no samples)"})
            lab = multi.process_label(pid, argv)
            info = {"pid": pid, "argv": argv, "backend": mod.NAME, "ended": procfs.ended(pid)}
            if info["ended"]:
                info["ended_note"] = "the process ended during the recording; samples up to its end are kept"
            parts.append(multi.with_process(p, lab, info))
            labels.append(lab)
    finally:
        for _, _, _, rec, _ in recs:
            rec.close()
    out = multi.concat(parts, key="process", labels=labels)
    meta = dict(backend=recs[0][1].NAME, attached=pids, duration=wall, requested_duration=duration,
                rate=float(parts[0].meta.get("rate") or rate), requested_rate=float(rate), mode=mode,
                timing=parts[0].meta.get("timing"),
                versions={**versions(), **dict(parts[0].meta.versions)})
    if interrupted:
        meta["partial"] = f"interrupted after {wall:.2f} s"
    return out.replace(meta=out.meta.replace(**meta), metric=parts[0].metric)

"""Attach to processes that are already running (training workers started elsewhere).

``profmagic.attach([1234, 5678], duration=10)`` or ``%profile --pid 1234,5678 --duration 10``:
one recorder per pid from a backend that can attach, all started before any is stopped, for
``duration`` seconds or until Ctrl-C; one Profile with a ``process`` per pid. A configuration of
``session.Session`` (its ``PidsTarget``): the same processors and defaults as every recording.
"""
from __future__ import annotations

from . import validate
from .model import Profile
from .session import PidsTarget, Session, make_options


def attach(pids, duration: float | None = 10.0, backend: str = "py-spy", *, rate: float = 100.0,
           mode: str | None = None, idle: bool | None = None, native: bool = False, timing: str | None = None,
           system: bool = False, announce=None) -> Profile:
    """Record ``pids`` for ``duration`` seconds (None: until Ctrl-C). The default clock is wall time
    (py-spy's ``--idle``: waiting threads are sampled too). A process that ends meanwhile keeps what
    was sampled and is marked ``ended`` in ``meta["processes"]``.

    ``timing`` (py-spy): "timed" (the default for wall time: there is no cell to calibrate to, so
    each sample weighs the time to py-spy's next sample of its thread) or "calibrated" (1/rate per
    sample; the only choice for --mode cpu).

    ``system`` (``--system``; perf ``--mode both`` or ``wall``, root or perf_event_paranoid <= 0):
    each recorder also records every CPU's wakeups, so a wait that another process ended names it
    (pid and command). Refused with any other backend or mode."""
    pids = validate.pids(pids)
    duration = validate.duration(duration)
    if mode is None and idle is not None:
        mode = "wall" if idle else "cpu"
    target = PidsTarget(pids, duration)
    s = Session(backend, make_options(rate=rate, mode=mode, native=native, all_threads=True, timing=timing,
                                      system=system),
                target=target, announce=announce)
    try:
        s.start()
        target.wait()
        return s.finish()
    finally:
        s.close()

"""Profilers started by the profiled code itself: a cell that runs its own cProfile, pyinstrument,
``sys.setprofile``/``sys.settrace`` or a ``sys.monitoring`` tool while profmagic records it.

The interpreter raises an audit event for each of these (all supported Pythons); one audit hook,
added on first use (audit hooks cannot be removed), notes the events of the threads being watched.
Standard library only.
"""
from __future__ import annotations

import sys
import threading

EVENTS = {
    "sys.setprofile": "sys.setprofile (a profiler such as cProfile or pyinstrument)",
    "sys.settrace": "sys.settrace (a tracer: a debugger, coverage)",
    "sys.monitoring.register_callback": "sys.monitoring (cProfile on Python 3.12+, coverage)",
}
_watched: dict[int, list[str]] = {}     # thread ident -> events seen while watched
_installed = False
_lock = threading.Lock()


def _hook(event: str, args) -> None:
    if event in EVENTS and _watched:
        seen = _watched.get(threading.get_ident())
        if seen is not None and event not in seen:
            seen.append(event)


def watch() -> None:
    """Start noting the calling thread's profiling-hook changes."""
    global _installed
    with _lock:
        if not _installed:
            sys.addaudithook(_hook)
            _installed = True
    _watched[threading.get_ident()] = []


def unwatch() -> str | None:
    """Stop watching the calling thread; a warning naming what the code started, or None."""
    seen = _watched.pop(threading.get_ident(), None)
    if not seen:
        return None
    return ("the profiled code started a profiler of its own (" + "; ".join(EVENTS[e] for e in seen) + "): "
            "the numbers include its overhead, and a profiler sharing that hook with this backend may have "
            "lost the rest of the cell")

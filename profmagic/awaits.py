"""Where a cell with top-level ``await`` waits: each suspension of its coroutine, the chain of
coroutines it is waiting in (root first) and for how long.

While a coroutine awaits, no thread's stack holds it: the event loop's thread sits in ``select``.
A ``Tracker`` drives the cell's coroutine and notes every suspension; the built-in sampler asks
``waiting(thread)`` at each sample (exact), and ``transforms.attribute_awaits`` gives other
backends' idle-loop time to the recorded chains in proportion to their measured durations.
Standard library only.
"""
from __future__ import annotations

import threading
from time import perf_counter
from dataclasses import dataclass, field

AWAIT = "[await]"   # the leaf frame of time spent awaiting


@dataclass
class Wait:
    start: float                 # perf_counter seconds
    end: float
    chain: tuple                 # (name, file, first line) of each awaiting coroutine, root first


@dataclass
class Tracker:
    waits: list = field(default_factory=list)
    current: tuple | None = None          # the chain while suspended, else None
    thread: int | None = None             # threading.get_ident() of the loop's thread

    def track(self, coro):
        return _Tracked(coro, self)

    def __enter__(self):
        self.thread = threading.get_ident()
        _trackers[self.thread] = self
        return self

    def __exit__(self, *exc):
        _trackers.pop(self.thread, None)
        self.current = None
        return False


_trackers: dict[int, Tracker] = {}


def waiting(thread_ident: int) -> tuple | None:
    """The chain of code objects a tracked cell on this thread is awaiting in, or None."""
    t = _trackers.get(thread_ident)
    return None if t is None else t.current


class _Tracked:
    """Awaitable that runs ``coro`` step by step, noting each suspension in the tracker."""

    def __init__(self, coro, tracker: Tracker):
        self.coro, self.tracker = coro, tracker

    def __await__(self):
        coro, tracker = self.coro, self.tracker
        send, error = None, None
        while True:
            try:
                out = coro.throw(error) if error is not None else coro.send(send)
            except StopIteration as stop:
                return stop.value
            chain = _chain(coro)
            tracker.current = tuple(c for c, _ in chain)
            start = perf_counter()
            try:
                send, error = (yield out), None
            except BaseException as e:  # cancellation, interrupt: thrown into the coroutine
                send, error = None, e
            finally:
                tracker.current = None
                tracker.waits.append(Wait(start, perf_counter(),
                                          tuple((c.co_qualname if hasattr(c, "co_qualname") else c.co_name,
                                                 c.co_filename, c.co_firstlineno) for c, _ in chain)))


def _chain(obj) -> list:
    """(code, frame) of each coroutine or generator ``obj`` is awaiting through, outermost first."""
    out = []
    while obj is not None and len(out) < 1000:
        frame = getattr(obj, "cr_frame", None) or getattr(obj, "gi_frame", None)
        if frame is None:
            break
        out.append((frame.f_code, frame))
        obj = getattr(obj, "cr_await", None) or getattr(obj, "gi_yieldfrom", None)
    return out

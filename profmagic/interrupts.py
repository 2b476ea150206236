"""Ctrl-C at any step of a recording: one line naming the step, then a KeyboardInterrupt that IPython
shows as one line, never a traceback through profmagic, the profiler or a half-done import.

The step an interrupt landed in is noted on the exception where it is caught first (the innermost
``at`` block); the magic prints the note and raises the exception as ``one_line``. Cleanup that must
finish (ending a tracker, reaping a child, removing a folder) runs under ``deferred``: a Ctrl-C that
arrives meanwhile is raised once it is done; ``start_thread`` starts a helper thread so too.
"""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

# What an interrupt at a step leaves (the end of the one line).
NOTHING = "nothing was recorded and the cell did not run"
LOST = "the cell ran but its profile was not kept"
KEPT = "the profile is in _profile"
ATTACH_LOST = "the recording was not kept"
NOT_LOADED = "it is not loaded: run %load_ext profmagic again"

_NOTE = "_profmagic_interrupted"


def note(e: BaseException, step: str, outcome: str | None) -> BaseException:
    """Mark ``e`` with the step it interrupted; an inner step's mark is kept."""
    if not hasattr(e, _NOTE):
        setattr(e, _NOTE, (step, outcome))
    return e


def message(e: BaseException) -> str | None:
    """The one line for an interrupt noted by ``note``; None when not noted, or noted with no outcome
    (the cell's own interrupt: the partial report says what was recorded)."""
    got = getattr(e, _NOTE, None)
    return None if got is None or got[1] is None else f"profmagic: interrupted while {got[0]}; {got[1]}"


@contextmanager
def at(step: str, outcome: str):
    """An interrupt inside the block is noted as landing in ``step``."""
    try:
        yield
    except KeyboardInterrupt as e:
        raise note(e, step, outcome)


def one_line(e: KeyboardInterrupt, text: str = "KeyboardInterrupt") -> KeyboardInterrupt:
    """``e`` shown by IPython as ``text`` alone (its ``_render_traceback_`` hook); ename stays
    KeyboardInterrupt, so front ends and the kernel treat it as the usual interrupt."""
    e._render_traceback_ = lambda: [text]
    return e


def stopped_loading(e: KeyboardInterrupt) -> KeyboardInterrupt:
    """Ctrl-C during ``%load_ext profmagic`` (its imports take most of a second): the line, printed
    here (no magic is there to print it), and the interrupt to raise."""
    import sys
    if not hasattr(e, _NOTE):   # printed once, by the innermost guard
        print(message(note(e, "loading profmagic", NOT_LOADED)), file=sys.stderr)
    return one_line(e)


@contextmanager
def redelivered():
    """A Ctrl-C that Python swallows is delivered again. The interrupt is raised in whatever code runs
    when it arrives; in a weakref callback or a ``__del__`` (a WeakSet's ``_remove``, seen with
    memray) Python prints "Exception ignored in …" and drops it, and the cell ran on. Here such a
    KeyboardInterrupt is signalled to the main thread once more, from a new thread once this hook has
    returned (signalled from the hook, it was raised inside the hook and dropped again)."""
    import _thread
    import sys
    previous = sys.unraisablehook

    def hook(unraisable):
        if issubclass(unraisable.exc_type, KeyboardInterrupt):
            _thread.start_new_thread(_thread.interrupt_main, ())
        else:
            previous(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        if sys.unraisablehook is hook:
            sys.unraisablehook = previous


@contextmanager
def deferred():
    """SIGINT held while the block runs, then raised as KeyboardInterrupt. Only in the main thread
    with Python's own handler in place (signals reach the main thread only); elsewhere a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    try:
        previous = signal.getsignal(signal.SIGINT)
    except ValueError:
        previous = None
    if previous is not signal.default_int_handler:   # ignored, or someone else's handler: leave it
        yield
        return
    got = []
    signal.signal(signal.SIGINT, lambda signum, frame: got.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if got:
        raise KeyboardInterrupt


def start_thread(thread: threading.Thread, owner: object, attr: str) -> None:
    """Start ``thread`` and set it as ``owner.<attr>``, both under ``deferred``: a Ctrl-C inside
    ``start()`` can leave a thread never started (joining it raises), one just after it a running
    thread the owner does not hold. Here the owner holds the started thread, then the interrupt is
    raised. The store is made here, not by the caller, so it cannot fall outside the deferral."""
    with deferred():
        thread.start()
        setattr(owner, attr, thread)

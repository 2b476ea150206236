"""Which threads of this process are the Jupyter kernel's own, not the user's.

``remember_threads()`` is called when the extension loads (``%load_ext profmagic``), or at the
first recording in a kernel that never loaded it: every thread alive then is the kernel's (or its
imports'). Importing this module does nothing.
"""
from __future__ import annotations

import re
import sys

from .procfs import threads as _threads

# The kernel's own threads (IOPub, heartbeat, control, ZMQ's I/O threads...), by name, for those it
# starts after the extension was loaded. ipykernel 7 makes subshell threads on demand.
KERNEL_THREAD = re.compile(r"^(IOPub|Heartbeat|Control|Shell channel|HistorySavingThread|ParentPoller"
                           r"|_watch_pipe_fd|ZMQbg/|Thread-\d+ \(_watch_pipe_fd\)|subshell-)")
_kernel_tids: set[int] | None = None


def remember_threads() -> None:
    """Every thread alive now is the kernel's (the cell's own thread is always kept, whichever it is)."""
    global _kernel_tids
    _kernel_tids = set(_threads())


def not_users_threads() -> set[int]:
    """Native ids of threads to drop unless --all-threads: in a kernel, those alive when the extension
    loaded, and those named like the kernel's. Threads the user started in earlier cells stay (a C++
    worker created by a previous cell is exactly what the case study needs). Outside a kernel: every
    thread alive now, so a ``with profmagic.profile()`` block shows its own."""
    live = _threads()
    if _kernel_tids is None and "ipykernel" in sys.modules:
        remember_threads()
    if _kernel_tids is None:
        return set(live)
    return (_kernel_tids & set(live)) | {tid for tid, name in live.items() if KERNEL_THREAD.match(name)}

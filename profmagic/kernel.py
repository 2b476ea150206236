"""Which threads of this process are the Jupyter kernel's own, not the user's. Importing this
module does nothing: loading the extension calls ``remember_threads``, and each call reads /proc."""
from __future__ import annotations

import re
import sys
import threading

from . import procfs

# The kernel's own threads (IOPub, heartbeat, control, ZMQ's I/O threads...), by name. ipykernel 7
# makes subshell threads on demand. Threads whose class comes from these packages are the kernel's too
# (ipykernel's ParentPollerUnix is named "Thread-1").
KERNEL_PACKAGES = ("ipykernel", "jupyter_client", "zmq", "IPython", "tornado", "debugpy")
KERNEL_THREAD = re.compile(r"^(IOPub|Heartbeat|Control|Shell channel|(IPython)?HistorySavingThread|ParentPoller"
                           r"|_watch_pipe_fd|ZMQbg/|Thread-\d+ \(_watch_pipe_fd\)|subshell-)")


_loaded_with: set[int] = set()   # threads alive when the extension was loaded


def remember_threads() -> None:
    """Called by ``%load_ext profmagic``: threads alive now (the kernel's, and pools that imports
    started, such as a BLAS library's) are not the user's."""
    _loaded_with.update(procfs.threads())


def in_kernel() -> bool:
    """Whether this process is a Jupyter kernel (not merely a process that imported ipykernel)."""
    if "ipykernel" not in sys.modules:
        return False
    from IPython import get_ipython
    return getattr(get_ipython(), "kernel", None) is not None


def not_users_threads() -> set[int]:
    """Native ids of threads to drop unless --all-threads.

    In a kernel: the threads named like the kernel's or made by its packages, and those alive when
    the extension was loaded; without ``%load_ext``, every thread that started no later than the
    last named one instead (the kernel starts its threads before it runs a cell; /proc gives start
    times in clock ticks). Threads the user started in earlier cells stay: a C++ worker created by
    a previous cell is exactly what the case study needs, also after the kernel started threads of
    its own on demand (showing a report's first widget starts a ZMQ context: two ZMQbg threads).
    Outside a kernel: every thread alive now, so a ``with profmagic.profile()`` block shows its own."""
    live = procfs.threads()
    if not in_kernel():
        return set(live)
    named = {tid for tid, name in live.items() if KERNEL_THREAD.match(name)}
    named |= {t.native_id for t in threading.enumerate()
              if t.native_id is not None and type(t).__module__.split(".")[0] in KERNEL_PACKAGES}
    if _loaded_with & set(live):
        return named | (_loaded_with & set(live))
    starts = procfs.thread_starts()
    known = [starts[t] for t in named if t in starts]
    if not known:
        return named
    last = max(known)
    return named | {tid for tid, start in starts.items() if start <= last and tid in live}

"""What /proc says about processes and threads (Linux; each helper degrades to None or {} elsewhere)."""
from __future__ import annotations

import os
import threading


def stat_fields(path: str) -> list[bytes] | None:
    """The fields of a /proc ``stat`` file after the command name (which may hold spaces and
    parentheses): [0] is the state, [1] the parent pid, [11]/[12] utime/stime, [19] the start time.
    None when the process or thread is gone."""
    try:
        with open(path, "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def process_state(pid: int) -> str | None:
    """The process's state letter (``Z`` zombie), or None when it is gone."""
    fields = stat_fields(f"/proc/{pid}/stat")
    return fields[0].decode() if fields else None


def ended(pid: int) -> bool:
    """The process is gone or a zombie."""
    return process_state(pid) in (None, "Z", "X")


def cmdline(pid: int, limit: int = 60) -> str:
    """The process's command line, shortened to ``limit`` characters, or "?"."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return "?"
    text = " ".join([os.path.basename(argv[0])] + argv[1:]) if argv else "?"
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def threads() -> dict[int, str]:
    """Native id -> name of every thread of this process, native ones included."""
    out = {}
    try:
        for t in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{t}/comm") as f:
                    out[int(t)] = f.read().strip()
            except OSError:
                pass
    except OSError:  # no /proc: Python threads only
        pass
    out.update({t.native_id: t.name for t in threading.enumerate() if t.native_id is not None})
    return out


def per_thread(pid: int, name: str) -> dict[int, str]:
    """Native id -> the text of /proc/PID/task/TID/``name`` for every thread of ``pid`` now."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for t in tids:
        try:
            with open(f"/proc/{pid}/task/{t}/{name}") as f:
                out[int(t)] = f.read()
        except OSError:
            pass
    return out


def run_delay() -> float | None:
    """Seconds the calling thread has waited on a run queue (runnable, not on a core), or None."""
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def thread_starts() -> dict[int, int]:
    """Native id -> start time (clock ticks since boot) of every thread of this process."""
    out = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for t in tids:
        fields = stat_fields(f"/proc/self/task/{t}/stat")
        try:
            out[int(t)] = int(fields[19])
        except (TypeError, ValueError, IndexError):
            pass
    return out


def is_python(pid: int) -> bool | None:
    """Does the process run a Python interpreter: its program (or argv[0]) is python, or it maps
    libpython? None when /proc does not say (no permission) and argv[0] is not python."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv0 = os.path.basename(f.read().split(b"\0", 1)[0].decode(errors="replace"))
    except OSError:
        argv0 = ""
    if argv0.startswith("python"):
        return True
    try:
        if os.path.basename(os.readlink(f"/proc/{pid}/exe")).startswith("python"):
            return True
        with open(f"/proc/{pid}/maps", "rb") as f:
            return b"libpython" in f.read()
    except OSError:
        return None


def rss(pid: int | str = "self") -> int | None:
    """The process's resident set size in bytes, or None."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None

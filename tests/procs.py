"""Processes from /proc: the children and descendants a test leaves behind, and a process's state."""
from __future__ import annotations

import os
import time


def _stat(pid) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read()
    except OSError:
        return None


def table() -> list[tuple[int, int, str, str]]:
    """(pid, ppid, command name, state letter) of every process now."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        st = _stat(d)
        if st is None:
            continue
        fields = st.rsplit(")", 1)[1].split()
        out.append((int(d), int(fields[1]), st[st.index("(") + 1:st.rindex(")")], fields[0]))
    return out


def children(pid: int | None = None) -> list[tuple[int, str]]:
    """(pid, command name) of the live children of ``pid`` (default: this process); a zombie is
    named ``<zombie>``."""
    pid = os.getpid() if pid is None else pid
    return [(p, "<zombie>" if s == "Z" else n) for p, pp, n, s in table() if pp == pid]


def descendants(pid: int | None = None) -> list[tuple[int, str]]:
    """(pid, command name) of every descendant of ``pid``, children first; zombies as ``<zombie>``."""
    pid = os.getpid() if pid is None else pid
    kids: dict[int, list[tuple[int, str]]] = {}
    for p, pp, n, s in table():
        kids.setdefault(pp, []).append((p, "<zombie>" if s == "Z" else n))
    out, todo = [], [pid]
    while todo:
        for child in kids.get(todo.pop(), []):
            out.append(child)
            todo.append(child[0])
    return out


def state(pid: int) -> str | None:
    """The state letter of ``pid`` (R, S, D, Z, ...), or None once it is gone."""
    st = _stat(pid)
    return None if st is None else st.rsplit(")", 1)[1].split()[0]


def wait_for(pred, timeout=10.0, step=0.05):
    """Poll ``pred`` until it returns something true (returned) or ``timeout`` s pass (its last value)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return pred()

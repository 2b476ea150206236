"""Thread labels shared by backends, formats and transforms, and profmagic's own helper threads
(standard library only)."""
from __future__ import annotations

import threading


# py-spy names each thread `Thread <native tid> "<name>"`; the in-process backends label theirs the same.
def thread_label(native_id: int | None, name: str | None = None) -> str:
    tid = native_id if native_id is not None else "?"
    return f'Thread {tid} "{name}"' if name is not None else f"Thread {tid}"


OWN: set[int] = set()   # native ids of profmagic's own threads (samplers, the live view) in this process
OWN_NAMES: dict[int, str] = {}   # their names (memray knows threads by name only: backends/memray.py)


def mark_own() -> None:
    """Called first thing by each of profmagic's own threads: profiles leave it out."""
    tid = threading.get_native_id()
    OWN.add(tid)
    OWN_NAMES[tid] = threading.current_thread().name

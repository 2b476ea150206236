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


# -- which pthread id (threading.get_ident) is which thread, and when it ran ------------------------
# py-spy's timed format names threads by pthread id only and writes nothing when a thread exits.
# While watched, every thread that starts runs through a wrapper of Thread._bootstrap_inner that
# records {"i": ident, "t": native id, "n": name, "s": start} and {"i": ident, "e": end}, times from
# time.monotonic() (one clock for every process on Linux): in memory (``Watch``, this process) or as
# one JSON line per record in a file (``log_threads``, a process profmagic started).
_sinks: list = []
_original = None


def _emit(rec: dict) -> None:
    for sink in list(_sinks):
        try:
            sink(rec)
        except Exception:  # noqa: BLE001 - a thread's start must never fail because of the watch
            pass


def _hook() -> None:
    global _original
    if _original is not None:
        return
    import time
    _original = inner = threading.Thread._bootstrap_inner

    def _bootstrap_inner(self):
        _emit({"i": threading.get_ident(), "t": threading.get_native_id(), "n": self.name, "s": time.monotonic()})
        try:
            inner(self)
        finally:
            _emit({"i": threading.get_ident(), "e": time.monotonic()})
    threading.Thread._bootstrap_inner = _bootstrap_inner


def _unhook() -> None:
    global _original
    if _original is not None and not _sinks:
        threading.Thread._bootstrap_inner = _original   # threads already in the wrapper keep it
        _original = None


def _alive_now() -> list[dict]:
    import time
    now = time.monotonic()
    return [{"i": t.ident, "t": t.native_id, "n": t.name, "s": now} for t in threading.enumerate()
            if t.ident is not None]


class Watch:
    """This process's threads while watched: ``start()``, then ``stop()`` -> ``fold`` of them."""

    def __init__(self):
        self.records: list[dict] = []

    def start(self) -> None:
        self.records.extend(_alive_now())
        _sinks.append(self.records.append)
        _hook()

    def stop(self) -> dict[int, dict]:
        if self.records.append in _sinks:
            _sinks.remove(self.records.append)
        _unhook()
        return fold(self.records + _alive_now())


def log_threads(path: str) -> None:
    """Log this process's threads into ``path`` from now on (the threads alive now first)."""
    import json
    import os
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def write(rec):
        os.write(fd, (json.dumps(rec, separators=(",", ":")) + "\n").encode())
    for rec in _alive_now():
        write(rec)
    _sinks.append(write)
    _hook()


def fold(records) -> dict[int, dict]:
    """pthread id -> {"tid", "name", "start", "end"}; a later start of an id keeps its first start
    and clears its end (the id was reused, or the thread was seen again alive)."""
    out: dict[int, dict] = {}
    for rec in records:
        try:
            ident = int(rec["i"])
        except (KeyError, TypeError, ValueError):
            continue
        if "e" in rec:
            if ident in out:
                out[ident]["end"] = rec["e"]
        elif "s" in rec:
            old = out.get(ident)
            out[ident] = {"tid": rec.get("t"), "name": rec.get("n"), "end": None,
                          "start": old["start"] if old else rec["s"]}
    return out


def read_log(path: str) -> dict[int, dict]:
    """``fold`` of a thread log file (torn or foreign lines skipped: the log only names threads)."""
    import json
    try:
        with open(path, "rb") as f:
            lines = f.read().splitlines()
    except OSError:
        return {}
    recs = []
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            recs.append(rec)
    return fold(recs)

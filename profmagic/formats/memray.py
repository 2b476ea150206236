"""memray capture files (``.bin``), read with memray's own FileReader (memray_records.py).

Metrics, per (thread, stack):

- ``bytes``: bytes alive at the capture's memory high-water mark; with ``leaks=True``, bytes still
  alive when tracking ended (the label says which);
- ``allocated``: every byte allocated while tracking, freed or not;
- ``allocations``: how many allocations that was.

There are no samples: memray records every allocation. Memory over time (memray's snapshots of the
heap and RSS, every 10 ms by default) is kept in ``meta["memory_timeline"]``.

memray reads a truncated capture without complaint (it is built to read the files of crashed
processes), so completeness is checked here first: a compressed capture (memray compresses on
exit) must end its LZ4 frame; an uncompressed one must hold as many records as its header counts.
A file the tracker never finished (a forked child that left with ``os._exit``) has a zero count,
and is read with a note that its completeness cannot be checked.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

from ..errors import ProfileFormatError
from ..model import Profile, Raw, StackBuilder
from ..threads import thread_label as shared_label
from .registry import Format

NAME = "memray"
FORMAT = Format(NAME, __name__, raw_suffix=".bin")
MAGIC = b"memray\x00"
LZ4_MAGIC = b"\x04\x22\x4d\x18"
# memray's header (file format version 13): magic, version (u32), Python version (u32), native traces
# (u8), file format (u8), then the number of allocation records (u64), written when the tracker closes.
_HEADER_VERSION = 13
_N_ALLOCATIONS_AT = 17
# memray names a frame by its code's name. A comprehension runs where it is defined (before Python 3.12
# inlined them), so its caller gives its qualified name, as the sampler shows it: alloc.<locals>.<listcomp>.
COMPREHENSIONS = {"<listcomp>", "<dictcomp>", "<setcomp>"}
READ_TIMEOUT = 600  # seconds for the child that reads a capture
LEAKS_LABEL = "bytes still alive when tracking ended (leaks)"


def sniff(head: bytes) -> bool:
    return head.startswith(MAGIC) or (head.startswith(LZ4_MAGIC) and MAGIC in head[:64])


def version() -> str | None:
    """The installed memray's version, or None when memray is not installed."""
    try:
        import memray
    except ImportError:
        return None
    return getattr(memray, "__version__", "?")


def _truncated(source: str, offset: int, what: str) -> ProfileFormatError:
    return ProfileFormatError(f"truncated memray capture: the file ends inside {what}; expected a complete "
                              "capture (memray's reader would silently show only the part before the cut)",
                              source=source, offset=offset)


def check_lz4(data: bytes, source: str) -> None:
    """The LZ4 frames of a compressed capture are complete: every block whole, then the end mark
    (and the content checksum when the frame has one). Walks block headers only; decompresses nothing."""
    pos, n = 0, len(data)
    while pos < n:
        if data[pos:pos + 4] != LZ4_MAGIC:
            raise ProfileFormatError("expected an LZ4 frame (memray's compressed capture)", source=source, offset=pos)
        if pos + 6 > n:
            raise _truncated(source, n, "the LZ4 frame header")
        flg = data[pos + 4]
        if flg >> 6 != 1:
            raise ProfileFormatError(f"unknown LZ4 frame version {flg >> 6}; expected 1", source=source,
                                     offset=pos + 4)
        pos += 7 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
        block_checksum = 4 if flg & 0x10 else 0
        while True:
            if pos + 4 > n:
                raise _truncated(source, n, "the LZ4 stream (no end mark)")
            size = int.from_bytes(data[pos:pos + 4], "little") & 0x7FFFFFFF
            pos += 4
            if size == 0:
                break
            pos += size + block_checksum
            if pos > n:
                raise _truncated(source, n, f"an LZ4 block of {size:,} bytes")
        pos += 4 if flg & 0x04 else 0
        if pos > n:
            raise _truncated(source, n, "the LZ4 content checksum")


def header_count(data: bytes) -> int | None:
    """The allocation-record count in an uncompressed capture's header (0: the tracker never closed),
    or None for a header layout this reader does not know."""
    if not data.startswith(MAGIC) or len(data) < _N_ALLOCATIONS_AT + 8:
        return None
    if int.from_bytes(data[7:11], "little") != _HEADER_VERSION:
        return None
    return int.from_bytes(data[_N_ALLOCATIONS_AT:_N_ALLOCATIONS_AT + 8], "little")


def _extract_isolated(path: str, source: str, leaks: bool) -> tuple[dict, str | None]:
    """memray_records.extract in a child process: (its output, memray's first complaint or None)."""
    from . import memray_records
    # -P: the script's folder (formats/, which holds this memray.py) must not shadow the memray package.
    cmd = [sys.executable, "-P", memray_records.__file__, path] + (["--leaks"] if leaks else [])
    try:
        r = subprocess.run(cmd, capture_output=True, timeout=READ_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise ProfileFormatError(f"memray's reader did not finish in {READ_TIMEOUT} s; expected a capture it "
                                 "can read (a very large one reads faster with memray's own tools)",
                                 source=source) from None
    if r.returncode < 0:
        sig = signal.Signals(-r.returncode).name
        raise ProfileFormatError(f"memray's reader crashed ({sig}) on this file: it is corrupt; expected a "
                                 "capture written by memray's Tracker", source=source)
    err = r.stderr.decode(errors="replace").strip()
    if r.returncode != 0:
        raise ProfileFormatError("memray could not read this file: " + (err.splitlines() or ["?"])[-1]
                                 + "; expected a capture written by memray's Tracker", source=source)
    # memray reports a bad record on stderr and goes on with what it could read.
    complaint = next((line.removeprefix("Memray ERROR: ") for line in err.splitlines() if "Memray ERROR" in line), None)
    return json.loads(r.stdout), complaint


def read(data: bytes, source: str = "<input>", leaks: bool = False, isolate: bool = True,
         threads: dict | None = None, own: dict | None = None) -> Profile:
    """A Profile from a capture's bytes. ``isolate``: read in a child process, so that a corrupt file
    that crashes memray's reader gives a ProfileFormatError instead (default; costs a Python start).
    ``threads`` and ``own``: see ``build``."""
    d = tempfile.mkdtemp(prefix="profmagic-memray-")
    try:
        path = os.path.join(d, "capture.bin")
        with open(path, "wb") as f:
            f.write(data)
        return read_file(path, source, leaks=leaks, isolate=isolate, data=data, threads=threads, own=own)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def read_file(path: str, source: str | None = None, leaks: bool = False, isolate: bool = True,
              data: bytes | None = None, threads: dict | None = None, own: dict | None = None) -> Profile:
    source = source or path
    if data is None:
        with open(path, "rb") as f:
            data = f.read()
    if not sniff(data[:64]):
        raise ProfileFormatError("not a memray capture: expected the memray header, plain or LZ4-compressed",
                                 source=source, offset=0)
    if version() is None:
        raise ProfileFormatError("reading a memray capture needs memray: pip install 'profmagic[memory]'",
                                 source=source)
    if data.startswith(LZ4_MAGIC):
        check_lz4(data, source)
    complaint = None
    if isolate:
        rec, complaint = _extract_isolated(path, source, leaks)
    else:
        from .memray_records import extract
        try:
            rec = extract(path, leaks)
        except OSError as e:
            raise ProfileFormatError(f"memray could not read this file: {e}", source=source) from None
    expected = header_count(data)
    if expected and rec["metadata"]["records"] < expected:
        raise _truncated(source, len(data), f"its records: memray read {rec['metadata']['records']:,} of the "
                         f"{expected:,} its header counts")
    if complaint:
        raise ProfileFormatError(f"corrupt memray capture: {complaint}; expected a capture written by memray's "
                                 "Tracker", source=source)
    options = {k: v for k, v in (("leaks", leaks), ("threads", threads), ("own", own)) if v}
    raw = Raw(data, NAME, filename=os.path.basename(path) if path else None, options=options)
    return build(rec, source, raw, complete=None if expected == 0 else True, threads=threads, own=own)


def thread_label(tid: int, name: str | None) -> str:
    """memray numbers threads itself (1 = the thread that started tracking): not OS thread ids."""
    return f'memray thread {tid} "{name}"' if name else f"memray thread {tid}"


def native_id(memray_tid: int, name: str | None, entry: tuple | None, main: int, threads: dict | None) -> int | None:
    """The OS thread id of memray's thread ``memray_tid``, from what the recorder knew (``threads``):
    the thread that started tracking is ``threads["main"]``; another is the one thread that had its
    name (``threads["names"]``: name -> native ids), or else, for a thread memray left unnamed (it
    names threads that existed before tracking only sometimes), the one thread whose Python entry point
    (``entry``: the function its stacks run under threading's bootstrap) is that (``threads["entries"]``:
    [function, file, [native ids]] each)."""
    if not threads:
        return None
    if memray_tid == main:
        return threads.get("main")
    ids = (threads["names"].get(name) or []) if name else []
    if not ids and entry is not None:
        ids = next((e[2] for e in threads["entries"] if (e[0], e[1]) == entry), [])
    return ids[0] if len(ids) == 1 else None


def _options(threads, own, source: str) -> tuple[dict | None, dict | None]:
    """The ``threads`` and ``own`` reader options, checked: they come with a capture (a container's
    manifest), so they are input like the capture itself."""
    try:
        if threads is not None:
            main = threads.get("main")
            threads = {"main": None if main is None else int(main),
                       "names": {str(k): [int(i) for i in v] for k, v in (threads.get("names") or {}).items()},
                       "entries": [(str(e[0]), str(e[1]), [int(i) for i in e[2]]) for e in threads.get("entries") or ()]}
        if own is not None:
            own = {"prefix": str(own["prefix"]), "names": [str(n) for n in own["names"]]}
    except (AttributeError, TypeError, ValueError, IndexError, KeyError):
        raise ProfileFormatError('reader options: expected threads = {"main": id, "names": {name: [ids]}, '
                                 '"entries": [[function, file, [ids]]]} and own = {"prefix": folder, "names": '
                                 '[functions]}', source=source) from None
    return threads, own


def entry_point(frames: list, stack: list) -> tuple | None:
    """(function, file) a Python thread runs: the frame under threading's ``_bootstrap_inner``, or under
    ``Thread.run`` when that only calls the thread's target."""
    names = [(frames[f][0], str(frames[f][1])) for f in stack if frames[f][3] == "python"]
    for i, (name, file) in enumerate(names[:-1]):
        if name == "_bootstrap_inner" and file.endswith("threading.py"):
            run = names[i + 1]
            if run[0] == "run" and run[1] == file and i + 2 < len(names):
                return names[i + 2]
            return run
    return None


def build(rec: dict, source: str, raw: Raw | None = None, complete: bool | None = True,
          threads: dict | None = None, own: dict | None = None) -> Profile:
    """The Profile from ``memray_records.extract``'s output.

    ``threads`` (from the recorder: ``{"main": native id, "names": {name: [native ids]}, "entries":
    [[function, file, [native ids]], ...]}``; see ``native_id``) gives memray's threads their OS ids
    and the labels every backend shares. ``own`` (``{"prefix": folder,
    "names": [function names]}``): the recorder's own functions; stacks through them are its own
    allocations (starting and stopping memray), dropped and counted in ``meta["dropped_own_bytes"]``."""
    threads, own = _options(threads, own, source)
    md = rec["metadata"]
    b = StackBuilder()
    frames = rec["frames"]
    names = {int(k): v for k, v in rec["threads"].items()}
    labels = {}
    main = md["main_thread_id"]
    entries: dict[int, tuple] = {}
    for tid, stack in rec["stacks"]:
        if tid not in entries:
            e = entry_point(frames, stack)
            if e is not None:
                entries[tid] = e
    for tid in sorted({t for t, _ in rec["stacks"]}, key=lambda t: (t != main, t)):
        name = names.get(tid)
        native = native_id(tid, name, entries.get(tid), main, threads)
        label = shared_label(native, name) if native is not None else thread_label(tid, name)
        labels[tid] = b.thread(label, tid=native, pid=md["pid"], name=name, python=True)
    own_frames = set()
    if own and own["prefix"]:
        own_frames = {i for i, (name, file, _, _) in enumerate(frames)
                      if name in own["names"] and str(file).startswith(own["prefix"])}
    rows = []
    for tid, stack in rec["stacks"]:
        if own_frames.intersection(stack):
            rows.append(None)
            continue
        fids, caller = [], None
        for f in stack:
            name, file, line, kind = frames[f]
            if name in COMPREHENSIONS and caller and caller[1] == file:
                name = f"{caller[0]}.<locals>.{name}"
            fids.append(b.frame(name, file or None, line, kind))
            caller = (name, file) if kind == "python" else caller
        rows.append(b.stack(labels[tid], fids))
    weights: dict[int, dict] = {}
    for sid, nbytes, _ in rec["peak"]:
        weights.setdefault(sid, {})["bytes"] = nbytes
    for sid, nbytes, n in rec["all"] or ():
        weights.setdefault(sid, {}).update(allocated=nbytes, allocations=n)
    dropped = 0
    for sid, w in weights.items():
        if rows[sid] is None:
            dropped += w.get("bytes", 0)
        else:
            b.add(rows[sid], samples=0, **{"bytes": 0, **w})
    start, end = md["start_ms"], md["end_ms"]
    timeline = memory_timeline(rec["snapshots"], rec.get("interval_peaks"), start, end, md["peak_memory"])
    meta = {
        "format": NAME, "source": source, "memray": rec.get("memray"),
        "metrics": ["bytes"] + (["allocated", "allocations"] if rec["all"] is not None else []),
        "duration": max(end - start, 0) / 1e3, "pid": md["pid"], "command_line": md["command_line"],
        "main_thread": b.threads[labels[main]] if main in labels else None,
        "peak_memory": md["peak_memory"], "records": md["records"],
        "native": md["native_traces"], "trace_python_allocators": md["trace_python_allocators"],
        "python_allocator": md["python_allocator"], "file_format": md["file_format"], "leaks": rec["leaks"],
        "memray_mode": "aggregated" if rec["all"] is None else "every allocation",
        "memory_timeline": timeline,
    }
    if own:
        meta["dropped_own_bytes"] = dropped
    if rec["leaks"]:
        meta["metric_labels"] = {"bytes": LEAKS_LABEL}
    if not md["trace_python_allocators"] and md["python_allocator"] == "pymalloc":
        meta["approximate"] = ("Python's small-object allocator was not traced: memray saw pymalloc's arenas, "
                               "not each object, so small objects' bytes go to whichever code made an arena")
    if rec["all"] is None:
        meta["unknown"] = {m: "an aggregated capture keeps no record of each allocation"
                           for m in ("allocated", "allocations")}
    if complete is None:
        meta["completeness"] = ("unknown: the tracker never finished this file (a process that ended while "
                                "tracking, such as a forked child leaving with os._exit)")
    unknown = ("allocated", "allocations") if rec["all"] is None else ()
    measured = ("bytes",) if rec["all"] is None else ("bytes", "allocated", "allocations")
    return b.build(metric="bytes", meta=meta, raw=raw, unknown_metrics=unknown, metrics=measured)


def memory_timeline(snaps: list, interval_peaks: list | None, start_ms: int, end_ms: int, peak: int) -> dict:
    """Heap and RSS over time from memray's snapshots, and when the high-water mark was reached.
    Times in seconds from the start of tracking.

    ``interval_peaks[i]`` is the heap's high-water mark after snapshot i-1 up to snapshot i (the last
    one, when there is one more than snapshots, up to the end). The peak was reached in the first
    interval whose high-water mark, or whose closing snapshot's heap, is the capture's peak."""
    times = [(t - start_ms) / 1e3 for t, _, _ in snaps]
    heap = [h for _, _, h in snaps]
    out = {"t0_unix": start_ms / 1e3, "end": max(end_ms - start_ms, 0) / 1e3, "time": times, "heap": heap, "rss": [r for _, r, _ in snaps],
           "peak_bytes": peak, "interval_peaks": interval_peaks,
           "note": "heap: bytes memray saw allocated and not yet freed; rss: the process's resident set size; "
                   "one snapshot every 10 ms"}
    bounds = [0.0] + times + [max(end_ms - start_ms, 0) / 1e3]
    peaks = interval_peaks or []
    for i in range(len(snaps) + 1):
        level = max(peaks[i] if i < len(peaks) else 0, heap[i] if i < len(heap) else 0)
        if peak and level >= peak:
            out["peak_between"] = [bounds[i], bounds[i + 1]]
            break
    return out

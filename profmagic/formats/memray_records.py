"""A memray capture's records as plain data, for formats/memray.py. Standard library and memray only.

Runs in the reading process for a capture that process just wrote, and as a child process
(``python -P memray_records.py FILE [--leaks]``, run by path so that it imports no profmagic) for any
other file: memray's reader crashes on some corrupt files (SIGSEGV or SIGABRT: 15 of 60 captures with
random bytes overwritten, tried by hand with memray 1.20; tests/data/memray-segv.bin is one), and a
crash must not take the kernel down with it.

Output (JSON in the child): frames ``[name, file, line, kind]``; stacks ``[memray tid, [frame ids,
root first]]``; per stack ``peak`` (bytes and allocations at the high-water mark, or still alive at the
end with ``leaks``) and ``all`` (every allocation, freed or not); thread names by memray tid; memray's
memory snapshots ``[ms since the epoch, rss, heap]`` and the heap's high-water mark in each interval
around them; the capture's metadata.
"""
from __future__ import annotations

import json
import sys
from operator import attrgetter

DEALLOCATORS = {1, 5, 15}
FULL = 1 << 30  # as max_stacks: every frame  # memray's AllocatorType PYMALLOC_FREE, FREE, MUNMAP: records of a release


def _kinds(hybrid: list, python: list) -> list[str]:
    """Which entries of a hybrid (native + Python) stack are Python frames: those of the Python
    stack, in order."""
    out, j = [], 0
    for entry in hybrid:
        if j < len(python) and tuple(entry) == tuple(python[j]):
            out.append("python")
            j += 1
        else:
            out.append("native")
    return out


def extract(path: str, leaks: bool = False) -> dict:
    import memray

    frames: list[list] = []
    frame_ids: dict[tuple, int] = {}
    stacks: list[list] = []
    stack_ids: dict[tuple, int] = {}
    names: dict[int, str] = {}

    with memray.FileReader(path) as reader:
        md = reader.metadata
        native = bool(md.has_native_traces)

        def resolve(rec) -> int:
            # Leaf first. With max_stacks memray keeps the frames below where tracking started, which it
            # otherwise drops on the starting thread (they may hold the code, when tracking started in a
            # deeper call than the code runs in: a recorder's start()).
            py = rec.stack_trace(max_stacks=FULL)
            if native:
                hybrid = rec.hybrid_stack_trace()  # memray drops those frames here in any case: add them
                kinds = _kinds(hybrid, py)
                entries = list(zip(hybrid, kinds)) + [(f, "python") for f in py[kinds.count("python"):]]
            else:
                entries = [(f, "python") for f in py]
            fids = []
            for (fn, file, line), kind in reversed(entries):
                k = (str(fn), str(file), int(line) if line else None, kind)
                fid = frame_ids.get(k)
                if fid is None:
                    fid = frame_ids[k] = len(frames)
                    frames.append(list(k))
                fids.append(fid)
            skey = (rec.tid, tuple(fids))
            sid = stack_ids.get(skey)
            if sid is None:
                sid = stack_ids[skey] = len(stacks)
                stacks.append([rec.tid, fids])
            return sid

        fields = attrgetter("allocator", "tid", "stack_id", "size", "n_allocations",
                            *(("native_stack_id", "native_segment_generation") if native else ()))

        def aggregate(records) -> list[list]:
            # The hot loop (one pass per allocation record): one attrgetter call per record is 16%
            # faster than reading the attributes one by one.
            acc: dict[tuple, list] = {}
            for rec in records:
                allocator, tid, sid, size, n, *nat = fields(rec)
                if allocator in DEALLOCATORS:
                    continue
                k = (tid, sid, *nat)
                v = acc.get(k)
                if v is None:
                    acc[k] = [size, n, rec]
                    name = rec.thread_name
                    if name:
                        names[tid] = name
                else:
                    v[0] += size
                    v[1] += n
            out: dict[int, list] = {}
            for size, n, rec in acc.values():
                row = out.setdefault(resolve(rec), [0, 0])
                row[0] += size
                row[1] += n
            return [[sid, b, n] for sid, (b, n) in out.items()]

        peak_records = (reader.get_leaked_allocation_records(merge_threads=False) if leaks
                        else reader.get_high_watermark_allocation_records(merge_threads=False))
        peak = aggregate(peak_records)
        try:
            every = aggregate(reader.get_allocation_records())
        except NotImplementedError:  # an AGGREGATED_ALLOCATIONS capture keeps no allocation records
            every = None
        snapshots = [[s.time, s.rss, s.heap] for s in reader.get_memory_snapshots()]
        try:  # the heap's high-water mark between consecutive snapshots (one more than snapshots)
            interval_peaks = list(reader.get_temporal_high_water_mark_allocation_records(merge_threads=True)[1])
        except NotImplementedError:
            interval_peaks = None
    return {
        "memray": getattr(memray, "__version__", None),
        "metadata": {
            "start_ms": int(md.start_time.timestamp() * 1000), "end_ms": int(md.end_time.timestamp() * 1000),
            "records": md.total_allocations, "peak_memory": md.peak_memory, "command_line": md.command_line,
            "pid": md.pid, "main_thread_id": md.main_thread_id, "python_allocator": md.python_allocator,
            "native_traces": native, "trace_python_allocators": bool(md.trace_python_allocators),
            "file_format": getattr(md.file_format, "name", str(md.file_format)),
        },
        "leaks": leaks, "frames": frames, "stacks": stacks, "threads": {str(k): v for k, v in names.items()},
        "peak": peak, "all": every, "snapshots": snapshots, "interval_peaks": interval_peaks,
    }


if __name__ == "__main__":
    json.dump(extract(sys.argv[1], leaks="--leaks" in sys.argv[2:]), sys.stdout, separators=(",", ":"))

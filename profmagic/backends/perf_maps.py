"""Hide a library's stray mappings from perf's unwinder: patched in ``perf.data``, before ``perf script``.

With ``--call-graph dwarf`` perf records every file mapping of the process, read-only ones too (it
sets ``mmap_data``). A process that maps part of a library a second time, elsewhere, as a
symbolizer or ELF reader does (libbacktrace in memray's reports, Rust's backtrace crate, ...),
then breaks perf 6.1's DWARF unwind through that library: it takes the stray mapping for part of
the loaded image, finds no unwind tables at the address it computes, and falls back to frame
pointers. Measured here: one read-only mapping of 9 pages of libc.so.6 at file offset 0x1a000 cut
every stack in ``nanosleep`` (the caller's frame skipped, or the stack ended at libc), in a process
that had run memray's native report.

A loaded image spans from its load base (an executable mapping's address minus its file offset) to
its last segment; a non-executable mapping of the same file outside every image's span is stray.
Its file name in the ``PERF_RECORD_MMAP2`` record becomes ``//anon`` (NUL-padded to the name's
length, so no record moves): perf then treats it as anonymous memory.

The perf.data layout read here (perf's ``tools/perf/util/header.h`` and the kernel's
``perf_event.h``): the file header ``PERFILE2``, its own size at byte 8 (16 in pipe mode, which
has no sections: left alone), the data section's offset and size at bytes 40 and 48; records of ``{u32 type; u16 misc; u16 size}``; an MMAP2 record (type 10) holds pid, tid,
start, len, pgoff, 24 bytes of device/inode or build id, prot, flags, then the file name at 72.
"""
from __future__ import annotations

import mmap
import os
import struct

MAGIC = b"PERFILE2"
MMAP2 = 10
COMPRESSED = 81          # -z: records inside are compressed; profmagic does not ask for it
PROT_EXEC = 4
NAME_AT = 72
ANON = b"//anon"
SLACK = 2 << 20          # the largest segment alignment x86-64 linkers use (max-page-size)
_HEAD = struct.Struct("<IHH")
_MMAP2 = struct.Struct("<IIQQQ24xII")


def _records(m, start: int, end: int):
    """(offset, type, size) of each record in ``m[start:end]``."""
    at = start
    while at + 8 <= end:
        kind, _, size = _HEAD.unpack_from(m, at)
        if size < 8 or at + size > end:
            return
        yield at, kind, size
        at += size


def _images(maps: list) -> dict[tuple, list[tuple[int, int]]]:
    """(pid, file) -> the address ranges its loaded images span: from each executable mapping's load
    base (start - pgoff) to the end of the last mapping with that base, plus SLACK for the data
    segments, whose address is their file offset moved by up to a segment alignment."""
    ends: dict[tuple, int] = {}
    for _, pid, start, length, pgoff, prot, name in maps:
        if prot & PROT_EXEC:
            ends.setdefault((pid, name, start - pgoff), start + length)
    for _, pid, start, length, pgoff, _, name in maps:
        key = (pid, name, start - pgoff)
        if key in ends:
            ends[key] = max(ends[key], start + length)
    spans: dict[tuple, list] = {}
    for (pid, name, base), end in ends.items():
        spans.setdefault((pid, name), []).append((base, end + SLACK))
    return spans


def hide_stray_maps(path: str) -> list[dict]:
    """Patch ``path`` (a perf.data file) in place; returns the stray mappings hidden (file, start,
    pgoff, len). A file that is not a perf.data file perf can read is left alone."""
    with open(path, "r+b") as f:
        if os.fstat(f.fileno()).st_size < 64 or f.read(8) != MAGIC:
            return []
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            header_size, = struct.unpack_from("<Q", m, 8)
            data_at, data_size = struct.unpack_from("<QQ", m, 40)
            if header_size < 56 or data_at < header_size:
                return []
            end = min(data_at + data_size, len(m))
            maps = []          # (record offset, pid, start, len, pgoff, prot, name)
            for at, kind, size in _records(m, data_at, end):
                if kind == COMPRESSED:
                    return []
                if kind != MMAP2 or size <= NAME_AT:
                    continue
                pid, _, start, length, pgoff, prot, _ = _MMAP2.unpack_from(m, at + 8)
                raw = m[at + NAME_AT:at + size]
                name = raw[:raw.find(b"\0")] if b"\0" in raw else raw
                if name.startswith(b"/"):
                    maps.append((at, pid, start, length, pgoff, prot, name))
        spans = _images(maps)
        hidden = []
        for at, pid, start, length, pgoff, prot, name in maps:
            images = spans.get((pid, name))
            if prot & PROT_EXEC or not images or any(lo <= start < hi for lo, hi in images) \
                    or len(name) < len(ANON):
                continue
            # Written, not synced: perf script reads it through the same page cache.
            os.pwrite(f.fileno(), ANON + b"\0" * (len(name) - len(ANON)), at + NAME_AT)
            hidden.append({"file": name.decode(errors="replace"), "start": start, "pgoff": pgoff, "len": length})
        return hidden

"""A jitdump for CPython's perf trampolines, so that perf unwinds through them (this process only).

CPython 3.12+ runs each Python function through a small trampoline when its perf support is on
(``sys.activate_stack_trampoline("perf")``) and names it in ``/tmp/perf-PID.map``. perf then names
the frame ``py::func:file``, but the trampoline has no unwind info, so a DWARF unwind stops there:
a sample keeps only its innermost Python function and what it called (measured on 3.12.1 and
3.13.0). perf learns code with unwind info from a jitdump (the format of perf's
``tools/perf/util/jitdump.h``): ``/tmp/jit-PID.dump``, mapped executable by the process while perf
records, turned into one small ELF per code load by ``perf inject --jit``, which maps it over the
code *and* the unwind tables that follow it. CPython writes one only for ``-X perf_jit`` (3.13+,
buffered until exit), where it spaces trampolines out for that; the ``perf`` map's trampolines are
packed (3.12: every 11 bytes), so one load per trampoline would overlap its neighbours' and lose
their tables (measured: the unwind still stopped at the first trampoline).

So each run of evenly spaced trampolines is one code load, with one FDE whose CFA is a DWARF
expression of the pc: every trampoline is ``sub $8,%rsp; call *%rcx; add $8,%rsp; ret``, so
CFA = rsp + 16 from 4 to 10 bytes into it, rsp + 8 elsewhere; the return address at CFA - 8. perf
then names the whole run by one symbol: ``rename`` puts each frame's own ``py::func:file`` back,
from its address and the map.
"""
from __future__ import annotations

import bisect
import mmap
import os
import re
import struct
import time

MAGIC = 0x4A695444          # "JiTD"
EM_X86_64 = 62
CODE_LOAD, UNWINDING_INFO = 0, 4
TRAMPOLINE = bytes.fromhex("4883ec08ffd14883c408c3")
TEXT_OFFSET = 0x80          # where perf inject puts the code in each ELF (its mmap's pgoff)
# DWARF opcodes used below
DW_CFA_def_cfa, DW_CFA_def_cfa_expression, DW_CFA_offset = 0x0C, 0x0F, 0x80
DW_OP_breg7, DW_OP_breg16, DW_OP_constu, DW_OP_minus, DW_OP_mod = 0x77, 0x80, 0x10, 0x1C, 0x1D
DW_OP_dup, DW_OP_swap, DW_OP_and, DW_OP_plus, DW_OP_shl, DW_OP_ge, DW_OP_lt = 0x12, 0x16, 0x1A, 0x22, 0x24, 0x2A, 0x2D
DW_OP_lit0 = 0x30


def _uleb(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _sleb(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        done = (n == 0 and not b & 0x40) or (n == -1 and b & 0x40)
        out.append(b | (0 if done else 0x80))
        if done:
            return bytes(out)


def _entry(body: bytes) -> bytes:
    """A CIE/FDE: its length, then ``body`` padded with DW_CFA_nop to a multiple of 8."""
    body += b"\0" * (-(len(body) + 4) % 8)
    return struct.pack("<I", len(body)) + body


def cfa_expression(start: int, stride: int) -> bytes:
    """CFA = rsp + 8 + 8 * (4 <= (rip - start) % stride < 10)."""
    return bytes([DW_OP_breg16]) + _sleb(0) + bytes([DW_OP_constu]) + _uleb(start) + bytes([
        DW_OP_minus, DW_OP_constu]) + _uleb(stride) + bytes([
        DW_OP_mod, DW_OP_dup, DW_OP_lit0 + 4, DW_OP_ge, DW_OP_swap, DW_OP_lit0 + 10, DW_OP_lt, DW_OP_and,
        DW_OP_lit0 + 3, DW_OP_shl, DW_OP_breg7]) + _sleb(8) + bytes([DW_OP_plus])


def eh_frame(code_size: int, start: int, stride: int) -> tuple[bytes, int]:
    """(.eh_frame for a run of trampolines laid out as perf's genelf does: text, then this, then the
    .eh_frame_hdr; the CIE's size)."""
    cie = _entry(struct.pack("<IB", 0, 1) + b"zR\0" + _uleb(1) + _sleb(-8) + _uleb(16) + _uleb(1)
                 + bytes([0x1B])                                        # FDE addresses: pcrel sdata4
                 + bytes([DW_CFA_def_cfa]) + _uleb(7) + _uleb(8)        # CFA = rsp + 8
                 + bytes([DW_CFA_offset | 16]) + _uleb(1))              # return address at CFA - 8
    text = -(-code_size // 8) * 8
    # The FDE's pc_begin field sits 8 bytes into it; the text starts ``text`` bytes before .eh_frame.
    expr = cfa_expression(start, stride)
    fde = _entry(struct.pack("<Iii", len(cie) + 4, -(text + len(cie) + 8), code_size) + _uleb(0)
                 + bytes([DW_CFA_def_cfa_expression]) + _uleb(len(expr)) + expr)
    return cie + fde, len(cie)


def unwinding_record(code_size: int, start: int, stride: int, timestamp: int) -> bytes:
    frame, cie_size = eh_frame(code_size, start, stride)
    text = -(-code_size // 8) * 8
    # .eh_frame_hdr: version, encodings (pcrel sdata4, udata4, datarel sdata4), the .eh_frame
    # pointer, one table entry: (the text's start, the FDE), both relative to the header.
    hdr = struct.pack("<BBBBiIii", 1, 0x1B, 0x03, 0x3B, -(len(frame) + 4), 1, -(text + len(frame)),
                      -(len(frame) - cie_size))
    data = frame + hdr
    body = struct.pack("<QQQ", len(data), len(hdr), -(-len(data) // 16) * 16) + data
    body += b"\0" * (-(len(body) + 16) % 8)
    return struct.pack("<IIQ", UNWINDING_INFO, 16 + len(body), timestamp) + body


def code_load_record(pid: int, addr: int, code: bytes, name: str, index: int, timestamp: int) -> bytes:
    name_b = name.encode(errors="replace") + b"\0"
    body = struct.pack("<IIQQQQ", pid, pid, addr, addr, len(code), index) + name_b + code
    return struct.pack("<IIQ", CODE_LOAD, 16 + len(body), timestamp) + body


def runs(entries: list[tuple[int, int, str]]) -> list[list[tuple[int, int, str]]]:
    """Maximal runs of trampolines at one constant stride (address order)."""
    out: list[list] = []
    for e in entries:
        r = out[-1] if out else None
        if r and (len(r) == 1 and 0 < e[0] - r[-1][0] <= 64 or len(r) > 1 and e[0] - r[-1][0] == r[1][0] - r[0][0]):
            r.append(e)
        else:
            out.append([e])
    return out


def perf_map(pid: int) -> list[tuple[int, int, str]]:
    """(address, size, name) of every trampoline in /tmp/perf-PID.map, in address order."""
    out = []
    try:
        with open(f"/tmp/perf-{pid}.map", errors="replace") as f:
            for line in f:
                parts = line.rstrip("\n").split(" ", 2)
                if len(parts) == 3:
                    out.append((int(parts[0], 16), int(parts[1], 16), parts[2]))
    except (OSError, ValueError):
        return []
    return sorted(out)


def readable_ranges() -> list[tuple[int, int]]:
    """(start, end) of this process's readable mappings, in address order."""
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            span, perms = line.split(None, 2)[:2]
            if perms.startswith("r"):
                lo, hi = span.split("-")
                out.append((int(lo, 16), int(hi, 16)))
    return sorted(out)


def _inside(ranges: list, los: list, addr: int, size: int) -> bool:
    i = bisect.bisect_right(los, addr) - 1
    return i >= 0 and addr + size <= ranges[i][1]


class JitDump:
    """/tmp/jit-PID.dump for this process's trampolines. ``open()`` before perf starts (perf sees
    the executable mapping of the file, its cue to read it at ``perf inject --jit``); ``write()``
    after recording, with every trampoline loaded at ``timestamp`` (CLOCK_MONOTONIC ns, before the
    first sample); ``close()`` removes it."""

    def __init__(self):
        self.pid = os.getpid()
        self.path = f"/tmp/jit-{self.pid}.dump"
        self.fd = None
        self.map = None
        self.timestamp = None
        self.runs: list[tuple[int, list]] = []   # (start, trampolines) per code load, by its index

    def open(self) -> bool:
        """False when another writer (CPython's own -X perf_jit) already has the file."""
        try:
            self.fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        except FileExistsError:
            return False
        self.timestamp = time.monotonic_ns()
        os.write(self.fd, struct.pack("<IIIIIIQQ", MAGIC, 1, 40, EM_X86_64, 0, self.pid,
                                      time.time_ns() // 1000, 0))
        self.map = mmap.mmap(self.fd, mmap.PAGESIZE if os.fstat(self.fd).st_size >= mmap.PAGESIZE else 40,
                             mmap.MAP_PRIVATE, mmap.PROT_READ | mmap.PROT_EXEC)
        return True

    def write(self) -> int:
        """Unwind info and code for every run of trampolines in the map; returns how many trampolines."""
        import ctypes
        # Only what lies in this process's readable memory is read: the map may hold another
        # process's lines (an ended one with this pid left its file) or freed arenas, and reading
        # one of those crashed the kernel (a segfault in memcpy, seen on 3.12 in CI).
        ranges = readable_ranges()
        los = [lo for lo, _ in ranges]
        entries = [e for e in perf_map(self.pid) if _inside(ranges, los, e[0], len(TRAMPOLINE))
                   and ctypes.string_at(e[0], len(TRAMPOLINE)) == TRAMPOLINE]
        chunks = []
        for i, run in enumerate(runs(entries)):
            start, end = run[0][0], run[-1][0] + len(TRAMPOLINE)
            stride = run[1][0] - start if len(run) > 1 else 16
            # perf may merge synthetic objects whose bytes (build id) are equal: the copy perf gets
            # ends with a per-run marker after the last trampoline (it is never run).
            code = ctypes.string_at(start, end - start) + struct.pack("<Q", ((self.timestamp << 8) ^ i) & (2 ** 64 - 1))
            chunks.append(unwinding_record(len(code), start, stride, self.timestamp))
            chunks.append(code_load_record(self.pid, start, code, f"py::[{len(run)} trampolines]", i, self.timestamp))
            self.runs.append((start, run))
        os.lseek(self.fd, 0, os.SEEK_END)
        os.write(self.fd, b"".join(chunks))
        return len(entries)

    def rename(self, text: bytes) -> bytes:
        """perf script text with each frame in one of our runs named by its own trampoline's map name."""
        if not self.runs:
            return text
        dso = re.compile(rb"^(\s*)([0-9a-f]+) (.*) \((/tmp/jitted-%d-(\d+)\.so)\)$" % self.pid, re.M)

        def name(m):
            k = int(m.group(5))
            if k >= len(self.runs):
                return m.group(0)
            start, run = self.runs[k]
            addr = start + int(m.group(2), 16) - TEXT_OFFSET
            j = bisect.bisect_right([e[0] for e in run], addr) - 1
            if j < 0 or addr >= run[j][0] + run[j][1]:
                return m.group(0)
            return b"%s%s %s (%s)" % (m.group(1), m.group(2), run[j][2].encode(errors="replace"), m.group(4))

        return dso.sub(name, text)

    def close(self) -> None:
        if self.map is not None:
            self.map.close()
            self.map = None
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
            try:
                os.unlink(self.path)
            except OSError:
                pass

"""Read a live CPython's Python stacks from its memory (/proc/PID/mem), per native thread.

For eu-stack's helper: it pairs each native snapshot with the Python frames each thread was
evaluating, so the reader can replace every ``[python]`` run with the functions it ran. The walk is
what pystack and py-spy do: ``_PyRuntime`` (a symbol of libpython or of the python executable)
-> interpreters -> thread states (by native thread id) -> the current ``_PyInterpreterFrame`` ->
``previous``... -> each frame's code object (qualified name, file, first line).

Struct offsets are per minor version for x86_64 release builds (``OFFSETS``), measured on CPython
3.11.7, 3.12.1 and 3.13.0 by reading a running interpreter's own memory (tests/test_pyframes.py
checks them against every interpreter found here). Each C-level call of the eval loop is one group
of frames: in 3.11 its outermost frame has ``is_entry`` set; from 3.12 a shim frame owned by the C
stack (``owner`` 3) sits below it. A version without offsets, or memory that does not read as
expected, gives no Python stacks (``PyFrames.error`` says why), never wrong names.

Standard library only: it runs in the helper process.
"""
from __future__ import annotations

import os
import re
import struct
from urllib.parse import quote

# minor version -> offsets (bytes). runtime_head: _PyRuntime.interpreters.head; threads_head:
# PyInterpreterState.threads.head; ts_*: PyThreadState; cframe/current: where the current frame is
# (3.11/3.12: tstate->cframe->current_frame; 3.13: tstate->current_frame); fr_*: _PyInterpreterFrame;
# co_*: PyCodeObject; str_*: PyASCIIObject (data of a compact ASCII / compact non-ASCII string).
OFFSETS = {
    (3, 11): dict(runtime_head=40, threads_head=16, ts_next=8, ts_native_id=160, cframe=56, current=8,
                  fr_code=32, fr_previous=48, fr_entry=68, fr_owner=69, co_filename=112, co_name=120,
                  co_qualname=128, co_firstlineno=72, str_state=32, str_ascii=48, str_compact=72),
    (3, 12): dict(runtime_head=40, threads_head=72, ts_next=8, ts_native_id=144, cframe=56, current=0,
                  fr_code=0, fr_previous=8, fr_entry=None, fr_owner=70, co_filename=112, co_name=120,
                  co_qualname=128, co_firstlineno=68, str_state=32, str_ascii=40, str_compact=56),
    (3, 13): dict(runtime_head=632, threads_head=7344, ts_next=8, ts_native_id=160, cframe=None, current=72,
                  fr_code=0, fr_previous=8, fr_entry=None, fr_owner=70, co_filename=112, co_name=120,
                  co_qualname=128, co_firstlineno=68, str_state=32, str_ascii=40, str_compact=56),
}
OWNED_BY_CSTACK = 3  # 3.12+: the shim frame an eval loop pushes below its first frame
MAX_FRAMES = 1024
USER_SPACE_END = 1 << 47  # x86_64
MAX_THREADS = 4096
MAX_FAILED_WALKS = 20   # thread-list walks failed in a row before the reads stop (a torn walk is retried)
_LIB = re.compile(r"/(lib)?python3\.\d+[^/]*$")


def _elf_symbols(path: str, wanted: set[str]) -> tuple[dict[str, int], int, bool]:
    """({name: st_value} for ``wanted`` symbols from .dynsym/.symtab, first PT_LOAD vaddr, is ET_DYN)."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2:
        return {}, 0, False
    e_type, = struct.unpack_from("<H", data, 16)
    e_phoff, e_shoff = struct.unpack_from("<QQ", data, 32)
    e_phentsize, e_phnum, e_shentsize, e_shnum = struct.unpack_from("<HHHH", data, 54)
    vaddr0 = None
    for i in range(e_phnum):
        p_type, _, p_offset, p_vaddr = struct.unpack_from("<IIQQ", data, e_phoff + i * e_phentsize)
        if p_type == 1 and vaddr0 is None:  # PT_LOAD
            vaddr0 = p_vaddr - p_offset
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, e_shoff + i * e_shentsize) for i in range(e_shnum)]
    out: dict[str, int] = {}
    for sh_name, sh_type, _, _, sh_offset, sh_size, sh_link, _, _, sh_entsize in sections:
        if sh_type not in (2, 11) or not sh_entsize:  # SHT_SYMTAB, SHT_DYNSYM
            continue
        str_off = sections[sh_link][4]
        for k in range(sh_offset, sh_offset + sh_size, sh_entsize):
            st_name, = struct.unpack_from("<I", data, k)
            end = data.find(b"\0", str_off + st_name)
            name = data[str_off + st_name:end].decode(errors="replace")
            if name in wanted and name not in out:
                out[name] = struct.unpack_from("<Q", data, k + 8)[0]
        if wanted <= set(out):
            break
    return out, vaddr0 or 0, e_type == 3


class PyFrames:
    """The Python stacks of process ``pid``: ``read()`` -> {native tid: [groups]}, each group the
    frames of one eval-loop call, innermost frame first, as (qualname, filename, firstlineno)."""

    def __init__(self, pid: int):
        self.pid = pid
        self.error: str | None = None
        self.failures = 0   # thread-list walks failed in a row (``read``)
        self.version: tuple[int, int] | None = None
        self.off: dict | None = None
        self.runtime = 0
        self._code: dict[tuple, tuple] = {}
        try:
            self.mem = open(f"/proc/{pid}/mem", "rb", buffering=0)
        except OSError as e:
            self.mem, self.error = None, f"cannot read /proc/{pid}/mem: {e}"
            return
        try:
            self._locate()
        except (OSError, ValueError, struct.error) as e:
            self.error = f"no CPython found in process {pid}: {e}"

    def _locate(self) -> None:
        maps = []
        with open(f"/proc/{self.pid}/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) == 6 and _LIB.search(parts[5].strip()):
                    lo = int(parts[0].split("-")[0], 16)
                    maps.append((parts[5].strip(), lo, int(parts[2], 16)))
        for path in dict.fromkeys(m[0] for m in maps):
            syms, vaddr0, dyn = _elf_symbols(f"/proc/{self.pid}/root{path}" if os.path.exists(
                f"/proc/{self.pid}/root{path}") else path, {"_PyRuntime", "Py_Version"})
            if "_PyRuntime" not in syms:
                continue
            base = min(lo - off for p, lo, off in maps if p == path) - vaddr0 if dyn else 0
            self.runtime = base + syms["_PyRuntime"]
            if "Py_Version" not in syms:
                raise ValueError(f"{path} has no Py_Version (CPython older than 3.11)")
            v = self._u32(base + syms["Py_Version"])
            self.version = (v >> 24, (v >> 16) & 0xFF)
            self.off = OFFSETS.get(self.version)
            if self.off is None:
                raise ValueError(f"Python {self.version[0]}.{self.version[1]}: no frame offsets for it "
                                 f"(known: {', '.join(f'{a}.{b}' for a, b in OFFSETS)})")
            return
        raise ValueError("no mapped libpython or python executable exports _PyRuntime")

    # -- memory ---------------------------------------------------------------------------
    def _read(self, addr: int, n: int) -> bytes:
        if not 0x1000 <= addr < USER_SPACE_END:  # a pointer read while it changed
            raise OSError(f"not a user-space address: 0x{addr:x}")
        self.mem.seek(addr)
        b = self.mem.read(n)
        if len(b) != n:
            raise OSError(f"short read at 0x{addr:x}")
        return b

    def _ptr(self, addr: int) -> int:
        return struct.unpack("<Q", self._read(addr, 8))[0]

    def _u32(self, addr: int) -> int:
        return struct.unpack("<I", self._read(addr, 4))[0]

    def _str(self, addr: int) -> str:
        o = self.off
        head = self._read(addr, o["str_state"] + 4)
        length, = struct.unpack_from("<q", head, 16)
        state = head[o["str_state"]]
        kind, compact, ascii_ = (state >> 2) & 7, (state >> 5) & 1, (state >> 6) & 1
        if not compact or kind not in (1, 2, 4) or not 0 <= length < 4096:
            raise ValueError(f"not a compact str at 0x{addr:x}")
        data = self._read(addr + (o["str_ascii"] if ascii_ else o["str_compact"]), length * kind)
        return data.decode({1: "latin-1", 2: "utf-16-le", 4: "utf-32-le"}[kind])

    def _code_info(self, code: int) -> tuple:
        o = self.off
        raw = self._read(code, o["co_qualname"] + 8)
        key = (code, raw[o["co_filename"]:o["co_qualname"] + 8], raw[o["co_firstlineno"]:o["co_firstlineno"] + 4])
        info = self._code.get(key)
        if info is None:
            fn, = struct.unpack_from("<Q", raw, o["co_filename"])
            qn, = struct.unpack_from("<Q", raw, o["co_qualname"])
            line, = struct.unpack_from("<i", raw, o["co_firstlineno"])
            info = self._code[key] = (self._str(qn), self._str(fn), line)
        return info

    # -- stacks ---------------------------------------------------------------------------
    def threads(self) -> dict[int, int]:
        """native tid -> PyThreadState address, for every thread of the main interpreter."""
        o = self.off
        interp = self._ptr(self.runtime + o["runtime_head"])
        out = {}
        ts = self._ptr(interp + o["threads_head"]) if interp else 0
        while ts and len(out) < MAX_THREADS:
            out[self._ptr(ts + o["ts_native_id"])] = ts
            ts = self._ptr(ts + o["ts_next"])
        return out

    def stack(self, ts: int) -> list[list[tuple]]:
        """The thread's Python frames, innermost first, in groups (one per eval-loop call)."""
        o = self.off
        if o["cframe"] is not None:
            cframe = self._ptr(ts + o["cframe"])
            frame = self._ptr(cframe + o["current"]) if cframe else 0
        else:
            frame = self._ptr(ts + o["current"])
        groups, cur = [], []
        for _ in range(MAX_FRAMES):
            if not frame:
                break
            raw = self._read(frame, o["fr_owner"] + 1)
            code, = struct.unpack_from("<Q", raw, o["fr_code"])
            previous, = struct.unpack_from("<Q", raw, o["fr_previous"])
            if raw[o["fr_owner"]] == OWNED_BY_CSTACK and o["fr_entry"] is None:
                groups.append(cur)  # 3.12+: the shim below an eval loop's first frame
                cur = []
            else:
                cur.append(self._code_info(code))
                if o["fr_entry"] is not None and raw[o["fr_entry"]]:
                    groups.append(cur)  # 3.11: this frame started its eval loop
                    cur = []
            frame = previous
        if cur:
            groups.append(cur)
        return [g for g in groups if g]

    def read(self) -> dict[int, list]:
        """{native tid: groups} for every Python thread now; {} when the process cannot be read."""
        if self.error is not None:
            return {}
        out = {}
        try:
            threads = self.threads()
        except (OSError, ValueError, struct.error) as e:
            # A thread list torn by a thread that ended as we walked it: none this time. Only a list
            # that cannot be read time after time stops the reads (one failed walk used to stop them
            # for the rest of the recording).
            self.failures += 1
            if self.failures >= MAX_FAILED_WALKS:
                self.error = f"reading Python threads failed {self.failures} times in a row: {e}"
            return out
        self.failures = 0
        for tid, ts in threads.items():
            try:
                out[tid] = self.stack(ts)
            except (OSError, ValueError, struct.error, UnicodeDecodeError, KeyError):
                continue  # a thread that moved while we read it: no Python stack this time
        return out

    def close(self) -> None:
        if self.mem is not None:
            self.mem.close()
            self.mem = None


def encode_groups(groups: list) -> str:
    """Python stacks as the helpers write them (formats/eu_stack.py ``_py_groups`` reads them): groups
    innermost first, split by ``|``, frames by ``;``, each quote(qualname):quote(file):first line."""
    return "|".join(";".join(f"{quote(q, safe='')}:{quote(f, safe='/')}:{ln}" for q, f, ln in g) for g in groups)

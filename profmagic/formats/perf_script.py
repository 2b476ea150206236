"""``perf script`` text -> Profile, folded exactly as FlameGraph's ``stackcollapse-perf.pl`` does.

Rules (FlameGraph at 41fee1f; see tests/data/flamegraph/PARSING-RULES.md):

* A record is an event header (``comm [pid/]tid [cpu] time: [period] event:``; the timestamp and
  cpu may be missing) followed by frame lines (``addr symbol (module)``, leaf first, indented or
  at column 0). A blank line ends it. ``#`` lines are skipped anywhere.
* Only records of one event are kept: ``event_filter``, or else the first event seen.
* The weight of a record is its period (missing or 0 means 1), as FlameGraph sums it.
* Each stack starts with FlameGraph's root frame: ``comm``, ``comm-PID`` (``pid=True``) or
  ``comm-PID/TID`` (``tid=True``), with spaces turned into ``_``; ``meta["folded_thread_roots"]``
  is False so ``to_folded()`` adds no thread names of its own. The ``thread`` column is always
  per thread (``comm-PID/TID``; PID is ``?`` when perf printed one number), with the thread's last
  comm: a thread that execs is one thread (its samples keep their own ``comm``).
* Frame names are tidied as stackcollapse-perf does; ``kernel``/``jit``/``all`` add its ``_[k]``/
  ``_[j]`` annotations, ``addrs`` writes unknown frames as ``[module <addr>]``. Not supported:
  ``--inline``, ``--context`` (they run addr2line) and ``--srcline``.

Choices where we differ from, or go beyond, FlameGraph:

* **Unterminated last record**: a record that no blank line closes at end of input is dropped by
  FlameGraph and kept by speedscope. We keep it (``keep_unterminated=True``);
  ``keep_unterminated=False`` reproduces FlameGraph's drop (the corpus tests use it).
* **Java tidy**: we follow FlameGraph HEAD, which strips the leading ``L`` of ``Lpkg/Class;...``
  frames whenever the root name starts with ``java`` (so also ``java-PID``). FlameGraph's own
  expected ``--pid``/``--tid`` files for 4 Java inputs predate that change and keep the ``L``.
* **Odd lines**: FlameGraph warns on unrecognised lines and goes on. We are lenient too (perf
  output can carry extra lines) but count them in ``meta["skipped_lines"]`` and keep the first few
  in ``meta["warnings"]``; ``strict=True`` raises ProfileFormatError at the first one, and at a
  frame line that has no event header before it. Input without any sample is always an error.
* **Metric**: ``samples`` holds the sum of periods (FlameGraph's count), except for
  ``cpu-clock``/``task-clock`` records that all printed their period (nanoseconds): there
  ``samples`` counts records, ``period`` holds the period sum and ``cpu`` (seconds) is the primary
  metric; ``to_folded(metric="period")`` then gives FlameGraph's output.
* **Python**: perf-trampoline frames (``py::func:/path/file.py``, Python 3.12+) become ``python``
  frames named ``func`` with their file (``python_names=False`` keeps perf's raw name).
* CRLF line ends are read as LF (FlameGraph would see no blank line at all).
* ``Profile.samples`` has one row per kept record: ``time`` (s, NaN where perf printed none),
  ``stack``, ``thread``, ``comm``, ``pid``, ``tid``, ``period``, ``samples`` (and ``cpu``), ordered by
  time; it is None when no record has a timestamp.
"""
from __future__ import annotations

import re
from typing import NamedTuple

import numpy as np
import pandas as pd

from ..errors import ProfileFormatError
from ..threads import thread_label
from ..model import Profile, Raw, StackBuilder
from ._perf_common import SideBand
from . import native_names
from .folded import decode
from .registry import Format

NAME = "perf_script"
FORMAT = Format(NAME, __name__, raw_suffix=".perf.txt", mime="text/plain")

# The regexes of stackcollapse-perf.pl; possessive quantifiers replace its nested ones
# ((\d+)* after \d+), which give the same matches without exponential backtracking.
_HEADER = re.compile(r"(\S.+?)\s+(\d++)/*+(\d*+)\s+", re.A)
_EVENT = re.compile(r":\s*(\d*+)\s+(\S+):\s*$", re.A)
# A tracepoint's header goes on with its fields (perf script -F ...,trace): "sched:sched_switch: prev_comm=..."
_EVENT_TRACE = re.compile(r":\s*(\d*+)\s+(\S+):\s+(\S.*?)\s*$", re.A)
_FRAME = re.compile(r"\s*(\w+)\s*(.+) \((.*)\)", re.A)
_TIME = re.compile(r"(?:\[\d+\]\s+)?(\d+\.\d+):", re.A)
_OFFSET = re.compile(r"\+0x[\da-f]+$", re.A)
_GO_METHOD = re.compile(r"\.\(.*\)\.")
_PAREN = re.compile(r"\((?!anonymous namespace\)).*")
_JIT_MAP = re.compile(r"/tmp/perf-\d+\.map", re.A)
# perf inject --jit writes Python 3.13's perf_jit code into these; frames there are named py::func:file too.
_JITTED_SO = re.compile(r"/jitted-\d+-\d+\.so$", re.A)
_KERNEL_MOD = re.compile(r"^\[|vmlinux$")
# Bracketed maps of user space: their frames run in user mode (kind native), though FlameGraph's
# --kernel marks them _[k] as it does every bracketed module.
_USER_MAPS = frozenset(("[vdso]", "[vsyscall]", "[vvar]", "[heap]", "[stack]", "[anon]"))
# Sniffing: a frame line proper (hex address, symbol, module in parentheses).
_SNIFF_FRAME = re.compile(r"\s*[0-9a-fA-F]+\s+\S.* \(.*\)\s*$", re.A)
_SIDE_BAND = re.compile(r"PERF_RECORD_(\w+)(.*)$")


# The regexes above backtrack in time quadratic in a line's length on some hostile lines (many " (" and
# no ")" after them; a long blank run). These give the same matches in bounded time:
def _frame_match(line: str):
    """_FRAME.match(line): only when a ")" follows a " (", and only up to the last ")"."""
    end = line.rfind(")")
    return _FRAME.match(line, 0, end + 1) if end > 0 and line.rfind(" (", 0, end) >= 0 else None


def _header_match(line: str):
    """_HEADER.match(line) within the first 512 characters (comm is at most 16, then pid/tid)."""
    return _HEADER.match(line, 0, 512)


def _sniff_frame_match(line: str):
    """_SNIFF_FRAME.match(line): only when the line ends with ")" and has a " (" before it."""
    body = line.rstrip(" \t\n\r\x0b\x0c")   # ASCII blanks, as \s with re.A
    return _SNIFF_FRAME.match(line) if body.endswith(")") and body.rfind(" (", 0, len(body) - 1) >= 0 else None
_CPU_EVENTS = ("cpu-clock", "task-clock")
_NAN = float("nan")
_MAX_WARNINGS = 5
MAX_PERIOD = 1 << 53   # a record's period, at most (a weight; never repeated into samples)


def sniff(head: bytes) -> bool:
    try:
        text = decode(head)
    except UnicodeDecodeError:
        return False
    lines = text.split("\n")[:200]
    if len(lines) > 1 and not text.endswith("\n"):
        lines = lines[:-1]  # the head may cut the last line
    after_header = False
    seen_header = False
    for line in lines:
        line = line.rstrip("\r")
        if line.startswith("#"):
            continue
        if not line.strip():
            after_header = False
            continue
        if _sniff_frame_match(line) and not line[:1].isspace() and not after_header:
            return False  # column-0 frames are only valid right after a header
        if after_header and _sniff_frame_match(line):
            return True
        if _header_match(line) and ":" in line:
            seen_header = after_header = True
            continue
        if not seen_header:
            return False
        after_header = False
    return False


def _tidy(func: str) -> str:
    """stackcollapse-perf's generic tidy: ';' -> ':', drop argument lists (not Go methods), quotes."""
    if ";" in func:
        func = func.replace(";", ":")
    if "(" in func and not _GO_METHOD.search(func):
        func = _PAREN.sub("", func, count=1)
    if '"' in func or "'" in func:
        func = func.replace('"', "").replace("'", "")
    return func


class _Opts:
    __slots__ = ("kernel", "jit", "addrs", "python_names", "native_names")

    def __init__(self, kernel, jit, addrs, python_names, native_names=False):
        self.kernel, self.jit, self.addrs, self.python_names = kernel, jit, addrs, python_names
        self.native_names = native_names


def _native(pc: str, rawfunc: str, mod: str) -> tuple[str, str, str]:
    """A C/C++ frame named as every backend names it (native_names.py); perf prints a library's
    addresses relative to it, so an unnamed one is ``lib.so+0xOFFSET``."""
    if rawfunc == "[unknown]" and mod.startswith("/") and not mod.startswith("//"):
        try:
            return native_names.unresolved(mod, int(pc, 16)), mod, "native"
        except ValueError:
            pass
    return native_names.name(rawfunc).replace(";", ":"), mod, "native"


def _frame_parts(pc: str, rawfunc: str, mod: str, java: bool, o: _Opts) -> list[tuple[str, str, str]]:
    """(name, file, kind) for each frame one perf frame line gives, in stackcollapse's order."""
    rawfunc = _OFFSET.sub("", rawfunc, count=1)
    if rawfunc.startswith("("):
        return []  # stackcollapse skips these (process names)
    parts = rawfunc.split("->")
    while parts and parts[-1] == "":  # Perl's split drops trailing empty fields
        parts.pop()
    kernel_mod = bool(_KERNEL_MOD.search(mod)) and "unknown" not in mod
    jit_mod = bool(_JIT_MAP.search(mod))
    if o.native_names and not kernel_mod and not jit_mod and mod != "[unknown]" \
            and not (rawfunc.startswith("py::") and _JITTED_SO.search(mod)):
        return [_native(pc, rawfunc, mod)]
    out = []
    for i, func in enumerate(parts):
        if func == "[unknown]":
            base = mod.rsplit("/", 1)[-1] if mod != "[unknown]" else "unknown"
            func = f"[{base} <{pc}>]" if o.addrs else f"[{base}]"
        func = _tidy(func)
        if java and "/" in func and func.startswith("L"):
            func = func[1:]
        kind = "kernel" if kernel_mod and mod not in _USER_MAPS else (
            "other" if jit_mod or mod == "[unknown]" else "native")
        file = mod
        if o.python_names and func.startswith("py::") and (jit_mod or _JITTED_SO.search(mod)):
            qual, _, pyfile = func[4:].partition(":")
            out.append((qual, pyfile, "python"))
            continue
        if i:
            if "_[i]" not in func:
                func += "_[i]"
        elif o.kernel and kernel_mod:
            func += "_[k]"
        elif o.jit and jit_mod and "_[j]" not in func:
            func += "_[j]"
        out.append((func, file, kind))
    return out


def _text(data: bytes) -> str:
    if data[:2] in (b"\xff\xfe", b"\xfe\xff") or data[:3] == b"\xef\xbb\xbf":
        return decode(data)
    try:
        return data.decode("utf-8")  # fast path; decode() keeps undecodable bytes
    except UnicodeDecodeError:
        return decode(data)


class Sample(NamedTuple):
    """One event record: its header's fields and its frames."""
    pname: str          # FlameGraph's root frame: comm, comm-PID or comm-PID/TID
    thread: str         # the thread's label
    comm: str
    pid: int | None     # None when perf printed one number (the TID)
    tid: int
    period: int         # 1 when perf printed none or 0
    explicit_period: bool
    time: float         # NaN when perf printed none
    event: str | None
    trace: str          # what a tracepoint printed after its name ("" for other events)
    leaf_first: tuple   # frame ids, leaf first
    closed: bool        # a blank line ended it (False: the input ended first)


def _thread_name(comm: str, pid: int | None, tid: int) -> str:
    return f"{comm}-{'?' if pid is None else pid}/{tid}"


def _thread_label(comm: str, pid: int | None, tid: int) -> str:
    return thread_label(tid, comm)


# thread_labels option -> how a thread is labelled: as stackcollapse-perf.pl does, or as profmagic's
# other backends do (so that a perf profile's threads match the kernel's by label too).
THREAD_LABELS = {"perf": _thread_name, "threads": _thread_label}


class Parser:
    """``perf script`` text -> ``Sample`` and ``SideBand`` records, as stackcollapse-perf.pl reads it.

    Frames are interned through ``frame_id`` (a ``StackBuilder.frame``). Records of one event are
    yielded (``event_filter``, else the first event seen), as FlameGraph keeps them; with
    ``all_events`` every event is, tracepoint text is kept in ``Sample.trace`` and ``PERF_RECORD_*``
    lines become ``SideBand`` records instead of headers. After iteration, the counters
    (``events_seen``, ``skipped``, ``orphans``, ``warnings``, ``first_header``) describe the input.
    """

    def __init__(self, text: str, frame_id, opts: _Opts, source: str = "<input>", pid: bool = False,
                 tid: bool = False, event_filter: str | None = None, strict: bool = False,
                 all_events: bool = False, thread_name=_thread_name):
        self.text, self.frame_id, self.o, self.source = text, frame_id, opts, source
        self.pid, self.tid, self.strict, self.all_events = pid, tid, strict, all_events
        self.thread_name = thread_name
        self.event = event_filter or ""
        self.events_seen: dict[str, int] = {}
        self.skipped = self.orphans = 0
        self.first_header: int | None = None
        self.warnings: list[str] = []
        self._who: dict[tuple, tuple] = {}
        # line text -> [fids (non-Java root), fids (Java root, filled lazily), regex groups]
        self._lines: dict[str, list] = {}
        # frame block text (all lines of a record after its header) -> [fids, Java fids, line
        # entries], or False when the block holds anything but frame lines
        self._blocks: dict[str, list | bool] = {}

    # -- one line at a time ----------------------------------------------------------------
    def _whose(self, groups: tuple) -> tuple:
        """(pname, is_java, thread, comm, pid, tid) of a header's (comm, number, number)."""
        w = self._who.get(groups)
        if w is None:
            comm, n1, n2 = groups
            if n2 and n2 != "0":
                p, t = int(n1), int(n2)
            else:
                p, t = None, int(n1)  # one number is the TID (stackcollapse: PID "?")
            ptxt = "?" if p is None else p
            pname = f"{comm}-{ptxt}/{t}" if self.tid else f"{comm}-{ptxt}" if self.pid else comm
            if " " in pname:
                pname = pname.replace(" ", "_")
            w = self._who[groups] = (pname, pname.startswith("java"), self.thread_name(comm, p, t), comm, p, t)
        return w

    def _header(self, line: str, m, lineno: int | None):
        """(pname, is_java, fields) of an event header; None when its event is filtered out.
        fields: thread, comm, pid, tid, period, explicit period, time, event, trace."""
        period_text, ev, trace = "", None, ""
        e = _EVENT.search(line)
        if e is None and self.all_events:
            e = _EVENT_TRACE.search(line)
        if e is not None:
            period_text, ev = e.group(1, 2)
            if e.re is _EVENT_TRACE:
                trace = e.group(3)
            self.events_seen[ev] = self.events_seen.get(ev, 0) + 1
            if ev != self.event and not self.all_events:
                if self.event:
                    return None  # another event: skipped with its frames
                self.event = ev
        if self.first_header is None:
            self.first_header = lineno
        explicit = bool(period_text) and period_text != "0"
        if explicit and (len(period_text) > 16 or int(period_text) > MAX_PERIOD):
            raise ProfileFormatError(f"a period of {period_text[:40]}{'...' if len(period_text) > 40 else ''}; at "
                                     f"most 2**53 ({MAX_PERIOD:,}, the period limit)", source=self.source, line=lineno)
        tm = _TIME.match(line, m.end())
        w = self._whose(m.group(1, 2, 3))
        return w[0], w[1], (w[2], w[3], w[4], w[5], int(period_text) if explicit else 1, explicit,
                            float(tm.group(1)) if tm is not None else _NAN, ev, trace)

    def _side_band(self, line: str, m):
        """A SideBand for a ``PERF_RECORD_*`` line (only with ``all_events``), else None."""
        if not self.all_events:
            return None
        k = _SIDE_BAND.search(line, m.end())
        if k is None:
            return None
        tm = _TIME.match(line, m.end())
        w = self._whose(m.group(1, 2, 3))
        return SideBand(w[2], w[3], w[4], w[5], float(tm.group(1)) if tm is not None else _NAN, k.group(1),
                        k.group(2).lstrip(": ").strip())

    def _odd_line(self, lineno: int, line: str, why: str) -> None:
        if self.strict:
            raise ProfileFormatError(f"{why}, got {line[:200]!r}", source=self.source, line=lineno)
        self.skipped += 1
        if len(self.warnings) < _MAX_WARNINGS:
            self.warnings.append(f"line {lineno}: {why}, got {line[:120]!r}")

    def _line_entry(self, line: str):
        """The cache entry of a frame line, or None when the line is not one."""
        entry = self._lines.get(line)
        if entry is None:
            if _header_match(line) is not None:
                return None
            f = _frame_match(line)
            if f is None:
                return None
            groups = f.group(1, 2, 3)
            entry = self._lines[line] = [_frame_fids(groups, False, self.o, self.frame_id), None, groups]
        return entry

    def _java(self, entry) -> list:
        if entry[1] is None:
            entry[1] = _frame_fids(entry[2], True, self.o, self.frame_id)
        return entry[1]

    def _block(self, block: str):
        """[leaf-first fids, Java fids or None, line entries] when every line is a frame line."""
        entries = []
        for line in block.split("\n"):
            if not line or line[0] == "#":
                return False
            e = self._line_entry(line)
            if e is None:
                return False
            entries.append(e)
        return [tuple(f for e in entries for f in e[0]), None, entries]

    def _block_fids(self, blk, is_java: bool) -> tuple:
        if not is_java:
            return blk[0]
        if blk[1] is None:
            blk[1] = tuple(f for e in blk[2] for f in self._java(e))
        return blk[1]

    # -- the whole text ----------------------------------------------------------------------
    def records(self):
        """Every record in input order. Every blank line ends a record, so the text between blank
        lines (a chunk) is read on its own: a chunk that is one header and a block of frame lines
        seen before costs one regex and one dict lookup; others go line by line (``_chunk``)."""
        text = self.text
        chunks = text.split("\n\n")
        last = len(chunks) - 1
        counted = [0, 0]  # line numbers are counted only when needed: [chunks counted, lines in them]

        def first_line_of(i: int) -> int:
            n, before = counted
            while n < i:
                before += chunks[n].count("\n") + 2
                n += 1
            counted[:] = [n, before]
            return before + 1

        header_match, blocks, no_frames = _header_match, self._blocks, ((), (), [])
        for i, chunk in enumerate(chunks):
            peeled = 0
            while self.all_events and chunk and chunk[0] not in "#\n":  # leading PERF_RECORD_* lines
                nl = chunk.find("\n")
                m = header_match(chunk if nl < 0 else chunk[:nl])
                sb = self._side_band(chunk if nl < 0 else chunk[:nl], m) if m is not None else None
                if sb is None:
                    break
                yield sb
                chunk = "" if nl < 0 else chunk[nl + 1:]
                peeled += 1
            if peeled and not chunk:
                continue
            if i < last and chunk and chunk[0] != "#" and chunk[0] != "\n":
                nl = chunk.find("\n")
                head = chunk if nl < 0 else chunk[:nl]
                m = header_match(head)
                if m is not None:
                    if nl < 0:
                        blk = no_frames
                    else:
                        blk = blocks.get(chunk[nl + 1:])
                        if blk is None:
                            blk = blocks[chunk[nl + 1:]] = self._block(chunk[nl + 1:])
                    if blk is not False:
                        # (the line number only matters for the first header)
                        h = self._header(head, m, i if self.first_header is not None else first_line_of(i))
                        if h is not None:
                            pname, is_java, f = h
                            yield Sample(pname, *f, self._block_fids(blk, is_java), True)
                        continue
            lines = chunk.split("\n")
            if i == last and text.endswith("\n"):
                lines.pop()  # the final newline does not make an empty line
            if i == last:  # one C-level count instead of one per chunk
                before = text.count("\n") - chunk.count("\n")
            else:
                before = first_line_of(i) - 1 + peeled
            yield from self._chunk(lines, before, i < last)

    def _chunk(self, lines: list[str], lineno: int, closed: bool):
        """Line by line, exactly as stackcollapse-perf's main loop; ``closed``: a blank line follows."""
        pname = cur = None
        is_java = rec_open = False
        stack: list[int] = []
        for line in lines + [""] if closed else lines:
            lineno += 1
            if not line:
                if pname is not None:
                    yield Sample(pname, *cur, tuple(stack), True)
                    pname = None
                stack = []
                rec_open = False
                continue
            if line[0] == "#":
                continue
            m = _header_match(line)
            if m is not None:
                sb = self._side_band(line, m)
                if sb is not None:
                    yield sb
                    continue
                rec_open = True
                h = self._header(line, m, lineno)
                if h is not None:
                    pname, is_java, cur = h
                continue
            e = self._line_entry(line)
            if e is not None:
                if pname is not None:
                    stack.extend(self._java(e) if is_java else e[0])
                elif not rec_open:
                    self.orphans += 1
                    self._odd_line(lineno, line, "expected an event header before this frame line")
                continue
            self._odd_line(lineno, line, "expected an event header ('comm pid [cpu] time: period event:'), "
                           "a frame line ('addr symbol (module)'), a blank line or a '#' comment")
        if pname is not None:  # a record that no blank line closed at the end of the input
            yield Sample(pname, *cur, tuple(stack), False)


READ_DEFAULTS = dict(pid=False, tid=False, kernel=False, jit=False, addrs=False, event_filter=None,
                     keep_unterminated=True, strict=False, python_names=True, thread_labels="perf",
                     native_names=False)


def read(data: bytes, source: str = "<input>", pid: bool = False, tid: bool = False,
         kernel: bool = False, jit: bool = False, all: bool = False, addrs: bool = False,
         event_filter: str | None = None, keep_unterminated: bool = True, strict: bool = False,
         python_names: bool = True, thread_labels: str = "perf", native_names: bool = False,
         meta: dict | None = None) -> Profile:
    """Read ``perf script`` text. Options mirror stackcollapse-perf.pl (``all`` = kernel + jit);
    see the module docstring for ``keep_unterminated``, ``strict`` and ``python_names``.
    ``native_names``: C/C++ frames named as every backend names them (formats/native_names.py)
    instead of stackcollapse's tidy (which cuts a template's arguments at their first ``(``).
    ``thread_labels``: "perf" (comm-PID/TID) or "threads" (``Thread <tid> "<comm>"``); ``meta`` is
    added to the profile's meta."""
    if thread_labels not in THREAD_LABELS:
        raise ValueError(f"thread_labels must be one of {', '.join(THREAD_LABELS)}, not {thread_labels!r}")
    thread_name = THREAD_LABELS[thread_labels]
    options = {k: v for k, v in dict(pid=pid, tid=tid, kernel=kernel, jit=jit, addrs=addrs, event_filter=event_filter,
                                       keep_unterminated=keep_unterminated, strict=strict, python_names=python_names,
                                       thread_labels=thread_labels, native_names=native_names).items()
               if v != READ_DEFAULTS[k]}
    if all:
        kernel = jit = True
    text = _text(data)
    if "\r\n" in text[:65536]:
        text = text.replace("\r\n", "\n")
    b = StackBuilder()
    from . import perf_pyframes, perf_sched
    text, pysection = perf_pyframes.split(text)   # Python stacks the recorder polled (perf_pyframes.py)
    sched = perf_sched.is_sched(text)
    names: dict[int, str] = {}  # frame id -> name, for the sched reader

    def frame(name, file=None, line=None, kind="other"):
        fid = b.frame(name, file, line, kind)
        names[fid] = name
        return fid

    parser = Parser(text, frame if sched else b.frame, _Opts(kernel, jit, addrs, python_names, native_names),
                    source=source,
                    pid=pid, tid=tid, event_filter=event_filter, strict=strict, thread_name=thread_name,
                    all_events=sched)
    records = list(parser.records())
    if pysection is not None:
        records, py_meta = perf_pyframes.splice(text, pysection, records, b, frame, source)
        meta = {**(meta or {}), "python_names": py_meta}
    if sched:  # context switches: wall and CPU time (formats/perf_sched.py)
        base = {"format": NAME, "backend": "perf", "source": source, "events_seen": parser.events_seen,
                "records": sum(isinstance(r, Sample) for r in records), "folded_thread_roots": False,
                "skipped_lines": parser.skipped, **({"warnings": parser.warnings} if parser.warnings else {})}
        kept = [r for r in records if not isinstance(r, Sample) or r.closed]
        return perf_sched.read(text, kept, b, data, source, _Rows(b, kept), thread_name, names,
                               {**base, **(meta or {})}, options)
    kept = [r for r in records if r.closed or keep_unterminated]
    if not kept:
        _no_samples(text, parser, source)
    unterminated = ("kept" if keep_unterminated else "dropped") if not records[-1].closed else None
    return _collapse(b, kept, parser, data, source, options, unterminated, meta)


def _no_samples(text: str, parser: Parser, source: str):
    if parser.first_header is None:
        raise ProfileFormatError(
            "no perf script samples: expected event header lines such as "
            "'comm pid [cpu] time: period event:' followed by frame lines", source=source,
            line=text.count("\n") + 1 if text else None)
    raise ProfileFormatError(
        f"no complete perf script sample (first event header at line {parser.first_header}); "
        "expected records ended by a blank line", source=source, line=parser.first_header)


class _Rows:
    """A record's stack row: FlameGraph's root frame, then its frames root first. Rows are cached by
    the identity of the record's frame tuple (the parser reuses one per frame block), kept alive here.

    A thread is one row of the thread table, labelled and named by the last of ``records`` with its
    tid: a thread that execs (comm "python", then "sleep") is one thread, named after the exec."""

    def __init__(self, b: StackBuilder, records: list):
        self.b, self.roots, self.rows = b, {}, {}
        self.last = {r.tid: (r.thread, r.comm) for r in records}

    def __call__(self, r: Sample) -> int:
        hit = self.rows.get((r.thread, r.pname, id(r.leaf_first)))
        if hit is None:
            thread, comm = self.last.get(r.tid, (r.thread, r.comm))
            self.b.thread(thread, tid=r.tid, pid=r.pid, name=comm)
            rid = self.roots.get(r.pname)
            if rid is None:
                rid = self.roots[r.pname] = self.b.frame(r.pname, None, None, "other")
            hit = self.rows[(r.thread, r.pname, id(r.leaf_first))] = (
                r.leaf_first, self.b.stack(thread, (rid,) + r.leaf_first[::-1]))
        return hit[1]


def _collapse(b: StackBuilder, records: list[Sample], parser: Parser, data: bytes, source: str,
              options: dict, unterminated: str | None, extra_meta: dict | None) -> Profile:
    """Records of one event -> Profile: samples weigh their periods as FlameGraph sums them;
    ``cpu-clock``/``task-clock`` records that all printed their period also give CPU seconds."""
    n = len(records)
    row_of = _Rows(b, records)
    sid = np.fromiter((row_of(r) for r in records), dtype=np.int64, count=n)
    periods = np.fromiter((r.period for r in records), dtype=np.int64, count=n)
    times = np.fromiter((r.time for r in records), dtype=np.float64, count=n)
    event = parser.event
    use_cpu = event in _CPU_EVENTS and all(r.explicit_period for r in records)
    any_time = bool(np.isfinite(times).any())
    meta = {
        "format": NAME, "backend": "perf", "source": source, "event": event,
        "events_seen": parser.events_seen, "records": n,
        "samples_are": ("records; the period sum is in 'period' and cpu" if use_cpu
                        else "sum of event periods (as stackcollapse-perf.pl)"),
        "folded_thread_roots": False, "skipped_lines": parser.skipped,
        "unterminated_record": unterminated,
        "options": {k: v for k, v in options.items() if k in ("pid", "tid", "kernel", "jit", "addrs")},
    }
    if parser.warnings:
        meta["warnings"] = parser.warnings
    if parser.orphans:
        meta["orphan_frame_lines"] = parser.orphans
    t = np.sort(times[np.isfinite(times)])
    if len(t) > 1:
        meta["duration"] = float(t[-1] - t[0])
    meta.update(extra_meta or {})
    # Time-ordered samples (when perf printed times), each with its comm, pid, tid and period.
    idx = np.argsort(times, kind="stable") if any_time else np.arange(n)
    sid, periods = sid[idx], periods[idx]
    columns = None
    if any_time:
        ordered = [records[i] for i in idx]
        columns = {"comm": pd.Series([r.comm for r in ordered], dtype=object),
                   "pid": pd.array([r.pid for r in ordered], dtype="Int64"),
                   "tid": np.fromiter((r.tid for r in ordered), dtype=np.int64, count=n),
                   "period": periods,
                   "samples": np.ones(n, dtype=np.int64) if use_cpu else periods}
    time = times[idx] if any_time else None
    if use_cpu:
        # Clock events: samples counts records; the period (ns) is kept beside it and becomes cpu seconds.
        b.add_samples(sid, time=time, columns=columns, period=periods, cpu=periods * 1e-9)
    else:
        b.add_samples(sid, time=time, samples=periods, columns=columns)
    return b.build(metric="cpu" if use_cpu else "samples", meta=meta, raw=Raw(data, NAME, options=options))


def _frame_fids(groups, java: bool, o: _Opts, frame_id) -> list[int]:
    pc, rawfunc, mod = groups
    parts = _frame_parts(pc, rawfunc, mod, java, o)
    return [frame_id(name, file, None, kind) for name, file, kind in reversed(parts)]

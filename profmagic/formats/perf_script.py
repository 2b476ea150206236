"""``perf script`` text -> Profile, folded exactly as FlameGraph's ``stackcollapse-perf.pl`` does.

Rules (FlameGraph at 41fee1f; see shared/corpus/flamegraph/PARSING-RULES.md):

* A record is an event header (``comm [pid/]tid [cpu] time: [period] event:``; the timestamp and
  cpu may be missing) followed by frame lines (``addr symbol (module)``, leaf first, indented or
  at column 0). A blank line ends it. ``#`` lines are skipped anywhere.
* Only records of one event are kept: ``event_filter``, or else the first event seen.
* The weight of a record is its period (missing or 0 means 1), as FlameGraph sums it.
* Each stack starts with FlameGraph's root frame: ``comm``, ``comm-PID`` (``pid=True``) or
  ``comm-PID/TID`` (``tid=True``), with spaces turned into ``_``; ``meta["folded_thread_roots"]``
  is False so ``to_folded()`` adds no thread names of its own. The ``thread`` column is always
  per thread (``comm-PID/TID``; PID is ``?`` when perf printed one number).
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

import numpy as np
import pandas as pd

from ..errors import ProfileFormatError
from ..profile import Profile, Raw, StackBuilder
from .folded import decode

NAME = "perf_script"

# The regexes of stackcollapse-perf.pl; possessive quantifiers replace its nested ones
# ((\d+)* after \d+), which give the same matches without exponential backtracking.
_HEADER = re.compile(r"(\S.+?)\s+(\d++)/*+(\d*+)\s+", re.A)
_EVENT = re.compile(r":\s*(\d*+)\s+(\S+):\s*$", re.A)
_FRAME = re.compile(r"\s*(\w+)\s*(.+) \((.*)\)", re.A)
_TIME = re.compile(r"(?:\[\d+\]\s+)?(\d+\.\d+):", re.A)
_OFFSET = re.compile(r"\+0x[\da-f]+$", re.A)
_GO_METHOD = re.compile(r"\.\(.*\)\.")
_PAREN = re.compile(r"\((?!anonymous namespace\)).*")
_JIT_MAP = re.compile(r"/tmp/perf-\d+\.map", re.A)
# perf inject --jit writes Python 3.13's perf_jit code into these; frames there are named py::func:file too.
_JITTED_SO = re.compile(r"/jitted-\d+-\d+\.so$", re.A)
_KERNEL_MOD = re.compile(r"^\[|vmlinux$")
# Sniffing: a frame line proper (hex address, symbol, module in parentheses).
_SNIFF_FRAME = re.compile(r"\s*[0-9a-fA-F]+\s+\S.* \(.*\)\s*$", re.A)


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
_MAX_WARNINGS = 5


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
    __slots__ = ("kernel", "jit", "addrs", "python_names")

    def __init__(self, kernel, jit, addrs, python_names):
        self.kernel, self.jit, self.addrs, self.python_names = kernel, jit, addrs, python_names


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
    out = []
    for i, func in enumerate(parts):
        if func == "[unknown]":
            base = mod.rsplit("/", 1)[-1] if mod != "[unknown]" else "unknown"
            func = f"[{base} <{pc}>]" if o.addrs else f"[{base}]"
        func = _tidy(func)
        if java and "/" in func and func.startswith("L"):
            func = func[1:]
        kind = "kernel" if kernel_mod else ("other" if jit_mod or mod == "[unknown]" else "native")
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


def read(data: bytes, source: str = "<input>", pid: bool = False, tid: bool = False,
         kernel: bool = False, jit: bool = False, all: bool = False, addrs: bool = False,
         event_filter: str | None = None, keep_unterminated: bool = True, strict: bool = False,
         python_names: bool = True) -> Profile:
    """Read ``perf script`` text. Options mirror stackcollapse-perf.pl (``all`` = kernel + jit);
    see the module docstring for ``keep_unterminated``, ``strict`` and ``python_names``."""
    if all:
        kernel = jit = True
    o = _Opts(kernel, jit, addrs, python_names)
    text = _text(data)
    if "\r\n" in text[:65536]:
        text = text.replace("\r\n", "\n")

    b = StackBuilder()
    frame_id = b.frame
    root_ids: dict[str, int] = {}
    # line text -> [fids (non-Java root), fids (Java root, filled lazily), regex groups]
    line_cache: dict[str, list] = {}
    # frame block text (all lines of a record after its header) -> same, or False when the
    # block holds anything but frame lines
    block_cache: dict[str, list | bool] = {}
    no_frames = [(), (), [], {}]  # the block entry of a header with no frame lines
    sid_of: dict[tuple, int] = {}
    s_time: list[float] = []
    s_sid: list[int] = []
    s_comm: list[str] = []
    s_pid: list[int | None] = []
    s_tid: list[int] = []
    s_period: list[int] = []

    header_match = _header_match
    event_search = _EVENT.search
    frame_match = _frame_match
    time_match = _TIME.match
    nan = float("nan")

    st = {"event": event_filter or "", "explicit_period": True, "any_time": False, "skipped": 0,
          "first_header": None, "orphans": 0}
    events_seen: dict[str, int] = {}
    warnings: list[str] = []
    # (comm, number, number) of a header -> (pname, is_java, thread, comm, pid, tid)
    who_cache: dict[tuple, tuple] = {}

    def who(groups: tuple) -> tuple:
        comm, n1, n2 = groups
        if n2 and n2 != "0":
            p, t = n1, n2
        else:
            p, t = None, n1  # one number is the TID (stackcollapse: PID "?")
        ptxt = "?" if p is None else p
        if tid:
            pname = f"{comm}-{ptxt}/{t}"
        elif pid:
            pname = f"{comm}-{ptxt}"
        else:
            pname = comm
        if " " in pname:
            pname = pname.replace(" ", "_")
        w = who_cache[groups] = (pname, pname.startswith("java"), f"{comm}-{ptxt}/{t}", comm,
                                 None if p is None else int(p), int(t))
        return w

    def header(line: str, m, lineno: int):
        """(pname, is_java, record fields) for an event header line; None when filtered out."""
        period_text = ""
        e = event_search(line)
        if e is not None:
            period_text, ev = e.group(1, 2)
            n = events_seen.get(ev)
            events_seen[ev] = 1 if n is None else n + 1
            if ev != st["event"]:
                if st["event"]:
                    return None  # another event: skipped with its frames
                st["event"] = ev
        if st["first_header"] is None:
            st["first_header"] = lineno
        if not period_text or period_text == "0":
            period = 1
            st["explicit_period"] = False
        else:
            period = int(period_text)
        tm = time_match(line, m.end())
        if tm is not None:
            time = float(tm.group(1))
            st["any_time"] = True
        else:
            time = nan
        groups = m.group(1, 2, 3)
        w = who_cache.get(groups) or who(groups)
        return w[0], w[1], (w[2], w[3], w[4], w[5], period, time)

    def record_sid(pname: str, thread: str, leaf_first: tuple) -> int:
        # leaf_first: frame ids leaf first, each line's own frames reversed (see _frame_fids)
        key = (thread, pname, leaf_first)
        sid = sid_of.get(key)
        if sid is None:
            rid = root_ids.get(pname)
            if rid is None:
                rid = root_ids[pname] = frame_id(pname, None, None, "other")
            frames = [rid]
            frames.extend(reversed(leaf_first))
            sid = sid_of[key] = b.stack(thread, frames)
        return sid

    def close_record(pname: str, cur: tuple, leaf_first: tuple):
        s_sid.append(record_sid(pname, cur[0], leaf_first))
        s_comm.append(cur[1])
        s_pid.append(cur[2])
        s_tid.append(cur[3])
        s_period.append(cur[4])
        s_time.append(cur[5])

    def odd_line(lineno: int, line: str, why: str):
        if strict:
            raise ProfileFormatError(f"{why}, got {line[:200]!r}", source=source, line=lineno)
        st["skipped"] += 1
        if len(warnings) < _MAX_WARNINGS:
            warnings.append(f"line {lineno}: {why}, got {line[:120]!r}")

    def frame_entry(line: str):
        """The cache entry of a frame line, or None when the line is not one."""
        entry = line_cache.get(line)
        if entry is None:
            if header_match(line) is not None:
                return None
            f = frame_match(line)
            if f is None:
                return None
            entry = [None, None, f.group(1, 2, 3)]
            entry[0] = _frame_fids(entry[2], False, o, frame_id)
            line_cache[line] = entry
        return entry

    def block_entry(block: str):
        """[leaf-first fids (non-Java), (Java) or None, lines] when every line is a frame line."""
        lines = block.split("\n")
        entries = []
        for line in lines:
            if not line or line[0] == "#":
                return False
            e = frame_entry(line)
            if e is None:
                return False
            entries.append(e)
        fids = []
        for e in entries:
            fids.extend(e[0])
        return [tuple(fids), None, entries, {}]

    def java_fids(entry) -> tuple:
        fids = []
        for e in entry[2]:
            if e[1] is None:
                e[1] = _frame_fids(e[2], True, o, frame_id)
            fids.extend(e[1])
        entry[1] = tuple(fids)
        return entry[1]

    def slow_chunk(lines: list[str], lineno: int, closed: bool):
        """Line by line, exactly as stackcollapse-perf's main loop; ``closed``: a blank line follows."""
        pname = None
        is_java = False
        rec_open = False
        stack: list[int] = []
        cur = None
        if closed:
            lines = lines + [""]
        for line in lines:
            lineno += 1
            if not line:
                if pname is not None:
                    close_record(pname, cur, tuple(stack))
                    pname = None
                stack = []
                rec_open = False
                continue
            if line[0] == "#":
                continue
            m = header_match(line)
            if m is not None:
                rec_open = True
                h = header(line, m, lineno)
                if h is not None:
                    pname, is_java, cur = h
                continue
            e = frame_entry(line)
            if e is not None:
                if pname is not None:
                    if is_java:
                        if e[1] is None:
                            e[1] = _frame_fids(e[2], True, o, frame_id)
                        stack.extend(e[1])
                    else:
                        stack.extend(e[0])
                elif not rec_open:
                    st["orphans"] += 1
                    odd_line(lineno, line, "expected an event header before this frame line")
                continue
            odd_line(lineno, line, "expected an event header ('comm pid [cpu] time: period event:'), "
                     "a frame line ('addr symbol (module)'), a blank line or a '#' comment")
        if pname is None:
            return False
        if keep_unterminated:  # a record that no blank line closed at the end of the input
            close_record(pname, cur, tuple(stack))
        return True

    # Every blank line ends a record, so the text between blank lines ("chunks") can be read
    # independently. A chunk that is one header and a block of frame lines seen before takes
    # the fast path: one regex for the header and one dict lookup for the whole stack.
    chunks = text.split("\n\n")
    last = len(chunks) - 1
    counted = [0, 0]  # line numbers are counted only when needed: [chunks counted, lines in them]

    def first_line_of(i: int) -> int:
        n, lines_before = counted
        while n < i:
            lines_before += chunks[n].count("\n") + 2
            n += 1
        counted[:] = [n, lines_before]
        return lines_before + 1

    unterminated = False
    for i, chunk in enumerate(chunks):
        if i < last and chunk and chunk[0] != "#" and chunk[0] != "\n":
            nl = chunk.find("\n")
            head = chunk if nl < 0 else chunk[:nl]
            m = header_match(head)
            if m is not None:
                if nl < 0:
                    blk = no_frames
                else:
                    blk = block_cache.get(chunk[nl + 1:])
                    if blk is None:
                        blk = block_cache[chunk[nl + 1:]] = block_entry(chunk[nl + 1:])
                if blk is not False:
                    # (the line number only matters for the first header)
                    h = header(head, m, i if st["first_header"] is not None else first_line_of(i))
                    if h is None:
                        continue
                    pname, is_java, cur = h
                    # the row of this (thread, root, block), cached on the block entry
                    sid = blk[3].get((cur[0], pname))
                    if sid is None:
                        sid = blk[3][(cur[0], pname)] = record_sid(
                            pname, cur[0], (blk[1] or java_fids(blk)) if is_java else blk[0])
                    s_sid.append(sid)
                    s_comm.append(cur[1])
                    s_pid.append(cur[2])
                    s_tid.append(cur[3])
                    s_period.append(cur[4])
                    s_time.append(cur[5])
                    continue
        lines = chunk.split("\n")
        if i == last and text.endswith("\n"):
            lines.pop()  # the final newline does not make an empty line
        if i == last:  # one C-level count instead of one per chunk
            before = text.count("\n") - chunk.count("\n")
        else:
            before = first_line_of(i) - 1
        unterminated = slow_chunk(lines, before, i < last)
    if not s_sid:
        if st["first_header"] is None:
            raise ProfileFormatError(
                "no perf script samples: expected event header lines such as "
                "'comm pid [cpu] time: period event:' followed by frame lines", source=source,
                line=text.count("\n") + 1 if text else None)
        raise ProfileFormatError(
            f"no complete perf script sample (first event header at line {st['first_header']}); "
            "expected records ended by a blank line", source=source, line=st["first_header"])

    event = st["event"]
    sids = np.asarray(s_sid, dtype=np.int64)
    periods = np.asarray(s_period, dtype=np.int64)
    nrows = len(b._stack_frames)
    per_stack = np.bincount(sids, weights=periods, minlength=nrows)
    use_cpu = event in _CPU_EVENTS and st["explicit_period"]
    if use_cpu:
        # Clock events: samples counts records; the period (ns) is kept beside it and becomes cpu seconds.
        counts = np.bincount(sids, minlength=nrows)
        for sid in range(nrows):
            w = int(per_stack[sid])
            b.add(sid, samples=int(counts[sid]), cpu=w * 1e-9, period=float(w))
    else:
        for sid in range(nrows):
            b.add(sid, samples=int(per_stack[sid]))

    meta = {
        "format": NAME, "backend": "perf", "source": source, "event": event,
        "events_seen": events_seen, "records": len(s_sid),
        "samples_are": ("records; the period sum is in 'period' and cpu" if use_cpu
                        else "sum of event periods (as stackcollapse-perf.pl)"),
        "folded_thread_roots": False, "skipped_lines": st["skipped"],
        "unterminated_record": ("kept" if keep_unterminated else "dropped") if unterminated else None,
        "options": {k: v for k, v in dict(pid=pid, tid=tid, kernel=kernel, jit=jit, addrs=addrs).items() if v},
    }
    if warnings:
        meta["warnings"] = warnings
    if st["orphans"]:
        meta["orphan_frame_lines"] = st["orphans"]
    prof = b.build(metric="cpu" if use_cpu else "samples", meta=meta, raw=Raw(data, NAME))
    if st["any_time"]:
        stacks = prof.stacks
        df = pd.DataFrame({
            "time": np.asarray(s_time, dtype=np.float64),
            "stack": sids,
            "thread": stacks["thread"].to_numpy()[sids],
            "comm": pd.Series(s_comm, dtype=object),
            "pid": pd.array(s_pid, dtype="Int64"),
            "tid": np.asarray(s_tid, dtype=np.int64),
            "period": periods,
            "samples": np.ones(len(periods), dtype=np.int64) if use_cpu else periods,
        })
        if use_cpu:
            df["cpu"] = periods * 1e-9
        if not df["time"].is_monotonic_increasing:
            df = df.sort_values("time", kind="stable", na_position="last").reset_index(drop=True)
        prof.samples = df
        t = df["time"].dropna()
        if len(t) > 1:
            prof.meta["duration"] = float(t.iloc[-1] - t.iloc[0])
    return prof


def _frame_fids(groups, java: bool, o: _Opts, frame_id) -> list[int]:
    pc, rawfunc, mod = groups
    parts = _frame_parts(pc, rawfunc, mod, java, o)
    return [frame_id(name, file, None, kind) for name, file, kind in reversed(parts)]

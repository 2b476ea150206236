"""SystemTap backtrace + count text -> Profile, as FlameGraph's ``stackcollapse-stap.pl`` reads it.

Input: the output of a script that prints ``print_ubacktrace()``/``print_backtrace()`` (or
``print_stack``/``print_ustack``) for each aggregated stack, followed by its count::

     0xffffffff8103ce3b : native_safe_halt+0xb/0x10 [kernel]
     0xffffffff8101c6a3 : default_idle+0x53/0x1d0 [kernel]
    	2404

Rules (stackcollapse-stap.pl at 41fee1f): a line of only digits (leading whitespace allowed) ends
the stack and is its count; counts of equal stacks add up. Blank lines are skipped. Any other line
is a frame, leaf first: leading whitespace removed, everything from the last ``+`` cut, everything
up to the last `` : `` cut; an empty name becomes ``-``. A count with no frames before it counts
for the empty stack.

Differences: FlameGraph prints each stack through ``printf`` with the stack as the format string,
so a ``%`` in a name corrupts its output; we keep names as they are. Frames left after the last
count belong to no count and are dropped, as FlameGraph does; we say so in ``meta["warnings"]``.
Input with no count line is an error. Frames whose line ends in ``[kernel]`` are ``kernel``
frames, others ``native``; the module in the trailing ``[...]`` is kept as the frame's file.
"""
from __future__ import annotations

import re

from ..errors import ProfileFormatError
from ..model import Profile, Raw, StackBuilder
from .folded import MAX_COUNT, decode
from .registry import Format

NAME = "stap"
FORMAT = Format(NAME, __name__, raw_suffix=".stap.txt", mime="text/plain")
_COUNT = re.compile(r"\s*(\d+)", re.A)  # fullmatch: stackcollapse-stap's ^\s*(\d+)+$
_BLANK = re.compile(r"\s*", re.A)
_OFFSET = re.compile(r"\+[^+]*$")
_ADDR = re.compile(r"^.* : ")  # anchored: unanchored, a long line without " : " takes quadratic time
_MODULE = re.compile(r"\[([^\[\]]+)\]\s*$")
# Sniffing: "0xADDR : symbol+off/size [module]" as print_backtrace/print_ubacktrace write them.
_SNIFF_FRAME = re.compile(r"\s*0x[0-9a-fA-F]+ :(?: |$)", re.A)


def sniff(head: bytes) -> bool:
    try:
        text = decode(head)
    except UnicodeDecodeError:
        return False
    lines = [ln.rstrip("\r") for ln in text.split("\n")[:200]]
    if len(lines) > 1 and not text.endswith("\n"):
        lines = lines[:-1]  # the head may cut the last line
    frames = counts = 0
    for ln in lines:
        if not ln.strip():
            continue
        if _SNIFF_FRAME.match(ln):
            frames += 1
        elif _COUNT.fullmatch(ln):
            if not frames:
                return False  # a count before any frame: not a backtrace dump
            counts += 1
        else:
            return False
    return frames > 0 and counts > 0


def _frame(line: str) -> tuple[str, str, str]:
    """(name, file, kind) of one frame line."""
    name = line.lstrip(" \t\n\r\f\v")
    name = _OFFSET.sub("", name, count=1)
    name = _ADDR.sub("", name, count=1)
    m = _MODULE.search(line)
    module = m.group(1) if m else ""
    return name or "-", module, "kernel" if module == "kernel" else "native"


def read(data: bytes, source: str = "<input>") -> Profile:
    text = decode(data)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    b = StackBuilder()
    thread = b.thread("all")
    frame_ids: dict[str, int] = {}
    stack: list[int] = []
    counts = 0
    last_count_line = 0
    for lineno, line in enumerate(lines, 1):
        m = _COUNT.fullmatch(line)
        if m:
            digits = m.group(1)
            if len(digits) > 16 or int(digits) > MAX_COUNT:
                raise ProfileFormatError(f"a count of {digits[:40]}{'...' if len(digits) > 40 else ''}; at most "
                                         f"2**53 ({MAX_COUNT:,}, the count limit)", source=source, line=lineno)
            b.add(b.stack(thread, tuple(reversed(stack))), samples=int(digits))
            stack = []
            counts += 1
            last_count_line = lineno
            continue
        if _BLANK.fullmatch(line):
            continue
        fid = frame_ids.get(line)
        if fid is None:
            name, file, kind = _frame(line)
            fid = frame_ids[line] = b.frame(name, file, None, kind)
        stack.append(fid)
    if not counts:
        raise ProfileFormatError(
            "no count line found; expected backtrace frame lines ('0xADDR : symbol+0xOFF/0xSIZE [module]') "
            "each stack followed by a line holding only its count", source=source, line=len(lines) or None)
    meta = {"format": NAME, "backend": "systemtap", "source": source, "stacks_read": counts,
            "folded_thread_roots": False}
    if stack:
        meta["warnings"] = [f"{len(stack)} frame line(s) after the last count (line {last_count_line}) "
                            "have no count and were dropped"]
    return b.build(metric="samples", meta=meta, raw=Raw(data, NAME))

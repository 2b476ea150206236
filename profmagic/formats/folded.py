"""Folded stacks (Brendan Gregg's ``a;b;c 42``): read and write.

Counts have no time unit, so they land in the ``samples`` metric. Lines are written in the
order stackcollapse prints them: sorted by the bytes of the stack.
"""
from __future__ import annotations

import re

from ..errors import ProfileFormatError
from ..profile import Profile, Raw, StackBuilder

NAME = "folded"
# As flamegraph.pl: the stack is everything before the last whitespace and the count.
_LINE = re.compile(r"^(.*)\s(\d+(?:\.\d*)?)$")
_PY_FRAME = re.compile(r"^.* \((.+\.pyx?):(\d+)\)$")


def decode(data: bytes) -> str:
    """Text with a UTF-16 (LE/BE) or UTF-8 BOM honoured; UTF-8 otherwise, undecodable bytes kept."""
    if data[:2] == b"\xff\xfe":
        return data[2:].decode("utf-16-le")
    if data[:2] == b"\xfe\xff":
        return data[2:].decode("utf-16-be")
    if data[:3] == b"\xef\xbb\xbf":
        data = data[3:]
    return data.decode("utf-8", errors="surrogateescape")


def sniff(head: bytes) -> bool:
    try:
        text = decode(head)
    except UnicodeDecodeError:
        return False
    lines = [ln.rstrip("\r") for ln in text.split("\n")[:20] if ln.strip()]
    if len(lines) > 1 and not text.endswith("\n"):
        lines = lines[:-1]  # the head may cut the last line
    return bool(lines) and all(_LINE.match(ln) for ln in lines)


def frame_kind(name: str) -> tuple[str, str | None, int | None]:
    """(kind, file, line) guessed from a folded frame name; the name itself is kept as is."""
    if name.endswith("_[k]"):
        return "kernel", None, None
    if name.endswith("_[j]"):
        return "other", None, None
    m = _PY_FRAME.match(name)
    if m:
        return "python", m.group(1), int(m.group(2))
    return "other", None, None


def read(data: bytes, source: str = "<input>", lenient: bool = False, thread: str = "all") -> Profile:
    text = decode(data)
    b = StackBuilder()
    b.thread(thread)
    frame_ids: dict[str, int] = {}
    skipped = 0
    any_float = False
    for lineno, line in enumerate(text.split("\n"), 1):
        line = line.rstrip("\r")
        if not line.strip():
            continue
        m = _LINE.match(line)
        if not m:
            if lenient:
                skipped += 1
                continue
            raise ProfileFormatError(
                f"expected 'frame;frame;... COUNT', got {line[:200]!r}", source=source, line=lineno)
        stack_text, count_text = m.groups()
        if "." in count_text:
            any_float = True
            count = float(count_text)
        else:
            count = int(count_text)
        fids = []
        if stack_text:
            for name in stack_text.split(";"):
                fid = frame_ids.get(name)
                if fid is None:
                    kind, file, ln = frame_kind(name)
                    fid = frame_ids[name] = b.frame(name, file, ln, kind)
                fids.append(fid)
        b.add(b.stack(thread, fids), samples=count)
    if not b._stack_frames:
        raise ProfileFormatError("no stacks found; expected lines of 'frame;frame;... COUNT'",
                                 source=source, offset=0)
    meta = {"format": NAME, "backend": "folded", "source": source, "skipped_lines": skipped}
    if any_float:
        meta["fractional_counts"] = True
    return b.build(metric="samples", meta=meta, raw=Raw(data, NAME))


def _clean(name: str) -> str:
    # ';' separates frames and a newline ends a line: as stackcollapse does, ';' becomes ':'.
    return name.replace(";", ":").replace("\n", " ").replace("\r", " ")


def _fmt(v: float) -> str:
    if float(v).is_integer():
        return str(int(v))
    return f"{v:.9g}"


def lines(profile: Profile, metric: str | None = None, thread_roots: bool | None = None) -> dict[str, float]:
    """Folded stack text -> weight. With several threads, each stack is rooted at its thread's name
    unless ``thread_roots`` is False."""
    metric = metric or profile.metric
    weights = profile.weights(metric).to_numpy()
    names = {fid: _clean(str(n)) for fid, n in profile.frames["name"].items()}
    if thread_roots is None:
        # Readers whose stacks already start with a process/thread frame (perf script) set this False.
        thread_roots = profile.meta.get("folded_thread_roots", len(profile.threads) > 1)
    out: dict[str, float] = {}
    for thread, stack, w in zip(profile.stacks["thread"], profile.stacks["stack"], weights):
        if w != w or w == 0:  # NaN or nothing
            continue
        parts = [names[f] for f in stack]
        if thread_roots:
            parts.insert(0, _clean(str(thread)))
        key = ";".join(parts)
        out[key] = out.get(key, 0) + w
    return out


def write_text(profile: Profile, metric: str | None = None, thread_roots: bool | None = None) -> str:
    agg = lines(profile, metric, thread_roots)
    keys = sorted(agg, key=lambda k: k.encode("utf-8", errors="surrogateescape"))
    return "".join(f"{k} {_fmt(agg[k])}\n" for k in keys)


def write(profile: Profile, metric: str | None = None) -> bytes:
    return write_text(profile, metric).encode("utf-8", errors="surrogateescape")

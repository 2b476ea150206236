"""One module per file format. Each has ``NAME``, ``FORMAT`` (its ``registry.Format``: suffixes, raw
suffix, MIME type), ``sniff(head: bytes) -> bool`` and ``read(data: bytes, source: str, **options) ->
Profile``; writers add ``write(profile) -> bytes``.

Sniffing order matters: the most specific formats come first.
"""
from __future__ import annotations

import glob as _glob
import importlib
import math
import os
import re
import stat

import numpy as np

from ..errors import ProfileFormatError
from ..model import METRICS, Profile, Raw
from .registry import Format

# Module names, most specific first. A format whose module is missing is skipped.
_ORDER = ("memray", "memsample", "container", "children", "gecko", "chrome_trace", "speedscope", "pyinstrument", "pstats",
          "eu_stack", "perf_script", "stap", "folded")
HEAD_BYTES = 64 * 1024      # what sniffing looks at...
LINE_BYTES = 4 << 20        # ...or up to the end of the first line, when that is longer (a deep stack)
MAX_BYTES = 2 << 30         # the largest file ``read_path`` reads (``max_bytes=`` overrides)
MAX_SECONDS = 1e9           # a longer duration (31 years) is a wrong unit or a hostile file


def _module(name: str):
    return importlib.import_module(f"{__name__}.{name}")


def available() -> dict:
    """NAME -> module, for every format this installation can read."""
    out = {}
    for name in _ORDER:
        try:
            mod = _module(name)
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise
            continue
        out[mod.NAME] = mod
    return out


def get(fmt: str):
    mods = available()
    if fmt not in mods:
        raise ValueError(f"unknown format {fmt!r}; known formats: {', '.join(mods)}")
    return mods[fmt]


def descriptors() -> list[Format]:
    """Every readable format's descriptor, most specific first."""
    return [mod.FORMAT for mod in available().values()]


def descriptor(fmt: str) -> Format | None:
    """The descriptor of the format named ``fmt`` (a ``NAME``, as ``Raw.format`` says), or None."""
    mod = available().get(fmt)
    return mod.FORMAT if mod is not None else None


def writers() -> list[Format]:
    """The descriptors of the formats profmagic writes."""
    return [f for f in descriptors() if f.suffixes]


def suffixes() -> list[tuple[str, Format]]:
    """(suffix, format) for every writer's suffix, longest first: ``.speedscope.json`` before ``.json``."""
    pairs = [(s, f) for f in writers() for s in f.suffixes]
    return sorted(pairs, key=lambda sf: -len(sf[0]))


def head(data: bytes) -> bytes:
    """The part of ``data`` sniffing looks at: ``HEAD_BYTES``, or the first line when it is longer
    (up to ``LINE_BYTES``)."""
    h = data[:HEAD_BYTES]
    if len(data) > HEAD_BYTES and b"\n" not in h:
        end = data.find(b"\n", HEAD_BYTES, LINE_BYTES)
        h = data[:end + 1 if end >= 0 else LINE_BYTES]
    return h


def sniff(head: bytes, source: str = "<input>") -> str:
    for name, mod in available().items():
        try:
            if mod.sniff(head):
                return name
        except (ValueError, RecursionError):   # e.g. a UTF-16 byte-order mark on bytes that are not UTF-16
            continue
    raise ProfileFormatError(
        "unrecognised profile format; expected one of: " + ", ".join(available()), source=source, offset=0)


def read(data: bytes, fmt: str | None = None, source: str = "<input>", **options) -> Profile:
    """The Profile in ``data``; every way a reader can fail is a ``ProfileFormatError`` naming ``source``."""
    if fmt is None and (not data or data.isspace()):
        raise ProfileFormatError("empty input; expected a profile", source=source, offset=0)
    if fmt is None:
        fmt = sniff(head(data), source)
    reader = get(fmt)
    try:
        with np.errstate(all="ignore"):   # weights that overflow are refused by _checked, not warned about
            return _checked(reader.read(data, source=source, **options), source)
    except ProfileFormatError:
        raise
    except RecursionError:
        raise ProfileFormatError(f"the {fmt} data nests deeper than Python can read (RecursionError); "
                                 "expected a profile", source=source) from None
    except MemoryError:
        raise ProfileFormatError(f"not enough memory to read these {len(data):,} bytes as {fmt} (MemoryError); "
                                 "expected a profile", source=source) from None
    except UnicodeError as e:
        raise ProfileFormatError(f"text that is not valid Unicode ({type(e).__name__}: {e.reason}); "
                                 f"expected {fmt} text", source=source) from None
    except (OverflowError, SystemError) as e:
        raise ProfileFormatError(f"a value out of range ({type(e).__name__}: {e}); expected a {fmt} profile",
                                 source=source) from None


WEIGHTS = METRICS + ("calls",)


def _checked(p, source: str):
    """``p``, if its weights add up to finite numbers and its duration is one a recording can have."""
    for m in WEIGHTS:
        if m in p.stacks:
            try:
                tot = float(np.nansum(p.stacks[m].to_numpy(dtype=float, na_value=np.nan)))
            except (OverflowError, TypeError, ValueError):   # e.g. a count too large for a float
                tot = math.inf
            if not math.isfinite(tot):
                raise ProfileFormatError(f"the {m} weights add up to {tot} (more than a float holds); "
                                         "expected finite numbers", source=source)
    d = p.duration
    if d is not None and not (math.isfinite(d) and abs(d) <= MAX_SECONDS):
        raise ProfileFormatError(f"a duration of {d:.6g} s; expected at most {MAX_SECONDS:.0e} s "
                                 "(is the time unit right?)", source=source)
    return p


def read_path(path, fmt: str | None = None, max_bytes: int | None = None, **options):
    """The Profile in the file at ``path``: a regular file only (a device, FIFO or directory is
    refused before it is opened: reading /dev/zero never ends, opening a FIFO blocks), of at most
    ``max_bytes`` (default ``MAX_BYTES``)."""
    name = os.fspath(path)
    limit = MAX_BYTES if max_bytes is None else int(max_bytes)
    _regular(os.stat(name), name)
    # O_NONBLOCK: should a FIFO replace the file after that look, opening it does not block.
    with open(os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as f:
        st = os.fstat(f.fileno())
        _regular(st, name)
        data = b""
        if st.st_size <= limit:
            try:
                data = _read_upto(f, st.st_size, limit)
            except MemoryError:
                raise ProfileFormatError(f"not enough memory to read these {st.st_size:,} bytes (MemoryError); "
                                         "expected a profile", source=name) from None
    if st.st_size > limit or len(data) > limit:
        raise ProfileFormatError(f"the file holds more than {limit:,} bytes, the most profmagic reads; "
                                 "pass max_bytes= to load() to read it anyway", source=name)
    return read(data, fmt, source=name, **options)


def _read_upto(f, size: int, limit: int) -> bytes:
    """The file's bytes, or more than ``limit`` of them. ``size`` is what stat said: one read of that
    (reading ``limit`` at once would allocate ``limit``), then more only if the file is longer (it
    grew, or it is a /proc file that says 0)."""
    data = f.read(size + 1)
    if len(data) <= size:
        return data
    parts, n = [data], len(data)
    while n <= limit:
        part = f.read(1 << 20)
        if not part:
            break
        parts.append(part)
        n += len(part)
    return b"".join(parts)


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _not_regular(st: os.stat_result) -> str | None:
    """What the file is when it is not a regular file ("a FIFO (named pipe)"...), else None."""
    if stat.S_ISREG(st.st_mode):
        return None
    return next((w for test, w in _KINDS if test(st.st_mode)), "a special file")


def _regular(st: os.stat_result, name: str) -> None:
    what = _not_regular(st)
    if what:
        raise ProfileFormatError(f"this is {what}, not a regular file; expected a profile file", source=name)


def load(source, fmt: str | None = None, **options) -> Profile:
    """A Profile from a path, bytes, str, or a ``Raw`` capture (read with its own options).

    A str is content when it contains a newline or starts with ``{``; otherwise a path. A path
    with a glob pattern that names no file loads every match into one multi-process profile."""
    if isinstance(source, Raw):
        opts = {**dict(source.options), **options}
        name = source.filename or source.path or "<raw>"
        return read(source.read(), fmt or source.format, source=name, **opts).replace(raw=source)
    if isinstance(source, (str, os.PathLike)):
        s = os.fspath(source)
        if "\n" not in s and not s.lstrip().startswith("{") and any(c in s for c in "*?[") \
                and not os.path.exists(s):
            return load_many(s, format=fmt, **options)
    if isinstance(source, os.PathLike) or (isinstance(source, str) and "\n" not in source
                                           and not source.lstrip().startswith("{")):
        return read_path(source, fmt, **options)
    if isinstance(source, str):
        name, data = "<input>", source.encode("utf-8")
    elif isinstance(source, (bytes, bytearray, memoryview)):
        name, data = "<input>", bytes(source)
    else:
        raise TypeError(f"load() takes a path, bytes, str or Raw, not {type(source).__name__}")
    return read(data, fmt, source=name, **options)


def _natural(s: str):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]


def load_many(pattern, key: str = "rank", format: str | None = None, **options) -> Profile:
    """Every file matching the glob ``pattern`` (sorted naturally: rank2 before rank10), one
    process each, concatenated. A file's label is ``"<key> <n>"`` when its path has ``<key><n>``
    (``rank3.json`` -> ``rank 3``), else its path relative to the glob's fixed part."""
    from ..multi import concat
    base = os.path.dirname(os.fspath(pattern).split("*")[0].split("?")[0].split("[")[0])
    rx = re.compile(rf"{re.escape(key)}[_-]?(\d+)", re.IGNORECASE)

    def number(path):
        m = rx.findall(os.path.relpath(path, base or "."))
        return int(m[-1]) if m else None

    paths = [p for p in _glob.glob(os.fspath(pattern), recursive=True) if os.path.isfile(p)]
    if not paths:
        raise FileNotFoundError(f"no file matches {os.fspath(pattern)!r}")
    paths.sort(key=lambda p: (number(p) is None, number(p) or 0, _natural(p)))
    labels, profiles = [], []
    for path in paths:
        n = number(path)
        labels.append(f"{key} {n}" if n is not None else os.path.relpath(path, base or "."))
        profiles.append(load(path, format, **options))
    if len(set(labels)) != len(labels):   # two files with the same rank number in different runs
        labels = [os.path.relpath(p, base or ".") for p in paths]
    out = concat(profiles, key=key, labels=labels)
    return out.with_meta(sources=paths)


def writer_for(path: str):
    """The module that writes the format ``path``'s suffix names (by the descriptors' ``suffixes``)."""
    low = path.lower()
    for suffix, fmt in suffixes():
        if low.endswith(suffix):
            return get(fmt.name)
    names = [s for f in writers() for s in f.suffixes]
    raise ValueError(f"cannot tell the output format from {os.path.basename(path)!r}; "
                     f"use {', '.join(names[:-1])} or {names[-1]}")


def write_by_name(profile, path: str) -> str:
    """Write ``profile`` in the format ``path``'s extension names, to a regular file only (writing
    to a FIFO nobody reads would block forever)."""
    data = writer_for(path).write(profile)
    try:
        what = _not_regular(os.stat(path))
    except FileNotFoundError:
        what = None
    if not what:   # O_NONBLOCK and a second look: a FIFO put there after the first look fails, never blocks
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC, 0o666), "wb") as f:
            what = _not_regular(os.fstat(f.fileno()))
            if not what:
                f.truncate()
                f.write(data)
    if what:
        raise ValueError(f"{path} is {what}, not a regular file")
    return path

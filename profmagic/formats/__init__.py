"""One module per file format. Each has ``NAME``, ``sniff(head: bytes) -> bool`` and
``read(data: bytes, source: str, **options) -> Profile``; writers add ``write(profile) -> bytes``.

Sniffing order matters: the most specific formats come first.
"""
from __future__ import annotations

import glob as _glob
import importlib
import os
import re

from ..errors import ProfileFormatError
from ..model import Profile, Raw

# Module names, most specific first. A format whose module is missing is skipped.
_ORDER = ("memray", "container", "children", "gecko", "chrome_trace", "speedscope", "pyinstrument", "pstats",
          "eu_stack", "perf_script", "stap", "folded")
HEAD_BYTES = 64 * 1024


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


def sniff(head: bytes, source: str = "<input>") -> str:
    for name, mod in available().items():
        if mod.sniff(head):
            return name
    raise ProfileFormatError(
        "unrecognised profile format; expected one of: " + ", ".join(available()), source=source, offset=0)


def read(data: bytes, fmt: str | None = None, source: str = "<input>", **options) -> Profile:
    if fmt is None and not data.strip():
        raise ProfileFormatError("empty input; expected a profile", source=source, offset=0)
    if fmt is None:
        fmt = sniff(data[:HEAD_BYTES], source)
    return get(fmt).read(data, source=source, **options)


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
        name = os.fspath(source)
        with open(name, "rb") as f:
            data = f.read()
    elif isinstance(source, str):
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
    low = path.lower()
    if low.endswith((".folded", ".txt", ".collapsed")):
        return get("folded")
    if low.endswith(".gecko.json"):
        return get("gecko")
    if low.endswith(".trace.json"):
        return get("chrome_trace")
    if low.endswith(".json"):
        return get("speedscope")
    raise ValueError(f"cannot tell the output format from {os.path.basename(path)!r}; "
                     "use .speedscope.json, .json, .gecko.json, .trace.json, .folded or .txt")


def write_by_name(profile, path: str) -> str:
    data = writer_for(path).write(profile)
    with open(path, "wb") as f:
        f.write(data)
    return path

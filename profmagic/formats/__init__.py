"""One module per file format. Each has ``NAME``, ``sniff(head: bytes) -> bool`` and
``read(data: bytes, source: str, **options) -> Profile``; writers add ``write(profile) -> bytes``.

Sniffing order matters: the most specific formats come first.
"""
from __future__ import annotations

import importlib
import os

from ..errors import ProfileFormatError

# Module names, most specific first. A format whose module is missing is skipped.
_ORDER = ("memray", "speedscope", "pyinstrument", "pstats", "eu_stack", "perf_script", "stap", "folded")
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


def read(data: bytes, fmt: str | None = None, source: str = "<input>", **options):
    if fmt is None and not data.strip():
        raise ProfileFormatError("empty input; expected a profile", source=source, offset=0)
    if fmt is None:
        fmt = sniff(data[:HEAD_BYTES], source)
    return get(fmt).read(data, source=source, **options)


def writer_for(path: str):
    low = path.lower()
    if low.endswith((".folded", ".txt", ".collapsed")):
        return get("folded")
    if low.endswith(".json"):
        return get("speedscope")
    raise ValueError(f"cannot tell the output format from {os.path.basename(path)!r}; "
                     "use .speedscope.json, .json, .folded or .txt")


def write_by_name(profile, path: str) -> str:
    data = writer_for(path).write(profile)
    with open(path, "wb") as f:
        f.write(data)
    return path

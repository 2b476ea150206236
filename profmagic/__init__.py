"""profmagic: profile one notebook cell with real profilers and see it inline."""
from __future__ import annotations

import os
from pathlib import Path

from .errors import ProfileFormatError, ProfilerError
from .profile import Profile

__version__ = "0.1.0"
__all__ = ["load", "Profile", "ProfileFormatError", "ProfilerError", "compare", "profile", "attach",
           "load_ipython_extension", "__version__"]


def load(source, format: str | None = None, **options) -> Profile:
    """Read a profile from a path, bytes or str. The format is sniffed from the content when None.

    A str is taken as content when it contains a newline or starts with ``{``; otherwise as a path.
    A path with a glob pattern (``runs/*/rank*.json``) loads every match into one multi-process profile.
    """
    from . import formats
    if isinstance(source, (str, os.PathLike)):
        s = os.fspath(source)
        if "\n" not in s and not s.lstrip().startswith("{") and any(c in s for c in "*?[") \
                and not os.path.exists(s):
            from .multi import load_many
            return load_many(s, format=format, **options)
    name = "<input>"
    if isinstance(source, os.PathLike) or (isinstance(source, str) and "\n" not in source
                                           and not source.lstrip().startswith("{")):
        return formats.read_path(source, format, **options)
    elif isinstance(source, str):
        data = source.encode("utf-8")
    elif isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
    else:
        raise TypeError(f"load() takes a path, bytes or str, not {type(source).__name__}")
    return formats.read(data, format, source=name, **options)


def compare(a: Profile, b: Profile, **kw):
    from .views import compare as _compare
    return _compare.compare(a, b, **kw)


def profile(backend: str = "auto", **options):
    from .recording import profile as _profile
    return _profile(backend, **options)


def load_ipython_extension(ipython):
    from .magic import load_ipython_extension as _load
    _load(ipython)


def unload_ipython_extension(ipython):
    from .magic import unload_ipython_extension as _unload
    _unload(ipython)


from .attach import attach  # noqa: E402  (eager: a lazy wrapper would be shadowed by the submodule)

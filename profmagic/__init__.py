"""profmagic: profile one notebook cell with real profilers and see it inline.

The root imports only the errors; the model (pandas) and everything else load on first use, so
``profmagic.load(path)`` imports no recorder, and a cluster worker that imports
``profmagic.cluster.dask`` or ``.ray`` imports no pandas.
"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from .errors import ProfileFormatError, ProfilerError

if TYPE_CHECKING:
    from .model import Profile

__all__ = ["load", "save", "Profile", "ProfileFormatError", "ProfilerError", "compare", "profile", "attach",
           "icicle", "sandwich", "timeline", "waits", "to_folded", "to_speedscope", "concat", "register_display",
           "load_ipython_extension", "__version__"]


def __getattr__(name: str):
    if name in ("Profile", "model"):
        import importlib
        model = importlib.import_module(f"{__name__}.model")
        return model if name == "model" else model.Profile
    if name == "waits":   # the module, callable: profmagic.waits(p) is waits.waits(p)
        import importlib
        return importlib.import_module(f"{__name__}.waits")
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version
        try:
            return version("profmagic")
        except PackageNotFoundError:   # a source tree that was never installed
            return "0+unknown"
    raise AttributeError(f"module 'profmagic' has no attribute {name!r}")


def load(source, format: str | None = None, **options) -> Profile:
    """Read a profile from a path, bytes, str or a ``Raw`` capture. The format is sniffed from the
    content when None. A str is content when it contains a newline or starts with ``{``; otherwise
    a path. A path with a glob pattern (``runs/*/rank*.json``) loads every match into one
    multi-process profile."""
    register_display()
    from . import formats
    return formats.load(source, format, **options)


def save(profile: Profile, path) -> str:
    """Write ``profile`` in the format ``path``'s extension names (``.folded``/``.txt`` folded,
    ``.gecko.json``, ``.trace.json``, other ``.json`` speedscope); returns the path."""
    import os
    from . import formats
    return formats.write_by_name(profile, os.fspath(path))


def compare(a: Profile, b: Profile, **kw):
    """Before/after: a differential icicle and a delta table."""
    from .views import diff
    return diff.compare(a, b, **kw)


def profile(backend: str = "auto", **options):
    """Context manager: ``with profmagic.profile("sampler", mode="both") as rec: work()``."""
    register_display()
    from .session import profile as _profile
    return _profile(backend, **options)


def attach(pids, duration: float | None = 10.0, backend: str = "py-spy", **options) -> Profile:
    """Record running processes for ``duration`` seconds (None: until Ctrl-C)."""
    register_display()
    from .attaching import attach as _attach
    return _attach(pids, duration, backend, **options)


def load_ipython_extension(ipython):
    from . import interrupts
    try:   # Ctrl-C waits for the imports (interrupts.py), then is one line
        with interrupts.deferred():
            register_display(ipython)
            from .magic import load_ipython_extension as _load
    except KeyboardInterrupt as e:
        raise interrupts.stopped_loading(e) from None
    _load(ipython)


def unload_ipython_extension(ipython):
    from .magic import unload_ipython_extension as _unload
    _unload(ipython)


# -- views and exports of a Profile: functions of this layer, not methods lent to the model ----------
def icicle(p: Profile, metric: str | None = None, thread: str | None = None, **kw):
    """The icicle of ``p`` as a plotly figure (``views.icicle.figure``)."""
    from .views import icicle as _icicle
    return _icicle.figure(p, metric=metric, thread=thread, **kw)


def sandwich(p: Profile, function=None, metric: str | None = None, **kw):
    """Callers and callees of ``function`` as a plotly figure (``views.sandwich.figure``)."""
    from .views import sandwich as _sandwich
    return _sandwich.figure(p, function=function, metric=metric, **kw)


def timeline(p: Profile, **kw):
    """The samples of ``p`` over time as a plotly figure (``views.timeline.figure``)."""
    from .views import timeline as _timeline
    return _timeline.figure(p, **kw)


def to_folded(p: Profile, metric: str | None = None) -> str:
    """``p`` as folded stacks text (one ``a;b;c weight`` line per stack)."""
    from .formats import folded
    return folded.write_text(p, metric=metric)


def to_speedscope(p: Profile) -> dict:
    """``p`` as a speedscope document (a dict ready for ``json.dump``)."""
    from .formats import speedscope
    return speedscope.to_dict(p)


def concat(profiles, key: str = "rank", labels=None) -> Profile:
    """Merge per-process profiles into one, keeping which process each stack came from."""
    from .multi import concat as _concat
    return _concat(profiles, key=key, labels=labels)


# -- display: IPython shows a Profile through a formatter registered here, not a method of the model ------
def _mimebundle(p: Profile) -> dict:
    from . import report
    return report.mimebundle(p)


def register_display(ipython=None) -> bool:
    """Make IPython display a Profile as its report. ``%load_ext profmagic`` calls it, and so does
    importing profmagic inside a running IPython; returns whether a shell was there to register with."""
    if ipython is None:
        mod = sys.modules.get("IPython")   # never import IPython: a script or a worker has none
        ipython = mod.get_ipython() if mod is not None and hasattr(mod, "get_ipython") else None
    formatter = getattr(getattr(ipython, "display_formatter", None), "mimebundle_formatter", None)
    if formatter is None:
        return False
    formatter.for_type_by_name(f"{__name__}.model", "Profile", _mimebundle)
    return True


register_display()

"""profmagic: profile one notebook cell with real profilers and see it inline.

The root imports only the errors; the model (pandas) and everything else load on first use, so
``profmagic.load(path)`` imports no recorder, and a cluster worker that imports
``profmagic.cluster.dask`` or ``.ray`` imports no pandas.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import ProfileFormatError, ProfilerError

if TYPE_CHECKING:
    from .model import Profile

__all__ = ["load", "save", "Profile", "ProfileFormatError", "ProfilerError", "compare", "profile", "attach",
           "load_ipython_extension", "__version__"]


def __getattr__(name: str):
    if name in ("Profile", "model"):
        import importlib
        model = importlib.import_module(f"{__name__}.model")
        return model if name == "model" else model.Profile
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
    from . import formats
    return formats.load(source, format, **options)


def save(profile: Profile, path: str) -> str:
    """Write ``profile`` in the format ``path``'s extension names; returns the path."""
    from . import formats
    return formats.write_by_name(profile, path)


def compare(a: Profile, b: Profile, **kw):
    """Before/after: a differential icicle and a delta table."""
    from .views import diff
    return diff.compare(a, b, **kw)


def profile(backend: str = "auto", **options):
    """Context manager: ``with profmagic.profile("sampler", mode="both") as rec: work()``."""
    from .session import profile as _profile
    return _profile(backend, **options)


def attach(pids, duration: float | None = 10.0, backend: str = "py-spy", **options) -> Profile:
    """Record running processes for ``duration`` seconds (None: until Ctrl-C)."""
    from .attaching import attach as _attach
    return _attach(pids, duration, backend, **options)


def load_ipython_extension(ipython):
    from .magic import load_ipython_extension as _load
    _load(ipython)


def unload_ipython_extension(ipython):
    from .magic import unload_ipython_extension as _unload
    _unload(ipython)


# -- what the model's convenience methods use: model.py calls _lend_hooks(HOOKS) when it loads --------
def _view(p: Profile, name: str, **kw):
    import importlib
    return importlib.import_module(f"{__name__}.views.{name}").figure(p, **kw)


def _speedscope(p: Profile) -> dict:
    from .formats import speedscope
    return speedscope.to_dict(p)


def _folded(p: Profile, metric: str | None = None) -> str:
    from .formats import folded
    return folded.write_text(p, metric=metric)


def _mimebundle(p: Profile) -> dict:
    from . import report
    return report.mimebundle(p)


def _concat(profiles, key: str = "rank", labels=None) -> Profile:
    from .multi import concat
    return concat(profiles, key=key, labels=labels)


def _lend_hooks(hooks: dict) -> None:
    hooks.update(save=save, view=_view, speedscope=_speedscope, folded=_folded, mimebundle=_mimebundle,
                 concat=_concat)

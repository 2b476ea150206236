"""One module per profiler; see base.py for the interface and what each declares (``CAPS``)."""
from __future__ import annotations

import importlib

from ..errors import ProfilerError

# --backend value -> module name
MODULES = {
    "py-spy": "pyspy",
    "pyinstrument": "pyinstrument",
    "cprofile": "cprofile",
    "sampler": "sampler",
    "perf": "perf",
    "eu-stack": "eustack",
    "systemtap": "systemtap",
    "py-spy+eu-stack": "combined",
    "memray": "memray",
}
# auto: the first of these that can record here.
AUTO = ("py-spy", "sampler")


def get(name: str):
    if name not in MODULES:
        raise ValueError(f"unknown backend {name!r}; choose one of: auto, " + ", ".join(MODULES))
    return importlib.import_module(f"{__name__}.{MODULES[name]}")


def names() -> list[str]:
    return list(MODULES)


def choose(name: str) -> tuple[object, str]:
    """The backend module for ``name`` (or ``auto``) and a sentence saying what was chosen and why."""
    if name != "auto" and name not in MODULES:
        raise ProfilerError(f"unknown backend {name!r}; choose one of: auto, {', '.join(MODULES)}")
    if name != "auto":
        mod = get(name)
        ok, reason = mod.available()
        if not ok:
            raise ProfilerError(f"backend {name} cannot record here: {reason}")
        return mod, f"{name}: {reason}"
    first, fallback = (get(n) for n in AUTO)
    ok, reason = first.available()
    if ok:
        return first, f"auto chose {first.NAME} ({reason})"
    return fallback, f"auto chose the built-in {fallback.NAME}: {first.NAME} is not usable here ({reason})"


def recorder(mod, options):
    """The module's recorder for ``options`` (a module may pick among several, e.g. py-spy's pair)."""
    make = getattr(mod, "recorder", None)
    return make(options) if make is not None else mod.Recorder(options)

"""One module per profiler; see base.py for the interface."""
from __future__ import annotations

import importlib

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


def get(name: str):
    if name not in MODULES:
        raise ValueError(f"unknown backend {name!r}; choose one of: auto, " + ", ".join(MODULES))
    return importlib.import_module(f"{__name__}.{MODULES[name]}")


def names() -> list[str]:
    return list(MODULES)

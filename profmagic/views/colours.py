"""Colours of the views: one colour per function, its hue family by kind; change and clock colours.

A function's colour comes from a hash of its name, so the same function has the same colour in
every panel, tab, cell and profile. Its kind picks the family: Python blues, native oranges,
interpreter (CPython's own C frames) lavender greys, kernel reds, frames of unknown kind (folded
text) greens, folded boilerplate light grey. Off-CPU time is hatched on top (``HATCH``), which
reads in greyscale too.
"""
from __future__ import annotations

import colorsys
import re
import zlib
from functools import lru_cache

import numpy as np

from ..boilerplate import FOLDED_FILE, INTERPRETER_FILE, INTERPRETER_NAME

# family: (hue range in degrees, saturation range, lightness range)
FAMILIES = {
    "python": ((185, 250), (0.42, 0.68), (0.40, 0.62)),
    "native": ((16, 50), (0.70, 0.92), (0.48, 0.62)),
    "interpreter": ((255, 300), (0.10, 0.28), (0.58, 0.72)),
    "kernel": ((345, 372), (0.58, 0.78), (0.46, 0.60)),
    "other": ((75, 165), (0.30, 0.50), (0.44, 0.62)),
    "boilerplate": ((0, 360), (0.0, 0.0), (0.80, 0.80)),
}
FAMILY_LABELS = {"python": "Python", "native": "native", "interpreter": "interpreter", "kernel": "kernel",
                 "other": "other", "boilerplate": "folded boilerplate"}
# One colour per kind ("colour: kind") and a palette for modules (colour-blind-safe Tableau 10).
KIND_COLOURS = {"python": "#4c78a8", "native": "#f58518", "kernel": "#e45756", "other": "#9d9d9d"}
PALETTE = ["#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#eeca3b", "#b279a2",
           "#ff9da6", "#9d755d", "#bab0ac"]
GREY = "#d0d0d0"
CPU_COLOUR, OFF_COLOUR = "#4c78a8", "#f58518"
# Change (FlameGraph's difffolded convention): blue faster, red slower; ColorBrewer RdBu.
CHANGE = ["#2166ac", "#67a9cf", "#d1e5f0", "#f7f7f7", "#fddbc7", "#ef8a62", "#b2182b"]
HATCH = "rgba(20,20,20,0.55)"   # off-CPU hatching

_INTERPRETER_FILE = re.compile(INTERPRETER_FILE)
_INTERPRETER_NAME = re.compile(INTERPRETER_NAME)


def family(name: str, file, kind) -> str:
    """The colour family of a function: its kind, with CPython's own native frames (by their file,
    or by their name where the file is unknown) as interpreter."""
    kind = str(kind)
    file = str(file or "")
    if file == FOLDED_FILE:
        return "boilerplate"
    if kind == "native" and (_INTERPRETER_FILE.search(file) or
                             (not file and _INTERPRETER_NAME.fullmatch(str(name)))):
        return "interpreter"
    return kind if kind in FAMILIES else "other"


@lru_cache(maxsize=65536)
def function_colour(name: str, fam: str) -> str:
    """The colour of function ``name`` in family ``fam``: a hue, saturation and lightness picked
    by a hash of the name within the family's ranges."""
    h = zlib.crc32(name.encode("utf-8", "replace"))
    (h0, h1), (s0, s1), (l0, l1) = FAMILIES.get(fam, FAMILIES["other"])
    u = ((h & 0xFFF) / 4095, ((h >> 12) & 0x3FF) / 1023, ((h >> 22) & 0x3FF) / 1023)
    hue = ((h0 + u[0] * (h1 - h0)) % 360) / 360
    r, g, b = colorsys.hls_to_rgb(hue, l0 + u[2] * (l1 - l0), s0 + u[1] * (s1 - s0))
    return f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}"


def by_function(ft) -> np.ndarray:
    """Colour per function id (an array of hex strings indexed by id) for the function table ``ft``
    (views.tree.function_table)."""
    out = np.full(int(ft.index.max()) + 1 if len(ft) else 0, GREY, dtype=object)
    out[ft.index.to_numpy()] = [function_colour(str(n), family(n, f, k))
                                for n, f, k in zip(ft["name"], ft["file"], ft["kind"])]
    return out


def by_scheme(ft, scheme: str) -> np.ndarray:
    """Colour per function id: ``function`` (its own), ``kind`` (one per kind) or ``module`` (the
    most common modules first through the palette)."""
    if scheme == "function":
        return by_function(ft)
    if scheme == "kind":
        colours = [KIND_COLOURS.get(str(k), KIND_COLOURS["other"]) for k in ft["kind"]]
    elif scheme == "module":
        mods = ft["module"].astype(str)
        first = {m: PALETTE[i % len(PALETTE)] for i, m in enumerate(mods.value_counts().index)}
        colours = [first[m] for m in mods]
    else:
        raise ValueError(f"colour must be 'function', 'kind' or 'module', not {scheme!r}")
    out = np.full(int(ft.index.max()) + 1 if len(ft) else 0, GREY, dtype=object)
    out[ft.index.to_numpy()] = colours
    return out


def families_legend(ft) -> str:
    """HTML (plotly-safe) naming the colour families present, each with a sample colour."""
    fams = {family(n, f, k) for n, f, k in zip(ft["name"], ft["file"], ft["kind"])}
    return " ".join(f"<span style='color:{function_colour(FAMILY_LABELS[x], x)}'>■</span> {FAMILY_LABELS[x]}"
                    for x in FAMILIES if x in fams)


def change_colour(d: float, lim: float) -> str:
    """The colour of a change ``d`` on the ``CHANGE`` scale from -lim (blue) to +lim (red)."""
    x = 0.5 if lim <= 0 else min(max(0.5 + 0.5 * d / lim, 0.0), 1.0)
    pos = x * (len(CHANGE) - 1)
    i = min(int(pos), len(CHANGE) - 2)
    a, b = _rgb(CHANGE[i]), _rgb(CHANGE[i + 1])
    t = pos - i
    return "#" + "".join(f"{round(p + (q - p) * t):02x}" for p, q in zip(a, b))


def change_scale() -> list[list]:
    """``CHANGE`` as a plotly colourscale (use with cmid=0)."""
    return [[i / (len(CHANGE) - 1), c] for i, c in enumerate(CHANGE)]


def text_colour(fill: str) -> str:
    """Dark text on light fills, white on dark ones."""
    r, g, b = _rgb(fill)
    return "#111" if 0.299 * r + 0.587 * g + 0.114 * b > 150 else "#fff"


def _rgb(c: str) -> tuple[int, int, int]:
    c = c.lstrip("#")
    return int(c[0:2], 16), int(c[2:4], 16), int(c[4:6], 16)

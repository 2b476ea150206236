"""Colours of the views: the palettes and the stepped colourscale that maps integer codes to them.

A figure sends one small integer per node and a stepped colourscale instead of a hex string per
node: 1-2 bytes a node.
"""
from __future__ import annotations

import numpy as np

# Colour per frame kind, and a palette for modules and functions (colour-blind-safe Tableau 10).
KIND_COLOURS = {"python": "#4c78a8", "native": "#f58518", "kernel": "#e45756", "other": "#9d9d9d"}
PALETTE = ["#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#eeca3b", "#b279a2",
           "#ff9da6", "#9d755d", "#bab0ac"]
GREY = "#d0d0d0"
CPU_COLOUR, OFF_COLOUR = "#4c78a8", "#f58518"


def stepped_scale(colours: list[str]) -> list[list]:
    """A plotly colourscale on which code i (with cmin=0, cmax=len(colours)) is ``colours[i]``."""
    n = len(colours)
    scale = []
    for i, c in enumerate(colours):
        scale += [[i / n, c], [(i + 1) / n, c]]
    return scale


def function_codes(ft, colour: str, order=None) -> tuple[np.ndarray, list[str]]:
    """(colour code per function id, palette) for the function table ``ft`` (views.tree):
    ``kind``, ``module`` (the most common modules first through the palette) or ``function``
    (the ids in ``order`` first through the palette). Code ``len(palette)`` is grey."""
    if colour == "module":
        mods = ft["module"].astype(str)
        first = {m: i % len(PALETTE) for i, m in enumerate(mods.value_counts().index)}
        code, palette = np.array([first[m] for m in mods], np.int64), PALETTE
    elif colour == "kind":
        kinds = list(KIND_COLOURS)
        code = np.array([kinds.index(str(k)) if str(k) in kinds else 3 for k in ft["kind"]], np.int64)
        palette = list(KIND_COLOURS.values())
    elif colour == "function":
        rank = {int(f): i % len(PALETTE) for i, f in enumerate(order if order is not None else ft.index)}
        code, palette = np.array([rank.get(int(f), len(PALETTE)) for f in ft.index], np.int64), PALETTE
    else:
        raise ValueError(f"colour must be 'kind', 'module' or 'function', not {colour!r}")
    out = np.full(int(ft.index.max()) + 1 if len(ft) else 0, len(palette), np.int64)
    out[ft.index.to_numpy()] = code
    return out, palette

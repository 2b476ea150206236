"""Text a front end can receive: no lone surrogates.

A name may hold one (``"\\ud800"`` in a JSON file, an undecodable byte of a path kept by
``surrogateescape``). Python holds it, but Jupyter's messages are UTF-8 and cannot carry it: a
display or widget holding one fails as it is sent. Views show it as its escape, ``\\ud800``.
"""
from __future__ import annotations

import re

import pandas as pd

from ..model import Meta, Profile

_LONE = re.compile(r"[\ud800-\udfff]")     # a str holds surrogates only unpaired
_JSON_LONE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")   # one in escaped JSON (or a pair's half)


def _escape(m) -> str:
    return f"\\u{ord(m.group()):04x}"


def text(s: str) -> str:
    """``s`` with each lone surrogate written as its escape (``\\ud800``)."""
    return _LONE.sub(_escape, s) if _LONE.search(s) else s


def deep(v):
    """``v`` with every string in it (dict keys too, through lists and tuples) made ``text``."""
    if isinstance(v, str):
        return text(v)
    if isinstance(v, dict):
        return {deep(k): deep(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return type(v)(deep(x) for x in v) if type(v) in (list, tuple) else [deep(x) for x in v]
    return v


def json_value(doc: str, value):
    """``value`` (``json.loads(doc)``) made ``deep``, unless the JSON text ``doc`` holds no surrogate
    escape at all (the usual case: no walk)."""
    return deep(value) if _JSON_LONE.search(doc) else value


def _column(col: pd.Series) -> pd.Series | None:
    """The column with its strings made ``text``, or None when none needs it."""
    if col.dtype != object:
        return None
    try:   # the usual case, checked at C speed: every string encodes
        "\n".join(map(str, col.to_numpy())).encode("utf-8")
        return None
    except UnicodeEncodeError:
        pass
    hit = [isinstance(v, str) and _LONE.search(v) is not None for v in col.to_numpy()]
    if not any(hit):
        return None
    return pd.Series([text(v) if h else v for v, h in zip(col.to_numpy(), hit)], index=col.index, dtype=object)


def profile(p: Profile) -> Profile:
    """``p`` itself when no name, file, thread or meta string holds a lone surrogate; else a copy
    whose strings are made ``text`` (same rows, weights and raw data)."""
    frames = {c: new for c in p.frames.columns if (new := _column(p.frames[c])) is not None}
    threads = {c: new for c in p.thread_table.columns if (new := _column(p.thread_table[c])) is not None}
    meta = p.meta.to_dict()
    clean = deep(meta)
    if not frames and not threads and clean == meta:
        return p
    changes = {"meta": Meta.of(clean)}
    if frames:
        changes["frames"] = pd.DataFrame(p.frames).assign(**frames)
    if threads:   # the stacks name threads by their id in the table: new labels keep them
        changes["threads"] = pd.DataFrame(p.thread_table).assign(**threads)
        changes["stacks"] = pd.DataFrame(p.stacks).assign(thread=p.stacks["thread"].cat.codes.to_numpy())
    return p.replace(**changes)

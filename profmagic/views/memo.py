"""Tables derived from a Profile, computed once per profile (a Profile never changes) and dropped
with it: the report's tabs and pickers ask for the same function table again and again.

Only plain tables and arrays are kept, never anything that refers back to the Profile, so a
profile that is deleted is freed with everything derived from it.
"""
from __future__ import annotations

import weakref
from typing import Callable

_MEMO: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def memo(profile, key, build: Callable):
    """``build()``, computed once per ``(profile, key)``."""
    try:
        cache = _MEMO.setdefault(profile, {})
    except TypeError:   # an object that cannot be weakly referenced: no cache
        return build()
    if key not in cache:
        cache[key] = build()
    return cache[key]


def cached(profile, key):
    """What ``memo`` holds for ``(profile, key)``, or None when nothing computed it yet."""
    try:
        return _MEMO.get(profile, {}).get(key)
    except TypeError:
        return None


def functions(profile, metric: str, rows=None, thread=None):
    """``profile.functions(metric)`` (of the stack rows ``rows`` of ``thread``, when given), once."""
    if thread is None:
        return memo(profile, ("functions", metric), lambda: profile.functions(metric))
    return memo(profile, ("functions", metric, thread), lambda: profile.subset(rows).functions(metric))


def function_ids(profile):
    """``profile.function_ids()``, once."""
    return memo(profile, "function_ids", profile.function_ids)

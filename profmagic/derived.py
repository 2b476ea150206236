"""Values derived from a Profile, computed once per profile (a Profile never changes) and dropped
with it. Only plain tables and arrays are kept, never anything that refers back to the Profile, so
a profile that is deleted is freed with everything derived from it. The views' tables
(views/memo.py), the flat stack arrays (flatstacks.py) and the downloads' frame count share this one cache.
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

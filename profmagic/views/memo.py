"""The views' tables derived from a Profile, once per profile (``derived.memo``): the report's tabs
and pickers ask for the same function table again and again."""
from __future__ import annotations

from ..derived import memo


def functions(profile, metric: str, rows=None, thread=None):
    """``profile.functions(metric)`` (of the stack rows ``rows`` of ``thread``, when given), once."""
    if thread is None:
        return memo(profile, ("functions", metric), lambda: profile.functions(metric))
    return memo(profile, ("functions", metric, thread), lambda: profile.subset(rows).functions(metric))

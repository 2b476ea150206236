"""How many live reports keep their profile alive: the ``LIVE`` newest (docs/report.md, "Long sessions").

A report that holds its profile (a profiled cell's, or one displayed without a name) keeps it while
it is among the ``LIVE`` newest such reports; then it lets go and keeps only a weak reference. A
profile the user holds (``p = _profile``) stays alive and its report keeps working. One nobody holds
is freed: at the next report, its report gives way to a notice (``Report.collapse``), closing its
widgets and the figures they held. The static twin, a separate output, still shows the profile.
"""
from __future__ import annotations

import collections
import weakref

LIVE = 20   # reports that hold their profile alive; set it before the next report: keep.LIVE = 5

_holding: collections.deque = collections.deque()   # reports holding their profile, oldest first
_watched: list = []    # weak references to reports that hold none: collapsed once their profile is freed
_every: list = []      # weak references to every report, oldest first (``reports()``)


def add(report) -> None:
    """A new report: the oldest holders beyond ``LIVE`` let go, and every report whose profile was
    freed since collapses (here, in the thread that displays, never in a gc callback)."""
    _every.append(weakref.ref(report))
    if report.holds:
        _holding.append(report)
    else:
        _watched.append(weakref.ref(report))
    while len(_holding) > max(0, int(LIVE)):
        old = _holding.popleft()
        old.let_go()
        _watched.append(weakref.ref(old))
    sweep()


def sweep() -> None:
    """Collapse the reports whose profile is gone; forget the reports that are gone themselves."""
    still = []
    for ref in _watched:
        r = ref()
        if r is None:
            continue
        if r.profile_alive():
            still.append(ref)
        else:
            r.collapse()
    _watched[:] = still
    _every[:] = [ref for ref in _every if ref() is not None]


def reports() -> list:
    """The reports still in the kernel, oldest first (collapsed ones included until they are freed)."""
    return [r for r in (ref() for ref in _every) if r is not None]

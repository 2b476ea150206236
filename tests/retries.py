"""Counted tries for checks that are noisy by nature (a sampled share against a measured one).

A test states the noise it measured for its backend (m misses in N single tries); the miss rate is
taken as (m + 1) / (N + 2), so that 0 misses in 40 tries is not read as "never". ``plan`` turns that
into a rule: n tries, at most k misses, the smallest n for which
  - a correct build fails at most FALSE_FAIL of the time at the measured noise, and
  - a regression that makes REGRESSION of the tries miss still passes at most MISSED of the time
    (or MAX_TRIES tries, when no n up to it does: the rule then says how often a regression passes).
``run`` applies the rule, stopping as soon as it is decided, and records every miss: each one is
listed in pytest's terminal summary ("counted misses"), pass or fail.

A try during which the profiled thread waited for a core (run queue, /proc schedstat) more than
LOAD_LIMIT of its wall time says nothing about the profiler: the machine was overloaded. Such a try
(``waited`` returns ``Overloaded``) is listed but not counted. More than n // 3 of them, and the
machine lacks a free core for the check: the test fails under CI and skips elsewhere, like any missing
requirement (tools.lacking).

Measuring: ``PROFMAGIC_MEASURE_NOISE=40 pytest tests/test_x.py::test_y`` runs 40 tries without the
rule and without the load limit, and prints each try's outcome and waited share, and the count of
misses among the tries under the limit: the figure to put next to the test.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

FALSE_FAIL = 0.01   # a correct build may fail this often
REGRESSION = 0.30   # a regression that makes this share of tries miss ...
MISSED = 0.10       # ... passes at most this often
MAX_TRIES = 24      # past this the test costs more than it tells
LOAD_LIMIT = 0.5    # a try whose thread waited for a core longer than this share of its wall time is not counted

# (test id, try number, why) of every miss this session; overloaded tries; noise measurements.
MISSES: list[tuple[str, int, str]] = []
OVERLOADED: list[tuple[str, int, str]] = []
MEASURED: list[tuple[str, list[tuple[bool, float | None]]]] = []


@dataclass(frozen=True)
class Overloaded:
    detail: str


_last_waited: list[float | None] = [None]


def waited(run_delay: float | None, wall: float) -> Overloaded | None:
    """The share of ``wall`` the thread spent waiting for a core; Overloaded past LOAD_LIMIT."""
    share = None if run_delay is None or not wall else run_delay / wall
    _last_waited[0] = share
    if share is not None and share > LOAD_LIMIT and not _measuring():
        return Overloaded(f"the thread waited for a core {share:.0%} of its {wall:.2f} s")
    return None


def _measuring() -> int:
    return int(os.environ.get("PROFMAGIC_MEASURE_NOISE", "0") or 0)


def _tail(n: int, k: int, p: float) -> float:
    """P(more than k misses in n tries) at miss rate p."""
    return 1.0 - sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(k + 1))


@dataclass(frozen=True)
class Rule:
    noise: float      # a single try's miss rate, measured
    measured: str     # how: runs, misses, load
    tries: int
    allowed: int

    def describe(self) -> str:
        return (f"at most {self.allowed} miss(es) in {self.tries} tries (noise {self.noise:.0%}: {self.measured}; "
                f"false failure {_tail(self.tries, self.allowed, self.noise):.1%}, "
                f"a {REGRESSION:.0%} regression passes {1 - _tail(self.tries, self.allowed, REGRESSION):.1%})")


def plan(misses: int, runs: int, how: str) -> Rule:
    """The smallest (tries, allowed) that meets FALSE_FAIL at the measured noise and MISSED at REGRESSION;
    MAX_TRIES tries when none does."""
    noise = (misses + 1) / (runs + 2)
    measured = f"{misses} of {runs} tries missed, {how}"
    for n in range(1, MAX_TRIES + 1):
        k = next(k for k in range(n + 1) if _tail(n, k, noise) <= FALSE_FAIL)
        if 1 - _tail(n, k, REGRESSION) <= MISSED or n == MAX_TRIES:
            return Rule(noise, measured, n, k)


def run(rule: Rule, once) -> None:
    """Call ``once()`` until the rule is decided. It returns None on a hit, why on a miss, or an
    ``Overloaded`` (from ``waited``) for a try that is not counted.

    An assertion inside ``once`` is a hard failure and propagates at once: only the noisy comparison
    is counted."""
    test_id = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" (", 1)[0]
    if _measuring():
        tries = []
        for i in range(1, _measuring() + 1):
            _last_waited[0] = None
            why = once()
            tries.append((why is None, _last_waited[0]))
            if why is not None:
                MISSES.append((test_id, i, f"{why} (waited {_fmt(_last_waited[0])})"))
        MEASURED.append((test_id, tries))
        return
    hits, misses, skipped = 0, [], []
    for i in range(1, rule.tries + rule.tries // 3 + 2):
        if len(skipped) > rule.tries // 3:
            break
        why = once()
        if isinstance(why, Overloaded):
            skipped.append(f"try {i}: {why.detail}")
            OVERLOADED.append((test_id, i, why.detail))
        elif why is None:
            hits += 1
        else:
            misses.append(f"try {i}: {why}")
            MISSES.append((test_id, i, why))
        if len(misses) > rule.allowed:
            raise AssertionError(f"{len(misses)} misses after {i} tries; the rule is {rule.describe()}:\n  "
                                 + "\n  ".join(misses + skipped))
        if hits >= rule.tries - rule.allowed:
            return
    import tools
    tools.lacking(f"needs a core to spare for this timing check: {len(skipped)} tries ran overloaded "
                  f"(waited for a core over {LOAD_LIMIT:.0%} of the time) beside {hits} hits and "
                  f"{len(misses)} misses; install: run it on a machine that is not overloaded")


def _fmt(x: float | None) -> str:
    return "?" if x is None else f"{x:.0%}"


def summary(tries: list[tuple[bool, float | None]]) -> str:
    """What a measurement found, in the words the rule next to the test uses."""
    counted = [hit for hit, w in tries if w is None or w <= LOAD_LIMIT]
    misses = counted.count(False)
    over = len(tries) - len(counted)
    over_misses = sum(1 for hit, w in tries if not hit and w is not None and w > LOAD_LIMIT)
    line = (f"{misses} of {len(counted)} counted tries missed ({over} overloaded tries, "
            f"{over_misses} of them missed); waited shares: "
            + " ".join(("" if hit else "x") + _fmt(w) for hit, w in tries))
    if counted:
        line += f"\n    rule from it: {plan(misses, len(counted), 'this run').describe()}"
    return line

"""Counted tries for checks that are noisy by nature (a sampled share against a measured one).

A test states the noise it measured for its backend (m misses in N single tries); the miss rate is
taken as (m + 1) / (N + 2), so that 0 misses in 40 tries is not read as "never". ``plan`` turns that
into a rule: n tries, at most k misses, the smallest n for which
  - a correct build fails at most FALSE_FAIL of the time at the measured noise, and
  - a regression that makes REGRESSION of the tries miss still passes at most MISSED of the time.
``run`` applies the rule, stopping as soon as it is decided, and records every miss: each one is
listed in pytest's terminal summary ("counted misses"), pass or fail.

Measuring: ``PROFMAGIC_MEASURE_NOISE=40 pytest tests/test_x.py::test_y`` runs 40 tries without the
rule and prints the miss count, the figure to put next to the test.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

FALSE_FAIL = 0.01   # a correct build may fail this often
REGRESSION = 0.30   # a regression that makes this share of tries miss ...
MISSED = 0.10       # ... passes at most this often
MAX_TRIES = 24      # past this the test costs more than it tells; the rule then says its real power

# (test id, try number, why) of every miss this session, and noise measurements; conftest prints them.
MISSES: list[tuple[str, int, str]] = []
MEASURED: list[tuple[str, int, int]] = []


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
    MAX_TRIES tries when none does (``describe`` then shows how often a regression still passes)."""
    noise = (misses + 1) / (runs + 2)
    measured = f"{misses} of {runs} tries missed, {how}"
    for n in range(1, MAX_TRIES + 1):
        k = next(k for k in range(n + 1) if _tail(n, k, noise) <= FALSE_FAIL)
        if 1 - _tail(n, k, REGRESSION) <= MISSED or n == MAX_TRIES:
            return Rule(noise, measured, n, k)


def run(rule: Rule, once) -> None:
    """Call ``once()`` (returns None on a hit, else why it missed) until the rule is decided.

    An assertion inside ``once`` is a hard failure and propagates at once: only the noisy comparison
    is counted."""
    test_id = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" (", 1)[0]
    measure = int(os.environ.get("PROFMAGIC_MEASURE_NOISE", "0") or 0)
    if measure:
        misses = 0
        for i in range(1, measure + 1):
            why = once()
            if why is not None:
                misses += 1
                MISSES.append((test_id, i, why))
        MEASURED.append((test_id, measure, misses))
        return
    hits, misses = 0, []
    for i in range(1, rule.tries + 1):
        why = once()
        if why is None:
            hits += 1
        else:
            misses.append(f"try {i}: {why}")
            MISSES.append((test_id, i, why))
        if len(misses) > rule.allowed:
            raise AssertionError(f"{len(misses)} misses after {i} tries; the rule is {rule.describe()}:\n  "
                                 + "\n  ".join(misses))
        if hits >= rule.tries - rule.allowed:
            return

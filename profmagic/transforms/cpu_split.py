"""The CPU split: a sample's CPU delta shared between the stacks before and after a stack change."""
from __future__ import annotations

import math

import numpy as np

from ..model import Profile

PLACED_SLACK = 3e-4   # seconds: the stamp's clock offset (lastran.py, 20-60 µs) and its drift
NARROW_RUNS = 2       # a placed change whose thread went on a core at most this often lies in the CPU before the stamp


def split_cpu_at_stack_changes(profile: Profile) -> Profile:
    """A sample's CPU delta covers the whole interval since the thread's previous sample; given all
    to the stack seen at its end, the tail of a busy function lands on the sleep after it. Where the
    stack changed, split the delta between the previous and the current stack, assuming each kept
    its CPU rate: rate_i = u*rate_prev + (1-u)*rate_next gives u, the share still in the previous
    stack, each rate its neighbouring interval's. On bench/groundtruth.py the split took the CPU
    error from 2.6 points to at most 1 (bench/RESULTS.md); the rate of a run of up to 8 intervals
    did worse there (3 runs each, worst wall 5.8-6.0 pp and CPU 2.3-3.3 pp, against 2.7-3.5 and 1-2).
    The interval's wall time is split at the same point. Then no sample keeps more CPU than its wall
    time (the excess moves to the next sample).
    Per-sample ``cpu`` and the stacks' ``cpu`` totals are both updated; each thread's sum is kept
    but for a last excess, which is dropped. For the in-process samplers' recordings (the built-in
    sampler, child processes)."""
    sm = profile.samples
    if sm is None or not len(sm) or "cpu" not in sm or "wall" not in sm:
        return profile
    orig = sm["cpu"].to_numpy(np.float64)
    new = orig.copy()
    wall = sm["wall"].to_numpy(np.float64)
    new_wall = wall.copy()
    stack = sm["stack"].to_numpy()
    # Where the sampler placed a change between two waits by the scheduler's stamp (lastran.py),
    # the wall before it stays with the previous stack; it is narrowed to the CPU before the stamp
    # only where the thread went on a core at most NARROW_RUNS times.
    at = sm["change_at"].to_numpy(np.float64) if "change_at" in sm else None
    runs = sm["change_runs"].to_numpy(np.float64) if at is not None and "change_runs" in sm else None
    t = sm["time"].to_numpy(np.float64) if at is not None else None
    width = np.full(len(sm), np.nan) if at is not None else None
    c0 = np.nan_to_num(orig)
    rate = np.clip(np.divide(c0, wall, out=np.zeros_like(c0), where=wall > 0), 0.0, 1.0)
    for idx in sm.groupby("thread", sort=False).indices.values():  # each thread's rows, in time order
        for k in range(1, len(idx) - 1):
            i, j, n = idx[k], idx[k - 1], idx[k + 1]
            if stack[i] == stack[j] or math.isnan(orig[i]) or math.isnan(new[j]):
                continue
            rp, rn = rate[j], rate[n]
            u = 0.5 if abs(rp - rn) < 1e-9 else min(max((rate[i] - rn) / (rp - rn), 0.0), 1.0)
            # The previous stack's part of the CPU: u*rp of u*rp + (1-u)*rn. Inside [0, 1] that is
            # u*rp*wall; clipped (a neighbour's rate was under-measured) it stays consistent with u.
            den = u * rp + (1 - u) * rn
            prev = orig[i] * (u * rp / den if den > 0 else u)
            new[j] += prev
            new[i] -= prev
            # The same boundary splits the interval's wall time: u of it was still the previous stack,
            # unless the sampler placed the change by the scheduler's stamp.
            if at is not None and not math.isnan(at[i]) and wall[i] > 0:
                u = min(max(1.0 - (t[i] - at[i]) / wall[i], 0.0), 1.0)
                if runs is not None and runs[i] <= NARROW_RUNS:   # else its interval stays its bound
                    width[i] = orig[i] + PLACED_SLACK   # the change lies in the CPU run before the stamp
            new_wall[j] += u * wall[i]
            new_wall[i] -= u * wall[i]
        # A CPU clock read a moment after the pass can exceed the pass's wall time: carry the excess
        # to the next sample, so no stack has cpu > wall and cpu + off-CPU = wall holds per thread.
        carry = 0.0
        for i in idx:
            if math.isnan(new[i]):
                continue
            c = new[i] + carry
            new[i], carry = (new_wall[i], c - new_wall[i]) if c > new_wall[i] else (c, 0.0)
    moved = np.nan_to_num(new - orig)
    moved_wall = new_wall - wall
    if at is not None:   # the placements' widths stay for the intervals (uncertainty.py); the stamps go
        sm = sm.drop(columns=[c for c in ("change_at", "change_runs") if c in sm]).assign(change_width=width)
    if not moved.any() and not moved_wall.any():
        return profile.replace(samples=sm) if at is not None else profile
    stacks = profile.stacks.copy()
    for col, delta in (("cpu", moved), ("wall", moved_wall)):
        stacks[col] = stacks[col].to_numpy(np.float64) + np.bincount(stack, weights=delta, minlength=len(stacks))
    return profile.replace(stacks=stacks, samples=sm.assign(cpu=new, wall=new_wall))

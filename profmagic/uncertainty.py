"""How sure each figure is: 95% intervals for function and call-path totals, from how the backend
sampled (docs/uncertainty.md has the model and its derivation).

- ``timed``: samples carry measured intervals and come in time order (``Profile.samples``): the
  sampler, perf, eu-stack, py-spy in its timed format. A total misses only where its stack changed,
  by part of the interval around each change.
- ``counted``: a total is a sample count times a nominal or calibrated time per sample (calibrated
  py-spy, pyinstrument, any profile without time-ordered samples): the binomial rule on the count.
- ``exact``: every call or allocation recorded (cProfile, memray, memory metrics): no interval.

Knows numpy and pandas only; the model and the views hand it their arrays (``fn``: a function id
per frame, stacks laid end to end; ``lengths``: frames per stack row).
"""
from __future__ import annotations

import numpy as np

Z = 1.959963984540054   # two-sided 95% of a normal
EXACT, TIMED, COUNTED = "exact", "timed", "counted"
EXACT_BACKENDS = ("cprofile", "memray")
EXACT_METRICS = ("bytes", "allocated", "allocations")
EXPONENTIAL = ("py-spy",)   # backends whose timer waits exponential intervals (docs/uncertainty.md)
ONE_END = ("eu-stack",)     # backends that give an interval's CPU wholly to one of its ends
SPLIT = ("sampler",)        # backends that share an interval's CPU between the samples around a change
SWITCHED = ("perf",)        # backends that stamp each switch out, its sample weighing the time off-CPU
WIDE = 2.0   # points: a resolution wider than this comes with how to narrow it
_P = np.uint64(0x9E3779B97F4A7C15)   # path hash multiplier (odd: a bijection mod 2**64)


def kind(profile, metric: str | None = None) -> str:
    """How ``metric``'s weights were made: EXACT, TIMED or COUNTED (module docstring)."""
    m = profile.meta
    metric = metric or profile.metric
    backend = str(m.get("backend") or m.get("format") or "")
    if metric in EXACT_METRICS or backend in EXACT_BACKENDS or m.get("format") == "pstats":
        return EXACT
    if not profile.sample_count and "calls" in profile.stacks:
        return EXACT
    if metric == "samples":
        return COUNTED
    timing = str(m.get("timing") or "")
    if timing.startswith(("calibrated", "1/rate")) or backend == "pyinstrument":
        return COUNTED
    return TIMED if _timed(profile, metric) else COUNTED


def _timed(profile, metric: str) -> bool:
    """Whether the profile keeps a time order with ``metric``'s weights (``_timeline``, unsorted)."""
    s = profile.samples
    if s is None or not len(s) or "time" not in s:
        return False
    cols = ("wall", "cpu") if metric == "off_cpu" else (metric,)
    return all(c in s for c in cols) and not s["time"].isna().any() and not s[cols[0]].isna().all()


def _timeline(profile, metric: str):
    """(time, stack row, thread code, weight) sorted by thread then time, or None when the profile
    keeps no time order for ``metric``."""
    s = profile.samples
    if s is None or not len(s) or "time" not in s:
        return None
    if metric == "off_cpu":
        if "wall" not in s or "cpu" not in s:
            return None
        w = np.clip(s["wall"].to_numpy(np.float64) - s["cpu"].to_numpy(np.float64), 0, None)
    elif metric in s:
        w = s[metric].to_numpy(np.float64)
        if metric == "cpu" and "cpu_delta" in s:   # the interval's CPU, before the reader placed it
            w = np.fmax(w, s["cpu_delta"].to_numpy(np.float64))
    else:
        return None
    t = s["time"].to_numpy(np.float64)
    if np.isnan(t).any() or np.isnan(w).all():
        return None
    th = s["thread"].cat.codes.to_numpy(np.int64)
    r = s["stack"].to_numpy(np.int64)
    # A row may stand for a run of samples (py-spy's timed format writes one where a stack
    # changes): its samples share its weight.
    c = np.maximum(np.nan_to_num(s["samples"].to_numpy(np.float64), nan=1.0), 1.0) if "samples" in s else None
    order = np.lexsort((t, th))
    return t[order], r[order], th[order], np.nan_to_num(w[order]), None if c is None else c[order]


def transitions(profile, metric: str, rows: np.ndarray | None = None):
    """The stack changes of a timed profile: distinct (from row, to row) pairs (-1: nothing, at a
    thread's first and last sample), with the summed variance and summed width of the intervals
    the changes fell in. ``rows``: only these stack rows' samples count. None for an untimed one."""
    tl = _timeline(profile, metric)
    if tl is None:
        return None
    t, r, th, w, c = tl
    if rows is not None:
        keep = np.zeros(len(profile.stacks), bool)
        keep[np.asarray(rows, np.int64)] = True
        k = keep[r]
        t, r, th, w = t[k], r[k], th[k], w[k]
        c = None if c is None else c[k]
    if not len(r):
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), np.zeros(0)
    same = th[1:] == th[:-1]
    # The interval a change fell in: the sampling interval on either side of it (a sample's weight
    # is the time since the previous sample for some backends, to the next for others, and a
    # late tick moves time from one to the other), or the gap between the two timestamps.
    period = w if c is None else w / c
    g = np.maximum(period[1:], period[:-1])
    if c is None and metric == "wall":
        g = np.maximum(g, t[1:] - t[:-1])
    if metric == "cpu" and str(profile.meta.get("backend") or "") in SPLIT:
        g = period[1:] + period[:-1]   # the change's interval, part of it moved to the other sample
    s = profile.samples
    if metric in ("wall", "off_cpu") and "change_width" in s:
        # A change between two waits placed by the scheduler's stamp lies within its width
        # (transforms/cpu_split.py); the others keep their interval.
        o = np.lexsort((s["time"].to_numpy(np.float64), s["thread"].cat.codes.to_numpy(np.int64)))
        cw = s["change_width"].to_numpy(np.float64)[o]
        cw = cw if rows is None else cw[k]
        g = np.where(np.isnan(cw[1:]), g, np.minimum(g, cw[1:]))
    if metric in ("cpu", "wall") and "wall" in s and "cpu" in s and str(profile.meta.get("backend") or "") in SWITCHED:
        # The thread ran between two samples for the gap less the first one's time off-CPU: a change
        # (made while running) lies in that, or in a cpu-clock sample's period (its CPU may have gone
        # to one far off). Off-CPU time is stamped exactly, so a sleep's length widens nothing.
        o = np.lexsort((s["time"].to_numpy(np.float64), s["thread"].cat.codes.to_numpy(np.int64)))
        cpu = np.nan_to_num(s["cpu"].to_numpy(np.float64))[o]
        off = np.nan_to_num(s["wall"].to_numpy(np.float64))[o] - cpu
        cpu, off = (cpu, off) if rows is None else (cpu[k], off[k])
        ran = np.clip(t[1:] - t[:-1] - off[:-1], 0, None)
        g = np.maximum(g, ran) if metric == "cpu" else np.maximum(np.maximum(cpu[1:], cpu[:-1]), ran)
    change = same & (r[1:] != r[:-1])
    first = np.r_[True, ~same]
    last = np.r_[~same, True]
    # A change's moment lies somewhere in the interval g it fell in: an offset in [0, g], mean square
    # g²/3. Offsets are not taken to cancel between a run's entry and exit: a tick delayed behind a
    # thread holding the GIL sees the change at one end of its interval, every time.
    A = np.concatenate([r[:-1][change], np.full(int(first.sum()), -1), r[last]])
    B = np.concatenate([r[1:][change], r[first], np.full(int(last.sum()), -1)])
    G = np.concatenate([g[change], period[first], period[last]])
    V = np.concatenate([g[change], period[first], period[last]]) ** 2 / 3
    if str(profile.meta.get("backend") or "") in EXPONENTIAL:
        # The first sample after a change comes an Exp(period) wait later: mean square 2·period²
        # (6x g²/3), and nothing bounds it.
        V, G = 6 * V, np.full(len(G), np.inf)
    code = (A + 1) * (len(profile.stacks) + 1) + (B + 1)
    u, inv = np.unique(code, return_inverse=True)
    n = len(profile.stacks) + 1
    return u // n - 1, u % n - 1, np.bincount(inv, V, len(u)), np.bincount(inv, G, len(u))


def _half(V: np.ndarray, G: np.ndarray, one_end: bool = False) -> np.ndarray:
    """95% half-width from summed variance, never more than the summed widths (a hard bound).
    ``one_end``: each change's error has one sign at every call, so they add: at least half of G."""
    h = Z * np.sqrt(V)
    return np.minimum(np.maximum(h, G / 2) if one_end else h, G)


def _explode(X: np.ndarray, start: np.ndarray, count: np.ndarray):
    """For pairs whose row is X (-1: none): (pair index, position) of every item of row X."""
    c = np.where(X >= 0, count[np.maximum(X, 0)], 0)
    idx = np.repeat(np.arange(len(X)), c)
    off = np.arange(int(c.sum())) - np.repeat(np.cumsum(c) - c, c)
    return idx, start[np.maximum(X, 0)][idx] + off


def _timed_functions(profile, metric, tr, nfn, key_fn, key_row, leaf):
    A, B, V, G = tr
    nrows = len(profile.stacks)
    keys = key_row.astype(np.int64) * max(nfn, 1) + key_fn
    if len(keys) > 1 and (keys[1:] < keys[:-1]).any():
        o = np.argsort(keys, kind="stable")
        keys, key_fn, key_row = keys[o], key_fn[o], key_row[o]
    start = np.searchsorted(key_row, np.arange(nrows + 1))
    count = np.diff(start)
    # The functions on one side of a change and not on the other: each side's (change, function)
    # codes come sorted, so one stable sort merges them, and a code seen once is in one side only.
    span = max(nfn, 1)
    codes = []
    for X in (A, B):
        idx, pos = _explode(X, start, count)
        codes.append(idx.astype(np.int64) * span + key_fn[pos])
    c = np.concatenate(codes)
    c.sort(kind="stable")
    twin = np.zeros(len(c), bool)
    if len(c) > 1:
        same = c[1:] == c[:-1]
        twin[1:] |= same
        twin[:-1] |= same
    c = c[~twin]
    f, i = c % span, c // span
    tv, tg = np.bincount(f, V[i], nfn), np.bincount(f, G[i], nfn)
    la, lb = np.where(A >= 0, leaf[np.maximum(A, 0)], -1), np.where(B >= 0, leaf[np.maximum(B, 0)], -1)
    sv, sg = np.zeros(nfn), np.zeros(nfn)
    for L in (la, lb):
        k = (la != lb) & (L >= 0)
        sv += np.bincount(L[k], V[k], nfn)
        sg += np.bincount(L[k], G[k], nfn)
    one = metric == "cpu" and str(profile.meta.get("backend") or "") in ONE_END
    return _half(sv, sg, one), _half(tv, tg, one)


def per_sample(profile, metric: str) -> tuple[float, float]:
    """(weight per sample, samples) for the counting rule: the profile's time (or ``metric``) over
    its sample count."""
    n = float(profile.sample_count)
    base = "wall" if "wall" in profile.metrics and metric in ("wall", "cpu", "off_cpu") else metric
    tot = float(np.nansum(profile.weights(base).to_numpy(np.float64))) if base != "samples" else n
    return (tot / n if n else 0.0), n


def catch_up(profile) -> float:
    """Seconds a calibrated py-spy recording may have put on the wrong stacks by catching up: behind
    its timer (no core, a long stop), py-spy takes the missed samples back to back, all at the stack
    of that moment. A lag from before the cell leaves the cell's thread with more samples than the
    asked rate gives over its measured time; the excess beyond Poisson chance (z·sqrt(expected))
    is that many samples, each worth one calibrated time per sample, that may belong to any function.
    A lag caught up within the cell keeps the count and cannot be seen here (docs/uncertainty.md)."""
    m = profile.meta
    if str(m.get("backend") or "") != "py-spy" or not m.get("calibrated"):
        return 0.0
    asked, eff, wall = m.get("requested_rate"), m.get("rate"), m.get("calibrated_wall")
    if not asked or not eff or not wall:
        return 0.0
    expect = float(asked) * float(wall)
    excess = float(eff) * float(wall) - expect - Z * np.sqrt(expect)
    return max(excess, 0.0) / float(eff)


def counted(value: np.ndarray, unit: float, n: float) -> tuple[np.ndarray, np.ndarray]:
    """Wilson's 95% interval for a count k = value / unit of n samples, as (lo, hi) in value's unit."""
    value = np.asarray(value, np.float64)
    if not n or not unit:
        return value.copy(), value.copy()
    p = np.clip(value / unit / n, 0.0, 1.0)
    z2 = Z * Z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z / (1 + z2 / n) * np.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return np.maximum(centre - half, 0.0) * n * unit, (centre + half) * n * unit


def _counted_of(profile, metric: str, value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The counting rule's (lo, hi) for ``value`` in ``metric``: Wilson's interval on the profile's
    samples, widened by a calibrated py-spy recording's catch-up."""
    unit, n = per_sample(profile, metric)
    lo, hi = counted(value, unit, n)
    c = catch_up(profile)
    return np.maximum(lo - c, 0.0), hi + c


def function_intervals(profile, metric: str, leaves: tuple, pairs: list, self_w: np.ndarray, total_w: np.ndarray):
    """Per function id: (self_lo, self_hi, total_lo, total_hi). ``leaves``: (stack rows with a
    frame, their leaf's function id), as ``flatstacks.Flat.leaves``; ``pairs``: every distinct
    (function, stack row) pair, as ``model.stack_functions`` yields them (``leaves`` and ``pairs``
    needed only by a TIMED metric); ``self_w``/``total_w``: the functions' self and total in ``metric``."""
    k = kind(profile, metric)
    nfn = len(total_w)
    if k == EXACT:
        return self_w.copy(), self_w.copy(), total_w.copy(), total_w.copy()
    if k == COUNTED:
        return (*_counted_of(profile, metric, self_w), *_counted_of(profile, metric, total_w))
    leaf = np.full(len(profile.stacks), -1, np.int64)   # per stack row; -1: no frame
    leaf[leaves[0]] = leaves[1]
    key_fn = np.concatenate([f for f, _ in pairs]).astype(np.int64) if pairs else np.zeros(0, np.int64)
    key_row = np.concatenate([r for _, r in pairs]).astype(np.int64) if pairs else np.zeros(0, np.int64)
    hs, ht = _timed_functions(profile, metric, transitions(profile, metric), nfn, key_fn, key_row, leaf)
    self_lo, self_hi, total_lo, total_hi = self_w - hs, self_w + hs, total_w - ht, total_w + ht
    moved = _moved(profile, metric)
    if moved is not None:   # CPU the reader moved off a stack may be that stack's; CPU it moved on, another's
        given, got = moved
        on = leaf >= 0
        self_lo -= np.bincount(leaf[on], got[on], nfn)
        self_hi += np.bincount(leaf[on], given[on], nfn)
        total_lo -= np.bincount(key_fn, got[key_row], nfn)
        total_hi += np.bincount(key_fn, given[key_row], nfn)
    return np.maximum(self_lo, 0.0), self_hi, np.maximum(total_lo, 0.0), total_hi


def _moved(profile, metric: str):
    """Per stack row, (CPU the reader moved off its samples, CPU it moved onto them) away from any
    stack change, where the reader says so (``cpu_moved``: eu-stack's CPU of a thread seen only
    asleep between two snapshots, shared among its running stacks); None elsewhere."""
    s = profile.samples
    if metric != "cpu" or s is None or "cpu_moved" not in s:
        return None
    net = np.nan_to_num(s["cpu_moved"].to_numpy(np.float64))
    rows, n = s["stack"].to_numpy(np.int64), len(profile.stacks)
    return np.bincount(rows, np.clip(-net, 0, None), n), np.bincount(rows, np.clip(net, 0, None), n)


# -- call paths (icicle boxes) ------------------------------------------------------------------------
def _prefix_hashes(fn: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Per frame, a hash of its stack's function path from the root to it (uint64)."""
    h = np.zeros(len(fn), np.uint64)
    alive = np.flatnonzero(lengths > 0)
    pos = starts[alive].astype(np.int64)
    prev = np.zeros(len(alive), np.uint64)
    d = 0
    with np.errstate(over="ignore"):
        while len(alive):
            prev = prev * _P + fn[pos].astype(np.uint64) + np.uint64(1)
            h[pos] = prev
            d += 1
            more = lengths[alive] > d
            alive, pos, prev = alive[more], pos[more] + 1, prev[more]
    return h


def node_hashes(parent: np.ndarray, key: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """Per tree node (parents before children), the hash of its function path; 0 at the root, and
    for nodes whose key is no function (the root, an "(other)")."""
    h = np.zeros(len(parent), np.uint64)
    order = np.argsort(depth, kind="stable")
    bad = np.zeros(len(parent), bool)
    with np.errstate(over="ignore"):
        for d in np.unique(depth[order])[1:] if len(order) else []:
            n = np.flatnonzero(depth == d)
            h[n] = h[parent[n]] * _P + np.maximum(key[n], 0).astype(np.uint64) + np.uint64(1)
            bad[n] = bad[parent[n]] | (key[n] < 0)
    h[bad] = 0
    return h


def path_halves(profile, metric: str, fn: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
                rows: np.ndarray | None = None):
    """For a timed profile: (path hashes, 95% half-width of each path's total, the root's), every
    call path that moved at some stack change (the others have none); None for an untimed one. ``fn``: the function
    id (or any key) per frame of the stacks laid end to end; ``rows``: only these stack rows count."""
    if kind(profile, metric) != TIMED:
        return None
    A, B, V, G = transitions(profile, metric, rows)
    H = _prefix_hashes(fn, starts, lengths)
    ln = lengths.astype(np.int64)
    # Common path length of each change's two stacks: the nodes below it moved.
    common = np.zeros(len(A), np.int64)
    live, d = np.flatnonzero((A >= 0) & (B >= 0)), 0
    while len(live):
        a, b = A[live], B[live]
        ok = (ln[a] > d) & (ln[b] > d)
        live, a, b = live[ok], a[ok], b[ok]
        live = live[H[starts[a] + d] == H[starts[b] + d]]
        d += 1
        common[live] = d
    hs, vs, gs = [], [], []
    for X in (A, B):
        c = np.where(X >= 0, ln[np.maximum(X, 0)] - common, 0)
        idx = np.repeat(np.arange(len(X)), c)
        off = np.arange(int(c.sum())) - np.repeat(np.cumsum(c) - c, c)
        hs.append(H[starts[np.maximum(X, 0)][idx] + common[idx] + off])
        vs.append(V[idx])
        gs.append(G[idx])
    u, inv = np.unique(np.concatenate(hs), return_inverse=True)
    edge = (A < 0) | (B < 0)   # the root moves only where a thread's sampling starts or ends
    return (u, _half(np.bincount(inv, np.concatenate(vs), len(u)), np.bincount(inv, np.concatenate(gs), len(u))),
            float(_half(V[edge].sum(), G[edge].sum())))


def node_intervals(profile, metric: str, fn: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
                   parent: np.ndarray, key: np.ndarray, depth: np.ndarray, total: np.ndarray,
                   rows: np.ndarray | None = None, halves=False) -> tuple[np.ndarray, np.ndarray]:
    """Per node of a call tree over ``fn`` (its keys are ``fn``'s values): (lo, hi) of its total.
    The root and "(other)" nodes of a timed profile get the counting rule; nothing of an exact one
    has an interval. ``halves``: ``path_halves``' result, when already made."""
    k = kind(profile, metric)
    total = np.asarray(total, np.float64)
    if k == EXACT:
        return total.copy(), total.copy()
    lo, hi = _counted_of(profile, metric, total)
    if k == COUNTED:
        return lo, hi
    u, half, root = path_halves(profile, metric, fn, starts, lengths, rows) if halves is False else halves
    nh = node_hashes(parent, key, depth)
    j = np.minimum(np.searchsorted(u, nh), max(len(u) - 1, 0))
    found = (u[j] == nh) if len(u) else np.zeros(len(nh), bool)
    h = np.where(found, half[j] if len(u) else 0.0, 0.0)
    h = np.where(np.asarray(depth) == 0, root, h)
    real = (nh != 0) | (np.asarray(depth) == 0)
    return np.where(real, np.maximum(total - h, 0.0), lo), np.where(real, total + h, hi)


def below(value, lo, hi) -> np.ndarray:
    """Figures smaller than their own uncertainty (the interval's half-width)."""
    value = np.asarray(value, np.float64)
    return (value > 0) & ((np.asarray(hi) - np.asarray(lo)) / 2 >= value)


# -- differences --------------------------------------------------------------------------------------
def significant(change, lo_a, hi_a, lo_b, hi_b) -> np.ndarray:
    """Whether each change (b − a) lies outside the two runs' combined 95% uncertainty: |change|
    over the root sum of squares of the two half-widths (independent runs)."""
    ha = (np.asarray(hi_a, np.float64) - np.asarray(lo_a, np.float64)) / 2
    hb = (np.asarray(hi_b, np.float64) - np.asarray(lo_b, np.float64)) / 2
    return np.abs(np.asarray(change, np.float64)) > np.sqrt(ha * ha + hb * hb)


def not_comparable(a, b) -> list[str]:
    """Why two profiles' figures cannot be compared (empty when they can): different clocks (mode),
    or rates more than 2x apart in a counted profile, whose totals scale with its rate."""
    out = []
    ma, mb = a.meta.get("mode"), b.meta.get("mode")
    if ma and mb and ma != mb and "both" not in (ma, mb):
        out.append(f"the runs measured different clocks ({ma} against {mb})")
    ra, rb = a.meta.get("rate"), b.meta.get("rate")
    if ra and rb and max(ra, rb) > 2 * min(ra, rb) and COUNTED in (kind(a, a.metric), kind(b, b.metric)):
        out.append(f"their rates differ more than 2x ({float(ra):.4g} Hz against {float(rb):.4g} Hz)")
    return out


# -- the header's sentence ----------------------------------------------------------------------------
def resolution(profile, metric: str | None = None, functions=None) -> str:
    """The resolution in words, e.g. "±1.9 points at 95% for a 25% share (360 samples)", and how to
    narrow it where it is wide. ``functions``: ``profile.functions(metric)``, when already made."""
    metric = metric or profile.metric
    k = kind(profile, metric)
    if k == EXACT:
        return "Exact: every call or allocation was recorded, so these figures carry no sampling error"
    n = int(round(profile.sample_count))
    rate = profile.meta.get("rate")
    how = (f"; to narrow it, raise --rate (now {float(rate):.4g} Hz) or profile a longer run"
           if rate else "; to narrow it, sample faster or profile a longer run")
    if not n:
        return "No samples: no resolution"
    if k == COUNTED:
        pts = 100 * Z * np.sqrt(0.25 * 0.75 / n)
        c = catch_up(profile)
        late = (f"; py-spy took more samples than its rate gives, catching up after it fell behind, so "
                f"every interval is {c * 1e3:,.0f} ms wider each way (--timing timed weighs each sample by "
                "its own interval, so a catch-up weighs nothing)" if c else "")
        return (f"Resolution: ±{pts:.2g} points at 95% for a 25% share ({n:,} samples, each a count)"
                + late + (how if pts > WIDE else ""))
    f = profile.functions(metric) if functions is None else functions
    total = float(np.nansum(profile.weights(metric).to_numpy(np.float64)))
    if not total or not len(f):
        return f"Resolution: no {metric} time to resolve ({n:,} samples)"
    tl = _timeline(profile, metric)
    per = tl[3] if tl is None or tl[4] is None else tl[3] / tl[4]
    g = float(np.median(per[per > 0])) if tl is not None and (per > 0).any() else 0.0
    once = 100 * min(Z * np.sqrt(2 / 3), 2.0) * g / total
    half = (f["total_hi"] - f["total_lo"]).to_numpy(np.float64) / 2 / total * 100
    i = int(np.argmax(half))
    wide = float(half[i])
    return (f"Resolution: ±{once:.2g} points at 95% for a function entered once, more for one entered "
            f"often (widest here: ±{wide:.2g} points, {f['name'].iloc[i]}) ({n:,} timed samples)"
            + (how if wide > WIDE else ""))

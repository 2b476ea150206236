"""Call trees over a Profile, built with numpy, and pruning that keeps every total exact.

Nodes merge by function (frames sharing name and file). Node 0 is the root; a parent's id is
always smaller than its children's ids.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..analysis import match_key
from ..model import METRIC_LABELS, Profile, stack_functions
from ..flatstacks import flat, function_ids
from .memo import memo

ROOT = -1   # key of the root node
OTHER = -2  # key of an "(other)" node that holds pruned children
MAX_NODES = 8000  # keeps a plotly icicle near 1 MB (see bench/RESULTS.md)


@dataclass
class Tree:
    parent: np.ndarray   # int64, -1 for the root
    key: np.ndarray      # function id, ROOT or OTHER
    depth: np.ndarray    # int64, root 0
    total: np.ndarray    # float64, weight of every sample through the node
    self: np.ndarray     # float64, weight of samples ending at the node
    samples: np.ndarray  # float64, sample count through the node
    folded: np.ndarray   # int64, nodes folded into an OTHER node (0 elsewhere)
    extra: dict = field(default_factory=dict)  # other metric -> (total, self), on the same nodes

    def __len__(self) -> int:
        return len(self.parent)

    def children(self, node: int) -> np.ndarray:
        """Child ids, heaviest first."""
        kids = np.flatnonzero(self.parent == node)
        return kids[np.argsort(-self.total[kids], kind="stable")]


def function_table(profile: Profile) -> pd.DataFrame:
    """One row per function id: name, file, line (the smallest seen), kind, module (computed once
    per profile)."""
    return memo(profile, "function_table", lambda: _function_table(profile))


def _function_table(profile: Profile) -> pd.DataFrame:
    fr = profile.frames
    fn = function_ids(profile)[fr.index.to_numpy()] if len(fr) else np.zeros(0, np.int64)
    df = fr.assign(_fn=fn)
    g = df.groupby("_fn", sort=True)
    out = g.agg(name=("name", "first"), file=("file", "first"), kind=("kind", "first"))
    out["line"] = g["line"].min()
    out["module"] = [module_of(f, k) for f, k in zip(out["file"], out["kind"])]
    out.index.name = "function"
    return out


def module_of(file: str, kind) -> str:
    """A short module label for colouring: the package directory or the library name."""
    if not file:
        return str(kind)
    f = str(file).replace("\\", "/")
    if "site-packages/" in f:
        return f.split("site-packages/", 1)[1].split("/", 1)[0]
    base = os.path.basename(f)
    if ".so" in base:
        return base.split(".so", 1)[0]
    return os.path.basename(os.path.dirname(f)) or base


def short_file(file: str, line) -> str:
    """The last two path parts and the line: enough to tell files apart in a hover."""
    f = str(file or "").replace("\\", "/")
    parts = [p for p in f.split("/") if p]
    s = "/".join(parts[-2:]) if parts else ""
    if line is not None and line is not pd.NA and not (isinstance(line, float) and np.isnan(line)):
        s = f"{s}:{int(line)}" if s else f"line {int(line)}"
    return s


def metric_weights(profile: Profile, metric: str) -> tuple[np.ndarray, int]:
    """Weights per stacks row in ``metric`` and the number of rows whose weight is unknown (NaN).

    Raises ValueError when the profile cannot know the metric at all.
    """
    if metric not in profile.metrics:
        backend = profile.meta.get("backend") or profile.meta.get("format") or "this source"
        raise ValueError(f"{backend} cannot measure {METRIC_LABELS.get(metric, metric)}; "
                         f"this profile has: {', '.join(profile.metrics)}")
    w = profile.weights(metric).to_numpy(dtype=np.float64)
    nan = np.isnan(w)
    return np.where(nan, 0.0, w), int(nan.sum())


def thread_rows(profile: Profile, thread: str | None) -> np.ndarray:
    """Stacks row ids of one thread (None: all threads)."""
    if thread is None:
        return np.arange(len(profile.stacks))
    if thread not in set(profile.threads):
        raise ValueError(f"no thread {thread!r}; threads: {', '.join(map(str, profile.threads))}")
    return np.flatnonzero((profile.stacks["thread"] == thread).to_numpy())


def build(fn: np.ndarray, base: np.ndarray, n: np.ndarray, weights: dict, rows: np.ndarray | None = None,
          step: int = 1, cut: float = 0.0) -> Tree:
    """Merge paths into a tree, one level at a time. Row i's path is the function ids
    ``fn[base[i] + step * d]`` for d in 0..n[i]-1 (step -1 walks a stack from a frame to its root).

    ``weights``: metric -> one weight per row. The first is the tree's own (``total``, ``self``);
    a "samples" entry gives ``samples``; the others go to ``Tree.extra``. Only ``rows`` count
    (default: all). With ``cut`` > 0, nodes lighter than ``cut`` (in the first metric) are not
    built: under each parent they become one "(other)" node, and their rows go no deeper; the
    totals of every node built are exact.

    The rows still descending are packed arrays (node, frames left, first-metric weight), narrowed
    at each level; a level's nodes are its distinct (parent, function) pairs and their totals one
    ``bincount``. Each row's last node is kept: self, in every metric, is one ``bincount`` over
    the rows, and the other metrics' totals are summed up the tree from it.
    """
    names = list(weights)
    full = [np.asarray(weights[m], dtype=np.float64) for m in names]
    n, base = np.asarray(n), np.asarray(base)
    # Row-wide arrays are int32 where they fit (fresh memory is costly: half the bytes, half the faults).
    ix = np.int64 if max(len(fn), len(n)) >= 1 << 30 else np.int32
    span = int(fn.max()) + 1 if len(fn) else 1
    view = None if rows is None else np.asarray(rows, dtype=np.int64)
    last = np.zeros(len(n), ix)   # each row's last node; -1 - its parent's for a row into a node of no weight
    parent, key, folded = [np.array([-1])], [np.array([ROOT])], [np.array([0])]
    total0 = [np.array([full[0].sum() if view is None else full[0][view].sum()])]
    bounds = [0, 1]                         # level d's nodes are ids bounds[d]..bounds[d+1]-1
    live = np.flatnonzero(n > 0) if view is None else view[n[view] > 0]   # rows still descending
    live = live.astype(ix)
    left = n[live].astype(ix)               # their frames from this level on
    node = np.zeros(len(live), ix)          # their node at the level above (level-local id)
    w0 = full[0][live]
    pos = base[live]
    small = np.uint16 if span <= 1 << 16 else fn.dtype   # function ids read ahead, in as few bytes as they fit
    d = 0
    while len(live):
        if d % AHEAD == 0:   # the next AHEAD frames of each live row, read row by row
            ahead, at = _ahead(fn, pos, left, step, small), np.arange(len(live), dtype=ix)
            del pos
        k = node.astype(np.int64)
        k *= span
        k += ahead[d % AHEAD][at]
        # pandas' hash factorize: ~8x faster than np.unique's sort when a level has few nodes;
        # the hint keeps its table small while a level has few nodes (it grows when needed)
        inv, uniq = pd.factorize(k, size_hint=min(len(k), 4 * (bounds[-1] - bounds[-2]) + 1024))
        del k
        level = np.bincount(inv, weights=w0, minlength=len(uniq))
        start = bounds[-2]
        if cut > 0 and (level < cut).any():
            keep = level >= cut
            # Nodes of no weight vanish, as pruning the whole tree folds no node of no width
            light = np.flatnonzero(~keep & (level > 0))
            group, holders = pd.factorize(uniq[light] // span)   # an (other) node per parent
            n_keep = int(keep.sum())
            ids = np.full(len(uniq), -1, np.int64)
            ids[keep] = np.arange(n_keep)
            ids[light] = n_keep + group
            parent += [start + uniq[keep] // span, start + holders]
            key += [uniq[keep] % span, np.full(len(holders), OTHER)]
            folded += [np.zeros(n_keep, np.int64), np.bincount(group, minlength=len(holders))]
            total0.append(np.concatenate([level[keep], np.bincount(group, weights=level[light],
                                                                   minlength=len(holders))]))
            here = ids[inv]
            go_on = (left > 1) & keep[inv]
        else:
            parent.append(start + uniq // span)
            key.append(uniq % span)
            folded.append(np.zeros(len(uniq), np.int64))
            total0.append(level)
            here = inv
            go_on = left > 1
        del inv
        bounds.append(bounds[-1] + len(total0[-1]))
        end = np.flatnonzero(~go_on)
        h = here[end]
        last[live[end]] = np.where(h >= 0, bounds[-2] + h, -1 - (start + node[end].astype(np.int64)))
        del end, h
        live, left, w0, at = live[go_on], left[go_on], w0[go_on], at[go_on]
        node = here[go_on].astype(ix)
        left -= 1
        del here, go_on
        d += 1
        if d % AHEAD == 0:
            del ahead
            pos = base[live] + step * d
    parent_a = np.concatenate(parent).astype(np.int64)
    size = len(parent_a)
    if view is not None:
        last = last[view]
    ended = last >= 0
    every = bool(ended.all())
    gone = np.flatnonzero(~ended)
    sums = {}
    for m, w in zip(names, full):
        if view is not None:
            w = w[view]
        own = np.bincount(last, weights=w, minlength=size) if every else \
            np.bincount(last[ended], weights=w[ended], minlength=size)
        if m == names[0]:
            sums[m] = (np.concatenate(total0), own)
        else:   # a row into a node of no weight (which vanished) still counts in the node's ancestors
            below = np.bincount(-1 - last[gone], weights=w[gone], minlength=size) if len(gone) else 0.0
            sums[m] = (_up(parent_a, bounds, own + below), own)
    samples = sums["samples"][0] if "samples" in sums else np.zeros(size)
    depth = np.repeat(np.arange(len(bounds) - 1), np.diff(bounds))
    return Tree(parent_a, np.concatenate(key).astype(np.int64), depth, *sums[names[0]], samples,
                np.concatenate(folded).astype(np.int64),
                {m: v for m, v in sums.items() if m not in (names[0], "samples")})


def _up(parent: np.ndarray, bounds: list, own: np.ndarray) -> np.ndarray:
    """Subtree sums of ``own``, from the deepest level up (``bounds``: each level's first id)."""
    acc = own.copy()
    for d in range(len(bounds) - 2, 0, -1):
        lo, hi = bounds[d], bounds[d + 1]
        up = bounds[d - 1]
        acc[up:lo] += np.bincount(parent[lo:hi] - up, weights=acc[lo:hi], minlength=lo - up)
    return acc


AHEAD = 8   # levels of frames read at once: a row's next frames share a cache line, and reading
            # one frame of every row per level missed the cache at every frame of a large profile


def _ahead(fn: np.ndarray, pos: np.ndarray, left: np.ndarray, step: int, dtype=None) -> np.ndarray:
    """``out[j, i] = fn[pos[i] + step * j]`` for j < AHEAD (repeating a row's last frame past its
    end), a block of rows at a time so that a row's frames are read while in the cache."""
    out = np.empty((AHEAD, len(pos)), dtype=fn.dtype if dtype is None else dtype)
    end = pos + step * (left - 1)
    clip = np.minimum if step > 0 else np.maximum
    block = 8192
    for b in range(0, len(pos), block):
        p, e = pos[b:b + block], end[b:b + block]
        for j in range(AHEAD):
            out[j, b:b + block] = fn[clip(p + step * j, e)]
    return out


LARGE = 2_000_000   # frames: above this, a view's tree is built with an early cut (``pruned``), and a
                    # function list shows a page (``views.sandwich.table``)


def large(profile: Profile) -> bool:
    return int(flat(profile).lengths.sum()) > LARGE


def function_sums(profile: Profile, metrics: tuple, thread: str | None = None,
                  only: np.ndarray | None = None, totals: bool = True) -> pd.DataFrame:
    """Per function id: ``self_<m>`` and (with ``totals``) ``total_<m>`` for each metric, over the
    stacks of ``thread`` (None: all). A function's total counts each stack once however often it
    recurses there (``model.stack_functions``). ``only``: the function ids whose totals are wanted (the others
    get NaN)."""
    f = flat(profile)
    rows = np.arange(len(f.lengths)) if thread is None else thread_rows(profile, thread)
    nfn = int(f.fn.max()) + 1 if len(f.fn) else 0
    ws = {m: metric_weights(profile, m)[0] for m in metrics}
    leaf_rows, leaf_fn = f.leaves
    in_view = np.zeros(len(f.lengths), bool)
    in_view[rows] = True
    keep = in_view[leaf_rows]
    out = pd.DataFrame(index=pd.RangeIndex(nfn, name="function"))
    for m, w in ws.items():
        out["self_" + m] = np.bincount(leaf_fn[keep], weights=w[leaf_rows[keep]], minlength=nfn)
    if totals:
        total = {m: np.zeros(nfn) for m in ws}
        for fn, row_of in stack_functions(f.fn, f.lengths):   # (function, row) once per stack
            if thread is not None:
                hit = in_view[row_of]
                fn, row_of = fn[hit], row_of[hit]
            for m, w in ws.items():
                total[m] += np.bincount(fn, weights=w[row_of], minlength=nfn)
        for m in ws:
            if only is not None:
                total[m][np.setdiff1d(np.arange(nfn), only)] = np.nan
            out["total_" + m] = total[m]
    return out


def from_profile(profile: Profile, metric: str, thread: str | None = None, also: tuple = (),
                 cut: float = 0.0) -> tuple[Tree, int]:
    """The call tree of one thread (or all, merged) in ``metric``, with the metrics ``also`` on
    the same nodes (``Tree.extra``); and the count of rows with unknown weight."""
    w, unknown = metric_weights(profile, metric)
    f = flat(profile)
    weights = {metric: w, "samples": profile.stacks["samples"].to_numpy(dtype=np.float64)}
    weights.update({m: metric_weights(profile, m)[0] for m in also if m not in weights})
    rows = None if thread is None else thread_rows(profile, thread)
    return build(f.fn, f.starts, f.lengths, weights, rows, cut=cut), unknown


def pruned(profile: Profile, metric: str, thread: str | None = None, also: tuple = (), *,
           min_share: float = 0.0, max_nodes: int = MAX_NODES) -> tuple[Tree, int | None, int]:
    """``prune(from_profile(...))``: the view's tree pruned to ``min_share`` and ``max_nodes``, once
    per profile and view. A profile of more than ``LARGE`` frames is built with an early cut just
    low enough for the same result (the nodes kept have the totals of the full tree). Returns
    (tree, node count of the full tree or None when it was never built whole, unknown rows)."""
    key = ("pruned", metric, thread, tuple(also), min_share, max_nodes)
    return memo(profile, key, lambda: _pruned(profile, metric, thread, tuple(also), min_share, max_nodes))


def _pruned(profile, metric, thread, also, min_share, max_nodes):
    w, unknown = metric_weights(profile, metric)
    total = float(w.sum() if thread is None else w[thread_rows(profile, thread)].sum())
    t, n_full = cut_and_prune(lambda cut: from_profile(profile, metric, thread, also, cut=cut)[0], total,
                              min_share, max_nodes, large(profile))
    return t, n_full, unknown


def cut_and_prune(make, total: float, min_share: float, max_nodes: int, early: bool) -> tuple[Tree, int | None]:
    """``prune(make(0.0), min_share, max_nodes)``, where ``make(cut)`` builds a tree (``build``'s
    cut). With ``early``, first tries a cut that makes the tree far smaller, and lowers it until
    the result is the same as pruning the full tree. Returns the tree and the full tree's node
    count (None when it was never built whole)."""
    floor = min_share * total
    cut = max(total / (4 * max_nodes), floor) if early else 0.0
    while True:
        t = make(cut)
        sel = select(t.parent, t.depth, t.total, min_share, max_nodes, never=t.key == OTHER)
        # Exact when not everything of at least `cut` fits (the full tree's threshold is then above
        # `cut`), or when nothing under `cut` would be kept anyway.
        if cut == 0.0 or sel.threshold > cut or cut <= floor:
            return apply(t, sel), (len(t) if cut == 0.0 else None)
        cut = cut / 16 if cut > total * 1e-7 else 0.0


def levels(depth: np.ndarray) -> list[np.ndarray]:
    """Node ids by depth: ``levels(depth)[d]`` holds the nodes at depth d."""
    if not len(depth):
        return []
    order = np.argsort(depth, kind="stable")
    bounds = np.searchsorted(depth[order], np.arange(int(depth.max()) + 2))
    return [order[bounds[d]:bounds[d + 1]] for d in range(len(bounds) - 1)]


def subtree_sum(parent: np.ndarray, depth: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Every node's value plus all its descendants' values, summed from the leaves up (in the
    dtype of ``values``)."""
    acc = values.copy()
    for lvl in reversed(levels(depth)[1:]):
        np.add.at(acc, parent[lvl], acc[lvl])
    return acc


@dataclass
class Selection:
    """Which nodes of a tree stay, and the "(other)" nodes that take the rest: ``kept`` (old ids,
    ascending), ``dropped`` (the top node of each folded subtree), ``group`` (the (other) node of
    each dropped node), ``holders`` (the kept parent of each (other) node) and ``threshold``
    (the least width a kept node has)."""
    kept: np.ndarray
    dropped: np.ndarray
    group: np.ndarray
    holders: np.ndarray
    threshold: float = 0.0

    def take(self, values: np.ndarray) -> np.ndarray:
        """Per new node: a kept node's own value; an (other) node's, the sum over its subtrees."""
        other = np.bincount(self.group, weights=values[self.dropped], minlength=len(self.holders))
        return np.concatenate([values[self.kept], other.astype(values.dtype, copy=False)])

    def parents(self, parent: np.ndarray) -> np.ndarray:
        """New parent ids (-1 for the root)."""
        new_id = np.full(len(parent), -1, np.int64)
        new_id[self.kept] = np.arange(len(self.kept))
        kept_parent = parent[self.kept]
        return np.concatenate([np.where(kept_parent >= 0, new_id[np.maximum(kept_parent, 0)], -1),
                               new_id[self.holders]])

    def folded_counts(self, folded: np.ndarray | None = None) -> np.ndarray:
        """Per (other) node, how many nodes it holds; ``folded``: per old node, how many it stands
        for itself (an (other) node of an earlier cut), else 1 each."""
        w = None if folded is None else np.maximum(folded[self.dropped], 1)
        return np.rint(np.bincount(self.group, weights=w, minlength=len(self.holders))).astype(np.int64)


def _closed(parent: np.ndarray, lv: list, keep: np.ndarray) -> np.ndarray:
    """``keep`` closed upwards: a node stays only if its parent stays."""
    keep[0] = True
    for lvl in lv[1:]:
        keep[lvl] &= keep[parent[lvl]]
    return keep


def _tops(parent: np.ndarray, width: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Dropped nodes (with weight) whose parent stays: each carries its subtree into an (other) node."""
    out = ~keep & (width > 0)
    out[0] = False
    out[1:] &= keep[parent[1:]]
    return out


def select(parent: np.ndarray, depth: np.ndarray, width: np.ndarray, min_share: float = 0.0,
           max_nodes: int = MAX_NODES, never: np.ndarray | None = None) -> Selection:
    """Keep the nodes of at least ``min_share`` of the root's ``width`` (closed upwards), and raise
    that threshold as little as needed to stay within ``max_nodes`` nodes, (other) nodes included.
    ``never``: nodes that only ever fold into their parent's (other) node (those of an earlier cut)."""
    lv = levels(depth)
    thr = max(min_share * float(width[0]), 0.0)
    can = (width > 0) if never is None else (width > 0) & ~never

    def keep_at(t: float) -> np.ndarray:
        return _closed(parent, lv, (width >= t) & can)

    def count(keep: np.ndarray) -> int:
        holders = parent[_tops(parent, width, keep)]
        return int(keep.sum()) + int(np.count_nonzero(np.bincount(holders, minlength=1)))

    keep = keep_at(thr)
    if count(keep) > max_nodes:
        cand = np.unique(width[(width > thr) & can])  # ascending: find the smallest threshold that fits
        lo, hi = 0, len(cand) - 1
        best = cand[-1] if len(cand) else thr
        while lo <= hi:
            mid = (lo + hi) // 2
            if count(keep_at(cand[mid])) <= max_nodes:
                best, hi = cand[mid], mid - 1
            else:
                lo = mid + 1
        keep, thr = keep_at(best), float(best)
    dropped = np.flatnonzero(_tops(parent, width, keep))
    holders, group = np.unique(parent[dropped], return_inverse=True)
    return Selection(np.flatnonzero(keep), dropped, group.astype(np.int64), holders, thr)


def prune(t: Tree, min_share: float = 0.0, max_nodes: int = MAX_NODES) -> Tree:
    """Fold nodes below ``min_share`` of the root (and more, to stay within ``max_nodes``)
    into one "(other)" child per parent. Every kept node's total, self and samples stay exact."""
    return apply(t, select(t.parent, t.depth, t.total, min_share, max_nodes, never=t.key == OTHER))


def apply(t: Tree, sel: Selection) -> Tree:
    """The tree ``sel`` keeps of ``t``, with its (other) nodes."""
    if len(sel.kept) == len(t):
        return t
    n_other = len(sel.holders)
    other_total = sel.take(t.total)[len(sel.kept):]
    return Tree(parent=sel.parents(t.parent),
                key=np.concatenate([t.key[sel.kept], np.full(n_other, OTHER, np.int64)]),
                depth=np.concatenate([t.depth[sel.kept], t.depth[sel.holders] + 1]),
                total=sel.take(t.total),
                self=np.concatenate([t.self[sel.kept], other_total]),
                samples=sel.take(t.samples),
                folded=np.concatenate([t.folded[sel.kept], sel.folded_counts(t.folded)]),
                extra={m: (sel.take(tot), np.concatenate([s[sel.kept], sel.take(tot)[len(sel.kept):]]))
                       for m, (tot, s) in t.extra.items()})


def function_set(profile: Profile, function) -> np.ndarray:
    """Function ids meant by ``function``: an int id, an exact name, or else a regex on names."""
    import re
    ft = function_table(profile)
    if isinstance(function, (int, np.integer)):
        if int(function) not in ft.index:
            raise ValueError(f"no function id {function}")
        return np.array([int(function)])
    hit = ft.index[ft["name"] == function].to_numpy()
    if not len(hit):
        try:
            rx = re.compile(str(function))
        except re.error as e:
            raise ValueError(f"no function named {function!r} (and not a valid regex: {e})") from None
        hit = ft.index[[bool(rx.search(str(n))) for n in ft["name"]]].to_numpy()
    if not len(hit):
        raise ValueError(f"no function named or matching {function!r}")
    return hit.astype(np.int64)


def sandwich(profile: Profile, fns: np.ndarray, metric: str, thread: str | None = None, *,
             min_share: float = 0.0, max_nodes: int = MAX_NODES) -> tuple[Tree, Tree]:
    """(callers, callees) of the functions ``fns``, pruned: trees rooted at them, from each stack's
    outermost occurrence, so a recursive function counts once per stack."""
    w, _ = metric_weights(profile, metric)
    f = flat(profile)
    hit = f.having(fns)
    # Each row's first hit at or after its start: its outermost occurrence, if before its end.
    j = np.searchsorted(hit, f.starts)
    at = hit[np.minimum(j, len(hit) - 1)] if len(hit) else np.zeros(len(f.starts), np.int64)
    first = np.where((j < len(hit)) & (at < f.starts + f.lengths), at - f.starts, -1)   # its depth, or -1
    rows = np.flatnonzero(first >= 0)
    if thread is not None:
        rows = np.intersect1d(rows, thread_rows(profile, thread))
    weights = {metric: w, "samples": profile.stacks["samples"].to_numpy(dtype=np.float64)}
    total = float(w[rows].sum())
    # Callees: the suffix after the outermost occurrence, which is the root. Callers: the prefix
    # above it, nearest caller first.
    callees, _ = cut_and_prune(lambda cut: build(f.fn, f.starts + first + 1, f.lengths - first - 1, weights, rows,
                                                 cut=cut), total, min_share, max_nodes, large(profile))
    callers, _ = cut_and_prune(lambda cut: build(f.fn, f.starts + first - 1, first, weights, rows, step=-1,
                                                 cut=cut), total, min_share, max_nodes, large(profile))
    for t in (callers, callees):
        t.key[0] = int(fns[0])
    return callers, callees


class Union:
    """Call trees of several profiles over one node set: function keys are ``analysis.match_key``s
    (name, file), so the same node id means the same call path in every tree."""

    def __init__(self, profiles: list[Profile], weights: list[np.ndarray]):
        keymap: dict[tuple, int] = {}
        self.names: list[str] = []
        self.files: list[str] = []
        self.lines: list = []
        fns, bases, ns = [], [], []
        offset = 0
        for p in profiles:
            ft = function_table(p)
            local = np.full(int(ft.index.max()) + 1 if len(ft) else 0, -1, np.int64)
            for fid, name, file, line in zip(ft.index, ft["name"], ft["file"], ft["line"]):
                k = match_key(name, file)
                if k not in keymap:
                    keymap[k] = len(self.names)
                    self.names.append(name)
                    self.files.append(file)
                    self.lines.append(line)
                local[fid] = keymap[k]
            f = flat(p)
            fns.append(local[f.fn])
            bases.append(f.starts + offset)
            ns.append(f.lengths)
            offset += len(f.fn)
        rows = np.cumsum([0] + [len(p.stacks) for p in profiles])
        per_row = {}
        for i, (p, w) in enumerate(zip(profiles, weights)):
            for name, x in ((f"w{i}", w), (f"n{i}", p.stacks["samples"].to_numpy(dtype=np.float64))):
                per_row[name] = np.zeros(rows[-1])
                per_row[name][rows[i]:rows[i + 1]] = x
        t = build(np.concatenate(fns), np.concatenate(bases), np.concatenate(ns), per_row)
        sums = {"w0": (t.total, t.self), **t.extra}
        # One node set; a tree per profile over it.
        self.trees = [Tree(t.parent, t.key, t.depth, *sums[f"w{i}"], sums[f"n{i}"][0], t.folded)
                      for i in range(len(profiles))]
        self.parent, self.key, self.depth = t.parent, t.key, t.depth

    def name(self, node: int, root: str) -> str:
        k = int(self.key[node])
        return root if k < 0 else str(self.names[k])

    def where(self, node: int) -> str:
        k = int(self.key[node])
        return "" if k < 0 else short_file(self.files[k], self.lines[k])

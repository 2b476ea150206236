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
from ..model import METRIC_LABELS, Profile

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
    """One row per function id: name, file, line (the smallest seen), kind, module."""
    fr = profile.frames
    fn = profile.function_ids()[fr.index.to_numpy()] if len(fr) else np.zeros(0, np.int64)
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


def entries(profile: Profile, rows: np.ndarray | None = None):
    """(row, function id, depth) for every frame of the selected stacks rows, root first."""
    r, fids, lengths = profile._exploded()
    fn = profile.function_ids()[fids] if len(fids) else np.zeros(0, np.int64)
    starts = np.cumsum(lengths) - lengths
    depth = np.arange(len(r), dtype=np.int64) - np.repeat(starts, lengths)
    if rows is not None and len(rows) != len(lengths):
        sel = np.zeros(len(lengths), bool)
        sel[rows] = True
        m = sel[r]
        r, fn, depth = r[m], fn[m], depth[m]
    return r, fn, depth


def build(rows: np.ndarray, keys: np.ndarray, depth: np.ndarray, weights: np.ndarray,
          counts: np.ndarray, row_mask: np.ndarray | None = None, extra: dict | None = None) -> Tree:
    """Merge stacks given as entries (row, key, depth) into a tree.

    Each row's depths must run 0..len-1. ``weights``/``counts`` (and each of ``extra``, a metric ->
    weights) are per row; rows outside ``row_mask`` (when given) do not count, even with no entries.
    """
    nrow = len(weights)

    def per_row(x) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        return x if row_mask is None else np.where(row_mask, x, 0.0)
    w, n = per_row(weights), per_row(counts)
    cur = np.zeros(nrow, dtype=np.int64)
    parents = [np.array([-1], np.int64)]
    keyl = [np.array([ROOT], np.int64)]
    depths = [np.array([0], np.int64)]
    node_of_entry = np.empty(len(rows), dtype=np.int64)
    nxt = 1
    if len(rows):
        span = int(keys.max()) + 1
        order = np.argsort(depth, kind="stable")
        bounds = np.searchsorted(depth[order], np.arange(int(depth.max()) + 2))
        for d in range(len(bounds) - 1):
            idx = order[bounds[d]:bounds[d + 1]]
            r = rows[idx]
            pk = cur[r] * span + keys[idx]
            uniq, inv = np.unique(pk, return_inverse=True)
            ids = nxt + inv
            parents.append(uniq // span)
            keyl.append(uniq % span)
            depths.append(np.full(len(uniq), d + 1, np.int64))
            nxt += len(uniq)
            cur[r] = ids
            node_of_entry[idx] = ids
    def sums(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        total = np.bincount(node_of_entry, weights=x[rows], minlength=nxt)
        total[0] = x.sum()
        return total, np.bincount(cur, weights=x, minlength=nxt)
    total, selfw = sums(w)
    samples, _ = sums(n)
    more = {m: sums(per_row(x)) for m, x in (extra or {}).items()}
    return Tree(np.concatenate(parents), np.concatenate(keyl), np.concatenate(depths), total, selfw, samples,
                np.zeros(nxt, np.int64), more)


def from_profile(profile: Profile, metric: str, thread: str | None = None,
                 also: tuple = ()) -> tuple[Tree, int]:
    """The call tree of one thread (or all, merged) in ``metric``, with the metrics ``also`` on
    the same nodes (``Tree.extra``); and the count of rows with unknown weight."""
    w, unknown = metric_weights(profile, metric)
    sel = thread_rows(profile, thread)
    mask = np.zeros(len(w), bool)
    mask[sel] = True
    r, fn, depth = entries(profile, sel)
    extra = {m: metric_weights(profile, m)[0] for m in also}
    return build(r, fn, depth, w, profile.stacks["samples"].to_numpy(), mask, extra), unknown


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
    each dropped node) and ``holders`` (the kept parent of each (other) node)."""
    kept: np.ndarray
    dropped: np.ndarray
    group: np.ndarray
    holders: np.ndarray

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

    def folded_counts(self) -> np.ndarray:
        return np.bincount(self.group, minlength=len(self.holders)).astype(np.int64)


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
           max_nodes: int = MAX_NODES) -> Selection:
    """Keep the nodes of at least ``min_share`` of the root's ``width`` (closed upwards), and raise
    that threshold as little as needed to stay within ``max_nodes`` nodes, (other) nodes included."""
    lv = levels(depth)
    thr = max(min_share * float(width[0]), 0.0)

    def keep_at(t: float) -> np.ndarray:
        return _closed(parent, lv, (width >= t) & (width > 0))

    def count(keep: np.ndarray) -> int:
        holders = parent[_tops(parent, width, keep)]
        return int(keep.sum()) + int(np.count_nonzero(np.bincount(holders, minlength=1)))

    keep = keep_at(thr)
    if count(keep) > max_nodes:
        cand = np.unique(width[width > thr])  # ascending: find the smallest threshold that fits
        lo, hi = 0, len(cand) - 1
        best = cand[-1] if len(cand) else thr
        while lo <= hi:
            mid = (lo + hi) // 2
            if count(keep_at(cand[mid])) <= max_nodes:
                best, hi = cand[mid], mid - 1
            else:
                lo = mid + 1
        keep = keep_at(best)
    dropped = np.flatnonzero(_tops(parent, width, keep))
    holders, group = np.unique(parent[dropped], return_inverse=True)
    return Selection(np.flatnonzero(keep), dropped, group.astype(np.int64), holders)


def prune(t: Tree, min_share: float = 0.0, max_nodes: int = MAX_NODES) -> Tree:
    """Fold nodes below ``min_share`` of the root (and more, to stay within ``max_nodes``)
    into one "(other)" child per parent. Every kept node's total, self and samples stay exact."""
    sel = select(t.parent, t.depth, t.total, min_share, max_nodes)
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
                folded=np.concatenate([t.folded[sel.kept], sel.folded_counts()]),
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


def sandwich(profile: Profile, fns: np.ndarray, metric: str, thread: str | None = None) -> tuple[Tree, Tree]:
    """(callers, callees) of the functions ``fns``: trees rooted at them, from each stack's
    outermost occurrence, so a recursive function counts once per stack."""
    w, _ = metric_weights(profile, metric)
    sel = thread_rows(profile, thread)
    r, fn, depth = entries(profile, sel)
    hit = np.isin(fn, fns)
    first = np.full(len(w), np.iinfo(np.int64).max)
    np.minimum.at(first, r[hit], depth[hit])
    has = first < np.iinfo(np.int64).max
    counts = profile.stacks["samples"].to_numpy()
    target = int(fns[0])
    # Callees: the suffix from the first occurrence; the occurrence itself becomes the root.
    m = has[r] & (depth > first[r])
    callees = build(r[m], fn[m], depth[m] - first[r[m]] - 1, w, counts, has)
    # Callers: the prefix up to the first occurrence, reversed.
    m = has[r] & (depth < first[r])
    callers = build(r[m], fn[m], first[r[m]] - depth[m] - 1, w, counts, has)
    for t in (callers, callees):
        t.key[0] = target
    return callers, callees


class Union:
    """Call trees of several profiles over one node set: function keys are ``analysis.match_key``s
    (name, file), so the same node id means the same call path in every tree."""

    def __init__(self, profiles: list[Profile], weights: list[np.ndarray]):
        keymap: dict[tuple, int] = {}
        self.names: list[str] = []
        self.files: list[str] = []
        self.lines: list = []
        rows, keys, depths = [], [], []
        offsets = np.cumsum([0] + [len(p.stacks) for p in profiles])
        for p, off in zip(profiles, offsets):
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
            r, fn, d = entries(p)
            rows.append(r + off)
            keys.append(local[fn])
            depths.append(d)
        rows_a, keys_a, depth_a = (np.concatenate(x) if x else np.zeros(0, np.int64)
                                   for x in (rows, keys, depths))
        self.trees: list[Tree] = []
        for i, (p, w) in enumerate(zip(profiles, weights)):
            mine = slice(offsets[i], offsets[i + 1])
            full = np.zeros(offsets[-1])
            cnt = np.zeros(offsets[-1])
            full[mine] = w
            cnt[mine] = p.stacks["samples"].to_numpy(dtype=np.float64)
            # The node numbering depends only on (rows, keys, depth): every tree shares it.
            self.trees.append(build(rows_a, keys_a, depth_a, full, cnt))
        t = self.trees[0]
        self.parent, self.key, self.depth = t.parent, t.key, t.depth

    def name(self, node: int, root: str) -> str:
        k = int(self.key[node])
        return root if k < 0 else str(self.names[k])

    def where(self, node: int) -> str:
        k = int(self.key[node])
        return "" if k < 0 else short_file(self.files[k], self.lines[k])

"""Call trees over a Profile, built with numpy, and pruning that keeps every total exact.

Nodes merge by function (frames sharing name and file). Node 0 is the root; a parent's id is
always smaller than its children's ids.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pandas as pd

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
          counts: np.ndarray, row_mask: np.ndarray | None = None) -> Tree:
    """Merge stacks given as entries (row, key, depth) into a tree.

    Each row's depths must run 0..len-1. ``weights``/``counts`` are per row; rows outside
    ``row_mask`` (when given) do not count, even with no entries.
    """
    nrow = len(weights)
    w = np.asarray(weights, dtype=np.float64)
    n = np.asarray(counts, dtype=np.float64)
    if row_mask is not None:
        w = np.where(row_mask, w, 0.0)
        n = np.where(row_mask, n, 0.0)
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
    parent = np.concatenate(parents)
    total = np.bincount(node_of_entry, weights=w[rows], minlength=nxt)
    samples = np.bincount(node_of_entry, weights=n[rows], minlength=nxt)
    total[0] = w.sum()
    samples[0] = n.sum()
    selfw = np.bincount(cur, weights=w, minlength=nxt)
    return Tree(parent, np.concatenate(keyl), np.concatenate(depths), total, selfw, samples,
                np.zeros(nxt, np.int64))


def from_profile(profile: Profile, metric: str, thread: str | None = None) -> tuple[Tree, int]:
    """The call tree of one thread (or all, merged) and the count of rows with unknown weight."""
    w, unknown = metric_weights(profile, metric)
    sel = thread_rows(profile, thread)
    mask = np.zeros(len(w), bool)
    mask[sel] = True
    r, fn, depth = entries(profile, sel)
    return build(r, fn, depth, w, profile.stacks["samples"].to_numpy(), mask), unknown


def _folded(t: Tree, keep: np.ndarray) -> np.ndarray:
    """Dropped nodes whose parent stays: each carries its whole subtree into an (other) node."""
    out = ~keep & (t.total > 0)
    out[0] = False
    out[1:] &= keep[t.parent[1:]]
    return out


def _count_after(t: Tree, keep: np.ndarray) -> int:
    return int(keep.sum()) + len(np.unique(t.parent[_folded(t, keep)]))


def _keep(t: Tree, thr: float) -> np.ndarray:
    keep = t.total >= thr
    keep &= t.total > 0
    keep[0] = True
    # Closed upwards: a node stays only if its parent stays (parents have smaller ids).
    for d in range(1, int(t.depth.max()) + 1 if len(t) > 1 else 1):
        lvl = t.depth == d
        keep[lvl] &= keep[t.parent[lvl]]
    return keep


def prune(t: Tree, min_share: float = 0.0, max_nodes: int = MAX_NODES) -> Tree:
    """Fold nodes below ``min_share`` of the root (and more, to stay within ``max_nodes``)
    into one "(other)" child per parent. Every kept node's total, self and samples stay exact."""
    root = float(t.total[0])
    thr = max(min_share * root, 0.0)
    keep = _keep(t, thr)
    if _count_after(t, keep) > max_nodes:
        cand = np.unique(t.total[t.total > thr])  # ascending
        lo, hi = 0, len(cand) - 1  # find the smallest threshold that fits
        best = cand[-1] if len(cand) else thr
        while lo <= hi:
            mid = (lo + hi) // 2
            k = _keep(t, cand[mid])
            if _count_after(t, k) <= max_nodes:
                best, hi = cand[mid], mid - 1
            else:
                lo = mid + 1
        keep = _keep(t, best)
    dropped = _folded(t, keep)
    if keep.all():
        return t
    old = np.flatnonzero(keep)
    new_id = np.full(len(t), -1, np.int64)
    new_id[old] = np.arange(len(old))
    dp = t.parent[dropped]
    op, inv = np.unique(dp, return_inverse=True)
    o_total = np.bincount(inv, weights=t.total[dropped], minlength=len(op))
    o_samples = np.bincount(inv, weights=t.samples[dropped], minlength=len(op))
    o_count = np.bincount(inv, minlength=len(op))
    parent = np.concatenate([np.where(t.parent[old] >= 0, new_id[np.maximum(t.parent[old], 0)], -1),
                             new_id[op]])
    return Tree(parent=parent,
                key=np.concatenate([t.key[old], np.full(len(op), OTHER, np.int64)]),
                depth=np.concatenate([t.depth[old], t.depth[op] + 1]),
                total=np.concatenate([t.total[old], o_total]),
                self=np.concatenate([t.self[old], o_total]),
                samples=np.concatenate([t.samples[old], o_samples]),
                folded=np.concatenate([t.folded[old], o_count.astype(np.int64)]))


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

"""The array call tree (issue 27 item 1) against slow, obviously-correct references written here in
plain Python: function ids, ``Profile.functions()``, ``tree.function_sums``, call trees (whole and
pruned, with and without the early cut), Sandwich trees and ``analysis.line_table``. Weights are multiples of 1/64, so every
sum is exact in any order and totals are compared with ``==``."""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import pandas as pd
import pytest

from profmagic.model import Profile, _function_labels, make_frames
from profmagic.transforms import focus
from profmagic.views import sandwich as S
from profmagic import flatstacks as FS
from profmagic.views import tree as T

pytestmark = pytest.mark.timeout(300)


def make(seed: int, nthreads: int = 3, nfn: int = 30, nstacks: int = 600, maxdepth: int = 12,
         recursion: bool = True, empty: bool = False) -> Profile:
    """Distinct (thread, stack) rows; some functions have several frames (same name and file, other
    lines), some names repeat in other files; with ``recursion``, stacks repeat functions."""
    rng = np.random.default_rng(seed)
    names = [f"fn{i % (nfn - 4)}" for i in range(nfn)]               # the last 4 reuse names in other files
    files = [f"/src/p{i // (nfn - 4)}/m{i % 7}.py" for i in range(nfn)]
    nfr = nfn + 10                                                     # 10 more frames of existing functions
    fr_fn = np.r_[np.arange(nfn), rng.integers(0, nfn, 10)]
    order = rng.permutation(nfr)                                       # frames not in function order
    fr_fn = fr_fn[order]
    frames = make_frames([names[f] for f in fr_fn], [files[f] for f in fr_fn], list(range(1, nfr + 1)),
                         ["python"] * nfr)
    seen, stacks, threads = set(), [], []
    while len(stacks) < nstacks:
        d = int(rng.integers(0 if empty else 1, maxdepth + 1))
        if recursion and d >= 4 and rng.random() < 0.4:
            head = tuple(int(x) for x in rng.integers(0, nfr, int(rng.integers(1, 4))))
            st = (head * 6)[:d]                                        # a recursive cycle
        else:
            st = tuple(int(x) for x in rng.integers(0, nfr, d))
        th = f"t{int(rng.integers(0, nthreads))}"
        if (th, st) in seen:
            continue
        seen.add((th, st))
        stacks.append(st)
        threads.append(th)
    n = len(stacks)
    samples = rng.integers(1, 5, n)
    wall = rng.integers(1, 200, n) / 64
    cpu = np.minimum(wall, rng.integers(0, 200, n) / 64)               # some 0: nodes of 0 CPU
    df = pd.DataFrame({"thread": threads, "stack": pd.Series(stacks, dtype=object), "samples": samples,
                       "wall": wall, "cpu": cpu})
    return Profile(frames, df, None, {"backend": "synthetic", "rate": 100.0}, None, "wall")


def profiles() -> dict:
    p = make(1)
    return {"recursion": p, "many threads": make(2, nthreads=40, nstacks=1500, maxdepth=20),
            "no recursion": make(3, recursion=False, empty=True),
            "subset": p.subset(np.arange(0, len(p.stacks), 3)),
            "focus": focus(make(4), "fn2")}


PROFILES = profiles()
CASES = [(k, m, th) for k in PROFILES for m, th in (("wall", None), ("cpu", "t1"), ("samples", None),
                                                     ("off_cpu", "t0"))]


# -- references ----------------------------------------------------------------------------------
def ref_function_ids(p: Profile) -> np.ndarray:
    out = np.full(int(p.frames.index.max()) + 1, -1, np.int64)
    keys: dict = {}
    for fid, name, file in zip(p.frames.index, p.frames["name"], p.frames["file"]):
        out[fid] = keys.setdefault((name, file), len(keys))
    return out


def weights(p: Profile, metric: str) -> list:
    return [float(x) for x in p.weights(metric).to_numpy(dtype=np.float64)]


def rows_of(p: Profile, thread) -> list:
    return [i for i, th in enumerate(p.stacks["thread"]) if thread is None or th == thread]


def paths(p: Profile) -> list:
    fid = ref_function_ids(p)
    return [tuple(int(fid[f]) for f in st) for st in p.stacks["stack"]]


def ref_functions(p: Profile, metric: str) -> pd.DataFrame:
    fid = ref_function_ids(p)
    first: dict = {}
    for f, name, file in zip(p.frames.index, p.frames["name"], p.frames["file"]):
        first.setdefault(int(fid[f]), (name, file))
    ms = list(dict.fromkeys([metric] + (["wall", "cpu", "off_cpu"] if {"wall", "cpu"} <= set(p.metrics) else [])))
    tot = {m: defaultdict(float) for m in ms}
    slf = {m: defaultdict(float) for m in ms}
    w = {m: weights(p, m) for m in ms}
    present = set()
    for i, path in enumerate(paths(p)):
        present.update(path)
        for m in ms:
            for g in set(path):
                tot[m][g] += w[m][i]
            if path:
                slf[m][path[-1]] += w[m][i]
    ids = sorted(present)
    out = pd.DataFrame({"id": np.array(ids, np.int64), "name": [first[i][0] for i in ids],
                        "file": [first[i][1] for i in ids],
                        "self": [slf[metric][i] for i in ids], "total": [tot[metric][i] for i in ids]})
    if metric == "samples":
        out["self"] = out["self"].astype(np.int64)
        out["total"] = out["total"].astype(np.int64)
    if len(ms) > 1:
        for m in ("wall", "cpu", "off_cpu"):
            out[m] = [tot[m][i] for i in ids]
            out["self_" + m] = [slf[m][i] for i in ids]
    out.index = pd.Index(_function_labels(out["name"], out["file"], ids), name="function")
    return out.sort_values(["total", "self"], ascending=False, kind="stable")


def ref_tree(p: Profile, metric: str, thread=None, also=(), cut=None) -> dict:
    """path of function ids -> [total, self, samples, (total, self) per metric of ``also``]; ``cut``:
    per row, the path to use (the Sandwich's callers or callees), or None to leave the row out."""
    ms = list(dict.fromkeys([metric, "samples", *also]))
    w = {m: weights(p, m) for m in ms}
    out: dict = {}

    def node(path):
        return out.setdefault(path, {m: [0.0, 0.0] for m in ms})

    node(())
    mine = set(rows_of(p, thread))
    for i, path in enumerate(paths(p)):
        if i not in mine:
            continue
        if cut is not None:
            path = cut(path)
            if path is None:
                continue
        for d in range(len(path) + 1):
            for m in ms:
                node(path[:d])[m][0] += w[m][i]
        for m in ms:
            node(path)[m][1] += w[m][i]
    return out


def as_tree(ref: dict, metric: str, also=()) -> T.Tree:
    """The reference as a Tree (breadth first: a parent before its children)."""
    order = sorted(ref, key=lambda k: (len(k), k))
    pos = {k: i for i, k in enumerate(order)}
    col = lambda m, j: np.array([ref[k][m][j] for k in order])   # noqa: E731
    return T.Tree(np.array([pos[k[:-1]] if k else -1 for k in order], np.int64),
                  np.array([k[-1] if k else T.ROOT for k in order], np.int64),
                  np.array([len(k) for k in order], np.int64), col(metric, 0), col(metric, 1),
                  col("samples", 0), np.zeros(len(order), np.int64), {m: (col(m, 0), col(m, 1)) for m in also})


def as_dict(t: T.Tree) -> dict:
    """path (an (other) node is key OTHER) -> every number of the node."""
    path = [()]
    for i in range(1, len(t)):
        path.append(path[t.parent[i]] + (int(t.key[i]),))
    assert len(set(path)) == len(path)
    assert (t.parent[1:] < np.arange(1, len(t))).all() and (t.depth == [len(k) for k in path]).all()
    return {k: (t.total[i], t.self[i], t.samples[i], int(t.folded[i]),
                tuple((m, v[0][i], v[1][i]) for m, v in sorted(t.extra.items())))
            for i, k in enumerate(path)}


# -- tests ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(PROFILES))
def test_function_ids(name):
    p = PROFILES[name]
    np.testing.assert_array_equal(p.function_ids(), ref_function_ids(p))


@pytest.mark.parametrize("name", list(PROFILES))
@pytest.mark.parametrize("metric", ["wall", "cpu", "samples", "off_cpu"])
def test_functions(name, metric):
    p = PROFILES[name]
    got = p.functions(metric)   # its 95% intervals are tests/test_uncertainty.py's
    got = got.drop(columns=[c for c in ("self_lo", "self_hi", "total_lo", "total_hi") if c in got])
    pd.testing.assert_frame_equal(got, ref_functions(p, metric), check_exact=True)


@pytest.mark.parametrize("name,metric,thread", CASES)
def test_function_sums(name, metric, thread):
    p = PROFILES[name]
    fid = ref_function_ids(p)
    nfn = int(fid.max()) + 1
    w = weights(p, metric)
    tot, slf = np.zeros(nfn), np.zeros(nfn)
    pth = paths(p)
    for i in rows_of(p, thread):
        for g in set(pth[i]):
            tot[g] += w[i]
        if pth[i]:
            slf[pth[i][-1]] += w[i]
    got = T.function_sums(p, (metric,), thread)
    assert (got["self_" + metric].to_numpy() == slf).all() and (got["total_" + metric].to_numpy() == tot).all()
    only = np.array([0, 3, 5])
    got = T.function_sums(p, (metric,), thread, only=only)
    want = np.full(nfn, np.nan)
    want[only] = tot[only]
    np.testing.assert_array_equal(got["total_" + metric].to_numpy(), want)
    assert (got["self_" + metric].to_numpy() == slf).all()


@pytest.mark.parametrize("name,metric,thread", CASES)
def test_tree_whole(name, metric, thread):
    p = PROFILES[name]
    also = tuple(m for m in ("wall", "cpu", "off_cpu") if m != metric)
    t, unknown = T.from_profile(p, metric, thread, also)
    assert unknown == 0
    assert as_dict(t) == as_dict(as_tree(ref_tree(p, metric, thread, also), metric, also))


PRUNE = [(0.0, 10**9), (0.0, 40), (0.02, 10**9), (0.01, 15), (0.0, 3)]


@pytest.mark.parametrize("name,metric,thread", CASES)
@pytest.mark.parametrize("min_share,max_nodes", PRUNE)
def test_tree_pruned(name, metric, thread, min_share, max_nodes, monkeypatch):
    p = PROFILES[name]
    also = tuple(m for m in ("wall", "cpu") if m != metric)
    want = as_dict(T.prune(as_tree(ref_tree(p, metric, thread, also), metric, also), min_share, max_nodes))
    t, n_full, _ = T.pruned(p, metric, thread, also, min_share=min_share, max_nodes=max_nodes)
    assert as_dict(t) == want
    assert n_full == len(ref_tree(p, metric, thread))
    # The early cut of a large profile gives the same tree (LARGE lowered so that this one counts).
    monkeypatch.setattr(T, "LARGE", 0)
    t, n_full, _ = T.pruned(p, metric, thread, also, min_share=min_share, max_nodes=max_nodes + 1)
    want = as_dict(T.prune(as_tree(ref_tree(p, metric, thread, also), metric, also), min_share, max_nodes + 1))
    assert as_dict(t) == want


@pytest.mark.parametrize("name,metric,thread", CASES)
@pytest.mark.parametrize("early", [False, True])
def test_sandwich(name, metric, thread, early, monkeypatch):
    p = PROFILES[name]
    if early:
        monkeypatch.setattr(T, "LARGE", 0)
    fid = ref_function_ids(p)
    for fns in ([int(fid[p.stacks["stack"].iloc[0][0]])] if len(p.stacks["stack"].iloc[0]) else [0],
                [1, 4], [2]):
        fns = np.array(fns)

        def first(path):
            return next((j for j, g in enumerate(path) if g in set(fns.tolist())), None)

        def callees(path):
            j = first(path)
            return None if j is None else path[j + 1:]

        def callers(path):
            j = first(path)
            return None if j is None else path[:j][::-1]

        for min_share, max_nodes in PRUNE:
            got = T.sandwich(p, fns, metric, thread, min_share=min_share, max_nodes=max_nodes)
            for t, cut in zip(got, (callers, callees)):
                want = T.prune(as_tree(ref_tree(p, metric, thread, cut=cut), metric), min_share, max_nodes)
                want.key[0] = int(fns[0])
                assert as_dict(t) == as_dict(want)


@pytest.mark.parametrize("name", ["recursion", "many threads", "focus"])
@pytest.mark.parametrize("large", [False, True])
def test_sandwich_table(name, large, monkeypatch):
    """The Sandwich list: every function's self and total (a page of them on a large profile)."""
    p = PROFILES[name]
    if large:
        monkeypatch.setattr(T, "LARGE", 0)
    ref = ref_functions(p, "wall").set_index("id")
    df = S.table(p, "wall", None, boilerplate=False, limit=10**6)
    off = ~df["id"].isin(ref.index)   # a page may list functions of frames on no stack: at 0
    assert (df.loc[off, "total"] == 0).all() and (df.loc[off, "self"] == 0).all()
    df = df[~off]
    assert len(df) == len(ref)
    assert (df["total"].to_numpy() == ref.loc[df["id"], "total"].to_numpy()).all()
    assert (df["self"].to_numpy() == ref.loc[df["id"], "self"].to_numpy()).all()
    assert (df["cpu"].to_numpy() == ref.loc[df["id"], "cpu"].to_numpy()).all()


@pytest.mark.parametrize("large", [False, True])
def test_static_icicle_says_what_was_cut(large, monkeypatch):
    import re
    from profmagic.views import icicle
    p = make(5, nthreads=4, nstacks=3000, maxdepth=20)   # over MAX_NODES nodes: the early cut stays early
    if large:
        monkeypatch.setattr(T, "LARGE", 0)
    s = icicle.svg(p, max_nodes=60, boilerplate=False)
    shown = len(re.findall(r"<g><title>", s)) + len(re.findall(r"<g class=\"profmagic-rest\">", s))
    n_full = len(ref_tree(p, "wall"))
    m = re.search(r"<div class='profmagic-cut'[^>]*>(.*?)</div>$", s)
    assert m, s[-300:]
    if large:   # built with the early cut: the whole tree's size is not known
        assert re.fullmatch(r"call tree shown as (\d+) nodes: smaller ones folded into \(other\)", m[1])
    else:
        mm = re.fullmatch(r"([\d,]+) call-tree nodes shown as ([\d,]+): smaller ones folded into \(other\)", m[1])
        assert mm and mm[1] == f"{n_full - 1:,}"
    assert int(re.search(r"shown as (\d+)", m[1])[1]) <= 60 and shown <= 60
    # Nothing folded, nothing said.
    q = make(6, nthreads=1, nstacks=5, maxdepth=3)
    assert "profmagic-cut" not in icicle.svg(q, min_share=0.0, boilerplate=False)


@pytest.mark.parametrize("piece", [1, 7, 50, 1 << 20])
def test_stack_functions_in_pieces(piece):
    """Each distinct (stack, function) pair once, in stack order, however the stacks are cut into pieces."""
    from profmagic.model import stack_functions
    p = PROFILES["recursion"]
    pth = paths(p)
    fn = np.array([g for path in pth for g in path], np.int32)
    lengths = np.array([len(path) for path in pth])
    got = [(int(f), int(r)) for fs, rs in stack_functions(fn, lengths, piece) for f, r in zip(fs, rs)]
    assert got == [(g, r) for r, path in enumerate(pth) for g in sorted(set(path))]


def test_flat_from_marshal_and_one_by_one():
    """``flat`` and ``frame_ids`` read the stack tuples through marshal's bytes; a stack marshal
    writes otherwise (an int object that is no plain int, a tuple subclass) is read one frame at a
    time, with the same result, and a frame id over 2**31 is never read as a 5-byte record."""
    p = make(5, nstacks=3000, maxdepth=30, empty=True)   # 3000 stacks: blocks of 1024 and a short one
    stacks = p.stacks["stack"].tolist()
    table = p.function_ids()
    want_fn = np.array([table[i] for st in stacks for i in st], np.int32)
    want_len = np.array([len(st) for st in stacks])
    f = FS.flat(p)
    assert f.fn.tolist() == want_fn.tolist() and f.lengths.tolist() == want_len.tolist()
    assert f.starts.tolist() == (np.cumsum(want_len) - want_len).tolist()
    ident = np.arange(len(p.frames) + 1, dtype=np.int32)
    got = FS._marshalled(stacks, ident)
    assert got[0].tolist() == [i for st in stacks for i in st] and got[1].tolist() == want_len.tolist()
    assert FS._marshalled(stacks[:1500] + [st * 40 for st in stacks[1500:]], ident)[0].tolist() == \
        [i for st in stacks[:1500] + [st * 40 for st in stacks[1500:]] for i in st]   # grows past its guess
    assert [len(x) for x in FS._marshalled([], ident)] == [0, 0]

    class Stack(tuple):
        pass

    for odd in ((np.int64(1), 2), Stack((1, 2)), (True, 2), (1, (2, 3)), (1, 2 ** 40), (1, -2 ** 40)):
        assert FS._marshalled(stacks[:5] + [odd] + stacks[5:9], ident) is None, odd
    odd = Profile(p.frames, p.stacks.assign(stack=pd.Series([tuple(np.int64(i) for i in st) for st in stacks],
                                                          dtype=object)), None, {"backend": "synthetic"}, None, "wall")
    assert FS._marshalled(odd.stacks["stack"].tolist(), ident) is None
    g = FS.flat(odd)
    assert g.fn.tolist() == want_fn.tolist() and g.lengths.tolist() == want_len.tolist()
    want_fr = [i for st in stacks for i in st]
    for q in (p, odd):   # frame ids: the same layout, through an identity table
        h = FS.frame_ids(q)
        assert h.fn.dtype == np.int32 and h.fn.tolist() == want_fr and h.lengths.tolist() == want_len.tolist()
        assert h.starts.tolist() == f.starts.tolist()
        rows, leaf = h.leaves
        assert rows.tolist() == [r for r, st in enumerate(stacks) if st]
        assert leaf.tolist() == [st[-1] for st in stacks if st]


def ref_line_table(p: Profile, file: str, thread=None, function=None) -> pd.DataFrame:
    """Per line of ``file``: every stack through a frame at it once (total), stacks whose leaf is
    at it (self), over the frames of ``function`` only when given."""
    fid = ref_function_ids(p)
    line = {int(i): (None if pd.isna(n) else int(n)) for i, n in zip(p.frames.index, p.frames["line"])}
    of = dict(zip(p.frames.index, p.frames["file"]))
    mine = lambda f: of[f] == file and line[f] is not None and (function is None or fid[f] == function)  # noqa: E731
    ms = [m for m in p.metrics if m != "samples"]
    w = {m: weights(p, m) for m in ["samples"] + ms}
    got: dict = defaultdict(lambda: defaultdict(float))
    stacks = p.stacks["stack"].tolist()
    for i in rows_of(p, thread):
        for n in {line[f] for f in stacks[i] if mine(f)}:
            for m in w:
                got[n][m] += w[m][i]
        if stacks[i] and mine(stacks[i][-1]):
            for m in ms:
                got[line[stacks[i][-1]]]["self_" + m] += w[m][i]
    lines = sorted(got)
    out = pd.DataFrame(index=pd.Index(np.array(lines, np.int64), name="line"))
    out["samples"] = [got[n]["samples"] for n in lines]
    for m in ms:
        out[m] = [got[n][m] for n in lines]
        out["self_" + m] = [got[n]["self_" + m] for n in lines]
    return out.sort_values(p.metric, ascending=False, kind="stable")


def _no_line_on_every_third_frame(p: Profile) -> Profile:
    line = p.frames["line"].copy()
    line.iloc[::3] = pd.NA
    return p.replace(frames=p.frames.assign(line=line))


LINE_PROFILES = {**PROFILES, "lines unknown": _no_line_on_every_third_frame(PROFILES["recursion"])}


@pytest.mark.parametrize("name", list(LINE_PROFILES))
def test_line_table(name):
    """``analysis.line_table`` per file, thread and function, against the reference."""
    from profmagic import analysis
    p = LINE_PROFILES[name]
    fid = ref_function_ids(p)
    checked = 0
    for file in p.frames["file"].value_counts().index[:3]:
        fns = sorted({int(fid[f]) for f in p.frames.index[p.frames["file"] == file]})
        for thread in (None, "t1"):
            for function in (None, fns[0], fns[-1]):
                got = analysis.line_table(p, file, thread, function)
                # dtype aside: a column with nothing to count is np.bincount's int64 zeros
                pd.testing.assert_frame_equal(got, ref_line_table(p, file, thread, function), check_exact=True,
                                              check_dtype=False)
                checked += len(got) > 0
    assert checked >= 12

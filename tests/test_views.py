"""Figure data of the views: exact call trees and pruning, integer ids, payload cap, sandwich sums
on recursion, honest titles, escaping, and the time-order lanes."""
from __future__ import annotations

import profmagic
import json
from collections import defaultdict

import numpy as np
import pandas as pd
import pytest

from profmagic.model import Profile, Raw, StackBuilder, make_frames
from profmagic.views import icicle, sandwich
from profmagic.views import tree as T

pytestmark = pytest.mark.timeout(120)

EVIL = "<img src=x onerror=alert(1)>"


def random_profile(seed=0, nfn=40, nstacks=400, threads=("A", "B"), timed=True) -> Profile:
    rng = np.random.default_rng(seed)
    b = StackBuilder()
    fr = [b.frame(f"fn{i}" if i else EVIL, f"/src/pkg{i % 3}/m{i}.py", i + 1, "python" if i % 4 else "native")
          for i in range(nfn)]
    t = 0.0
    for _ in range(nstacks):
        depth = int(rng.integers(1, 9))
        st = tuple(fr[int(x)] for x in rng.integers(0, nfn, depth))
        sid = b.stack(str(rng.choice(threads)), st)
        for _ in range(int(rng.integers(1, 4))):
            wall = float(rng.uniform(0.001, 0.02))
            b.add(sid, wall=wall, cpu=wall * float(rng.uniform(0, 1)), time=t if timed else None)
            t += 0.01
    return b.build(metric="wall", meta={"backend": "synthetic", "rate": 100.0})


def brute_tree(p: Profile, metric: str, thread=None) -> dict:
    """Oracle: total per path of function names, by plain Python."""
    w = p.weights(metric).to_numpy()
    names = p.frames["name"]
    out = defaultdict(float)
    for i, (th, st) in enumerate(zip(p.stacks["thread"], p.stacks["stack"])):
        if thread is not None and th != thread:
            continue
        out[()] += w[i]
        path = ()
        for f in st:
            path += (names[f],)
            out[path] += w[i]
    return out


def paths(p: Profile, t: T.Tree) -> list:
    ft = T.function_table(p)
    out = [()]
    for i in range(1, len(t)):
        k = int(t.key[i])
        out.append(out[t.parent[i]] + ((ft.at[k, "name"],) if k >= 0 else ("(other)",)))
    return out


@pytest.mark.parametrize("metric,thread", [("wall", None), ("cpu", "A"), ("samples", "B"), ("off_cpu", None)])
def test_tree_matches_brute_force(metric, thread):
    p = random_profile()
    t, unknown = T.from_profile(p, metric, thread)
    assert unknown == 0
    want = brute_tree(p, metric, thread)
    got = dict(zip(paths(p, t), t.total))
    assert set(got) == set(want)
    for k, v in want.items():
        assert got[k] == pytest.approx(v, rel=1e-12, abs=1e-12)
    # Node ids grow with depth: a parent always comes first.
    assert (t.parent[1:] < np.arange(1, len(t))).all()


def check_exact(t: T.Tree):
    """Every node: total = self + children's totals; root = everything."""
    kids = np.bincount(t.parent[1:], weights=t.total[1:], minlength=len(t))
    np.testing.assert_allclose(t.total, t.self + kids, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("max_nodes,min_share", [(50, 0.0), (10, 0.0), (10_000, 0.05), (3, 0.0)])
def test_prune_keeps_totals_exact(max_nodes, min_share):
    p = random_profile(seed=1)
    full, _ = T.from_profile(p, "wall")
    t = T.prune(full, min_share=min_share, max_nodes=max_nodes)
    assert len(t) <= max(max_nodes, 1 + 1) and len(t) < len(full)
    check_exact(full)
    check_exact(t)
    assert t.total[0] == full.total[0] == pytest.approx(p.total("wall"))
    assert t.samples[0] == p.sample_count
    # Kept nodes keep their own numbers; what was folded sums to the (other) nodes.
    fullmap = dict(zip(paths(p, full), zip(full.total, full.self, full.samples)))
    for path, tot, slf, n in zip(paths(p, t), t.total, t.self, t.samples):
        if path[-1:] != ("(other)",):
            assert (tot, slf, n) == fullmap[path]
    other = t.key == T.OTHER
    assert other.any() and (t.folded[other] >= 1).all()
    if min_share:
        real = t.key >= 0
        assert (t.total[real] >= min_share * t.total[0]).all()


def test_icicle_ids_are_integers_and_title_is_honest():
    p = random_profile(seed=2)
    fig = profmagic.icicle(p, metric="cpu")
    tr = fig.data[0]
    assert np.asarray(tr.ids).dtype.kind == "i"   # integer ids: sent as one typed array
    assert tr.parents[0] == "" and all(isinstance(x, int) for x in tr.parents[1:])
    # Integer values that never leave a parent smaller than its children.
    vals = np.asarray(tr.values)
    kids = np.bincount(np.asarray(tr.parents[1:], dtype=np.int64), weights=vals[1:], minlength=len(vals))
    assert (vals >= kids).all()
    title = fig.layout.title.text
    assert "CPU time" in title and "synthetic" in title and "100 Hz" in title
    assert f"{p.sample_count:,} samples" in title and "s" in title
    # Escaped everywhere plotly would read HTML.
    assert EVIL not in fig.to_json() and "&lt;img src=x onerror=alert(1)&gt;" in tr.labels


def test_icicle_children_heaviest_first_and_threshold():
    p = random_profile(seed=3)
    t, _ = T.from_profile(p, "wall")
    kids = t.children(0)
    assert list(t.total[kids]) == sorted(t.total[kids], reverse=True)
    fig = profmagic.icicle(p, min_share=0.05)
    shown = [k for k in fig.data[0].labels[1:] if not k.startswith("(other")]
    assert 0 < len(shown) < len(t)


def big_profile(nstacks=200_000, nfn=3000, seed=7) -> Profile:
    """200k distinct stacks over a call tree with far more than 200k nodes."""
    rng = np.random.default_rng(seed)
    frames = make_frames([f"function_{i}" for i in range(nfn)],
                         [f"/usr/lib/python3/site-packages/pkg{i % 50}/module_{i}.py" for i in range(nfn)],
                         list(range(1, nfn + 1)), ["python"] * nfn)
    lengths = rng.integers(3, 25, nstacks)
    flat = rng.zipf(1.3, int(lengths.sum())) % nfn
    stacks = [tuple(x) for x in np.split(flat, np.cumsum(lengths)[:-1])]
    df = pd.DataFrame({"thread": pd.Series(np.array(["MainThread", "w1", "w2", "w3"])[rng.integers(0, 4, nstacks)],
                                           dtype=object),
                       "stack": pd.Series(stacks, dtype=object),
                       "samples": rng.integers(1, 5, nstacks)})
    df["wall"] = df["samples"] * 0.01
    df["cpu"] = df["wall"] * 0.5
    return Profile(frames, df, None, {"backend": "synthetic", "rate": 100.0}, Raw(b"", "folded"), "wall")


def test_payload_under_cap_on_200k_node_profile():
    p = big_profile()
    full, _ = T.from_profile(p, "wall")
    assert len(full) > 200_000
    fig = profmagic.icicle(p)
    payload = len(fig.to_json())
    assert len(fig.data[0].ids) <= T.MAX_NODES
    assert payload < 1_100_000, payload
    vals = np.asarray(fig.data[0].values)
    assert vals[0] == round(p.total("wall") * 1e6)


def recursive_profile() -> tuple[Profile, list]:
    b = StackBuilder()
    main, f, g, h = (b.frame(n, "r.py", i, "python") for i, n in enumerate(["main", "f", "g", "h"]))
    rows = [((main, f, g, f, h), 3), ((main, f, f, f), 2), ((main, g, f), 5), ((main, h), 7), ((main, f), 1)]
    for st, n in rows:
        sid = b.stack("T", st)
        for _ in range(n):
            b.add(sid, wall=0.01)
    names = ["main", "f", "g", "h"]
    return b.build(metric="samples", meta={"backend": "synthetic"}), [(tuple(names[x] for x in st), n)
                                                                     for st, n in rows]


def test_sandwich_sums_on_recursion():
    p, rows = recursive_profile()
    callers, callees, fns = sandwich.trees(p, "f", metric="samples")
    want_total = sum(n for st, n in rows if "f" in st)  # once per stack, however deep it recurses
    assert callers.total[0] == callees.total[0] == want_total
    fn_table = p.functions("samples").set_index("name")
    assert fn_table.at["f", "total"] == want_total
    check_exact(callers)
    check_exact(callees)
    # Callees hang under the outermost f: suffixes after it, by an independent count.
    suffix = defaultdict(int)
    for st, n in rows:
        if "f" in st:
            rest = st[st.index("f") + 1:]
            for i in range(1, len(rest) + 1):
                suffix[rest[:i]] += n
    got = {k: v for k, v in zip(paths(p, callees), callees.total) if k}
    assert got == suffix
    # Callers: what is above the outermost f, innermost first.
    prefix = defaultdict(int)
    for st, n in rows:
        if "f" in st:
            up = st[:st.index("f")][::-1]
            for i in range(1, len(up) + 1):
                prefix[up[:i]] += n
    got = {k: v for k, v in zip(paths(p, callers), callers.total) if k}
    assert got == prefix
    fig = profmagic.sandwich(p, "f")
    assert len(fig.data) == 2 and "callers" in fig.layout.title.text
    assert f"total {want_total:,} samples" in fig.layout.title.text


def test_sandwich_table_filter_sort_and_escape():
    p = random_profile(seed=4)
    df = sandwich.table(p, "wall", pattern=r"^fn1\d$")
    assert set(df["name"]) <= {f"fn{i}" for i in range(10, 20)} and len(df)
    assert list(df["self"]) == sorted(df["self"], reverse=True)   # by self time unless asked
    assert list(sandwich.table(p, "wall", sort="total")["total"]) == sorted(sandwich.table(p, "wall")["total"],
                                                                            reverse=True)
    fig = profmagic.sandwich(p)
    assert EVIL not in fig.to_json()
    with pytest.raises(ValueError, match="no function"):
        profmagic.sandwich(p, "no_such_function_anywhere")


def test_unknown_metric_is_said_not_zeroed():
    b = StackBuilder()
    s = b.stack("T", (b.frame("a", "a.py", 1, "python"),))
    b.add(s, wall=1.0)
    p = b.build(metric="wall", meta={"backend": "pyinstrument"}, unknown_metrics=["cpu"])
    with pytest.raises(ValueError, match="pyinstrument cannot measure CPU time"):
        profmagic.icicle(p, metric="cpu")


def test_approximate_is_in_the_title():
    p = random_profile(seed=5).with_meta(approximate="stacks rebuilt from pstats caller pairs")
    assert "approximate: stacks rebuilt from pstats" in profmagic.icicle(p).layout.title.text


def test_timeline_lanes_and_points():
    p = random_profile(seed=6, threads=("A", "B", "C"))
    fig = profmagic.timeline(p)
    lanes = {tr.yaxis for tr in fig.data}
    assert len(lanes) == 3
    assert sum(len(tr.x) for tr in fig.data) == len(p.samples)
    depth = p.stacks["stack"].map(len).to_numpy()[p.samples["stack"].to_numpy()]
    assert sorted(np.concatenate([np.asarray(tr.y) for tr in fig.data]).tolist()) == sorted(depth.tolist())
    assert EVIL not in fig.to_json()
    one = profmagic.timeline(p, thread="B")
    assert sum(len(tr.x) for tr in one.data) == int((p.samples["thread"] == "B").sum())
    with pytest.raises(ValueError, match="no time order"):
        profmagic.timeline(random_profile(timed=False))


def test_static_svg_widths_and_escaping():
    p = random_profile(seed=8)
    s = icicle.svg(p)
    assert s.startswith("<svg") and "<script" not in s and EVIL not in s
    assert "&lt;img src=x onerror=alert(1)&gt;" in s
    t = T.prune(T.from_profile(p, "wall")[0], max_nodes=200)
    x, w = icicle.layout(t)
    assert w[0] == 1 and x[0] == 0
    # Siblings tile their parent from the left, heaviest first, without overlap.
    for parent in np.unique(t.parent[1:]):
        kids = t.children(parent)
        np.testing.assert_allclose(x[kids], x[parent] + np.r_[0, np.cumsum(w[kids])[:-1]], atol=1e-12)
    assert json.dumps(len(s))  # a string, bounded by max_nodes


@pytest.mark.parametrize("metric", ["wall", "cpu", "samples"])
def test_every_view_title_names_metric_backend_rate_count_duration_and_approximate(metric):
    """Honest labels in every view: icicle, sandwich table, sandwich of a function, time order."""
    from profmagic.model import METRIC_LABELS
    p = random_profile(seed=9).with_meta(duration=4.25, approximate="made up for this test")
    fn = int(p.functions()["id"].iloc[0])
    figs = {"icicle": profmagic.icicle(p, metric=metric), "table": profmagic.sandwich(p, metric=metric),
            "sandwich": profmagic.sandwich(p, fn, metric=metric), "time": profmagic.timeline(p, metric=metric),
            "icicle thread": profmagic.icicle(p, metric=metric, thread="A")}
    for name, fig in figs.items():
        t = fig.layout.title.text
        for want in (METRIC_LABELS[metric], "backend synthetic", "100 Hz", f"{p.sample_count:,} samples",
                     "4.250 s", "approximate: made up for this test"):
            assert want in t, (name, want, t)


def test_a_large_profile_is_cut_early_with_the_same_result_and_paged(monkeypatch):
    """Over tree.LARGE frames, the view's tree is built with an early cut: the nodes shown and their
    totals are those of pruning the full tree. Sandwich lists a page, with exact totals."""
    p = big_profile(nstacks=20_000)
    want = T.prune(T.from_profile(p, "wall")[0], max_nodes=300)
    fid = int(p.functions("wall")["id"].iloc[3])
    want_sw = sandwich.trees(p, fid, "wall", max_nodes=200)[:2]
    monkeypatch.setattr(T, "LARGE", 1000)
    for a, b in zip(sandwich.trees(p, fid, "wall", max_nodes=200)[:2], want_sw):   # callers, callees
        assert sorted(zip(paths(p, a), np.round(a.total, 9))) == sorted(zip(paths(p, b), np.round(b.total, 9)))
    got, n_full, _ = T.pruned(p, "wall", max_nodes=300)
    assert n_full is None                                     # the full tree was never built
    assert sorted(zip(paths(p, got), np.round(got.total, 9))) == sorted(zip(paths(p, want), np.round(want.total, 9)))
    check_exact(got)
    page = sandwich.table(p, "wall", limit=40)
    assert len(page) == 40 and list(page["self"]) == sorted(page["self"], reverse=True)
    exact = p.functions("wall").set_index("id")
    for fid, total, slf in zip(page["id"], page["total"], page["self"]):
        assert (total, slf) == pytest.approx((exact.at[fid, "total"], exact.at[fid, "self"]))

"""profmagic.compare(before, after): exact deltas, one-sided frames kept, normalisation, escaping."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

import profmagic
from profmagic.model import StackBuilder
from profmagic.views import diff, sidebyside
from profmagic.views.mime import PLOTLY_MIME

pytestmark = pytest.mark.timeout(120)

BEFORE = "main;f;g 10\nmain;f;h 5\nmain;old 3\n"
AFTER = "main;f;g 4\nmain;f;h 5\nmain;new 7\nmain;f;h;x 2\n"


def _row(table, name):
    r = table[table["name"] == name]
    assert len(r) == 1, f"{name} appears {len(r)} times"
    return r.iloc[0]


def diff_trace(fig):
    """The differential icicle shown (the visible one whose hover gives a change)."""
    tr = [t for t in fig.data if t.type == "icicle" and "change:" in (t.hovertemplate or "")
          and t.visible is not False]
    assert len(tr) == 1
    return tr[0]


def _nodes(fig):
    tr = diff_trace(fig)
    ids = list(tr.ids)
    label = dict(zip(ids, tr.labels))
    parent = dict(zip(ids, tr.parents))

    def path(i):
        out = []
        while i != "" and i is not None:
            out.append(label[i])
            i = parent[i]
        return tuple(reversed(out))
    return {path(i): (v, c[3]) for i, v, c in zip(ids, tr.values, tr.customdata)}


def test_exact_deltas_and_one_sided_functions():
    c = profmagic.compare(profmagic.load(BEFORE), profmagic.load(AFTER))
    assert c.metric == "samples"
    t = c.table
    assert set(t["name"]) == {"main", "f", "g", "h", "x", "old", "new"}
    expect = {  # name: (total before, total after, self before, self after, side)
        "main": (18, 18, 0, 0, "both"), "f": (15, 11, 0, 0, "both"), "g": (10, 4, 10, 4, "both"),
        "h": (5, 7, 5, 5, "both"), "x": (0, 2, 0, 2, "only after"), "old": (3, 0, 3, 0, "only before"),
        "new": (0, 7, 0, 7, "only after"),
    }
    for name, (tb, ta, sb, sa, side) in expect.items():
        r = _row(t, name)
        assert (r.total_before, r.total_after, r.self_before, r.self_after, r.side) == (tb, ta, sb, sa, side)
        assert r.delta_total == ta - tb and r.delta_self == sa - sb
    # Largest change of self time first; a change relative to nothing is unknown, not infinite.
    assert list(t["name"]) == ["new", "g", "old", "x", "f", "h", "main"]
    # Shown: callers with no self time on either side (f, main) are folded away.
    assert list(c.shown_table()["name"]) == ["new", "g", "old", "x", "h"]
    assert np.isnan(_row(t, "new").change_pct)
    assert _row(t, "g").change_pct == pytest.approx(-60.0)


def test_differential_icicle_shape_from_after_and_vanished_frames_shown():
    c = profmagic.compare(profmagic.load(BEFORE), profmagic.load(AFTER))
    n = _nodes(c.figure)
    root = ("all threads",)
    # Width: after's weight, plus the vanished main;old subtree at its before width.
    assert n[root][0] == 18 + 3
    assert n[root + ("main",)][0] == 21
    assert n[root + ("main", "f")] == (11, -4)
    assert n[root + ("main", "f", "g")] == (4, -6)
    assert n[root + ("main", "f", "h")] == (7, 2)
    assert n[root + ("main", "f", "h", "x")] == (2, 2)
    assert n[root + ("main", "new")] == (7, 7)       # new: red (positive)
    assert n[root + ("main", "old")] == (3, -3)      # gone: still drawn, blue (negative)
    tr = diff_trace(c.figure)
    assert tr.branchvalues == "total"
    # Coloured where the change is outside both runs' noise, grey where it is within it.
    colour = {path: c for path, c in zip(_nodes(c.figure), tr.marker.colors)}
    status = {path: cd[4] for path, cd in zip(_nodes(c.figure), tr.customdata)}
    for path in colour:
        assert (colour[path] == "#d0d0d0") == status[path].endswith("within noise"), (path, colour, status)
    # Children never outgrow their parent (plotly drops the whole figure if they do).
    vals = dict(zip(tr.ids, tr.values))
    kids: dict = {}
    for i, p in zip(tr.ids, tr.parents):
        if p != "":
            kids.setdefault(p, 0.0)
            kids[p] += vals[i]
    assert all(s <= vals[p] + 1e-9 for p, s in kids.items())
    title = c.figure.layout.title.text
    assert "samples" in title and "red slower" in title and "only in before" in title


def test_normalisation_compares_shares():
    before = profmagic.load(BEFORE)
    doubled = profmagic.load("".join(f"{ln.rsplit(' ', 1)[0]} {2 * int(ln.rsplit(' ', 1)[1])}\n"
                                     for ln in BEFORE.splitlines()))
    raw = profmagic.compare(before, doubled)
    assert _row(raw.table, "g").delta_total == 10 and _row(raw.table, "main").delta_total == 18
    norm = profmagic.compare(before, doubled, normalize=True)
    assert np.allclose(norm.table["delta_total"], 0.0)
    n2 = profmagic.compare(before, profmagic.load(AFTER), normalize=True)
    assert _row(n2.table, "g").delta_total == pytest.approx(4 / 18 - 10 / 18)
    assert _row(n2.table, "main").total_after == pytest.approx(1.0)
    assert "normalised" in n2.figure.layout.title.text


def _timed(rows, backend="test"):
    b = StackBuilder()
    for thread, names, wall, cpu in rows:
        fids = [b.frame(n, "app.py", i + 1, "python") for i, n in enumerate(names)]
        b.add(b.stack(thread, fids), samples=1, wall=wall, cpu=cpu)
    return b.build(metric="wall", meta={"backend": backend})


def test_metric_choice_and_unknown_weights():
    a = _timed([("T", ["main", "f"], 1.0, 0.5), ("T", ["main", "g"], 2.0, np.nan)])
    b = _timed([("T", ["main", "f"], 0.5, 0.5), ("T", ["main", "g"], 2.0, 0.1)])
    c = profmagic.compare(a, b)
    assert c.metric == "wall"
    assert _row(c.table, "f").delta_total == pytest.approx(-0.5)
    cc = profmagic.compare(a, b, metric="cpu")
    assert cc.unknown_before == 1 and "unknown cpu" in cc.summary()
    folded = profmagic.load(BEFORE)
    assert profmagic.compare(a, folded).metric == "samples"  # the one metric both know
    with pytest.raises(ValueError, match="wall"):
        profmagic.compare(a, folded, metric="wall")


def test_names_are_escaped_everywhere():
    evil = "<img src=x onerror=alert(1)>"
    a = profmagic.load(f"main;{evil} 3\nmain;ok 1\n")
    b = profmagic.load(f"main;{evil} 1\nmain;</script><script>alert(2)</script> 2\n")
    c = profmagic.compare(a, b)
    labels = list(diff_trace(c.figure).labels)
    assert "&lt;img src=x onerror=alert(1)&gt;" in labels
    assert not any("<img" in str(x) or "<script" in str(x) for x in labels)
    html = c._repr_mimebundle_()["text/html"]
    assert "<img src=x" not in html and "</script><script>alert(2)" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html


def test_backends_side_by_side_table_and_icicles():
    a = _timed([("T", ["main", "work"], 1.0, 1.0), ("T", ["main", "wait"], 3.0, 0.0)], "sampler")
    b = profmagic.load("main;work 9\nmain;wait 1\n")  # a CPU-ish sampler that never sees the wait
    s = sidebyside.side_by_side({"sampler": a, "other": b})
    t = s.table
    assert set(t["backend"]) == {"sampler", "other"}
    wait = t[(t["backend"] == "sampler") & (t["function"] == "wait")].iloc[0]
    assert wait["share %"] == pytest.approx(75.0) and wait["metric"] == "wall"
    w = s.wide().set_index("function")
    assert w.loc["wait", "sampler (wall) %"] == pytest.approx(75.0)
    assert w.loc["wait", "other (samples) %"] == pytest.approx(10.0)
    assert [t.type for t in s.figure.data] == ["icicle", "icicle"]
    only_cpu = sidebyside.side_by_side({"sampler": a, "other": b}, metric="wall")
    assert only_cpu.metrics["other"] == "unknown"
    assert "unknown" in only_cpu._repr_mimebundle_()["text/html"]
    assert pd.isna(only_cpu.wide()["other"]).all()


def test_no_cdn_anywhere_in_the_package():
    """Notebooks must work offline (closed network, nbconvert): nothing may load script from a CDN."""
    import os
    root = os.path.dirname(profmagic.__file__)
    hits = []
    for d, _, files in os.walk(root):
        for f in files:
            if f.endswith((".py", ".html", ".js", ".json", ".txt", ".css")):
                text = open(os.path.join(d, f), encoding="utf-8", errors="replace").read()
                hits += [(f, bad) for bad in ("cdn.", "unpkg", "https://cdn") if bad in text]
    assert hits == []


def test_displays_are_one_output_plotly_mime_with_static_svg_twin():
    """One output: live, plotly's own mime type (the front end draws it, no plotly.js shipped);
    nbconvert/GitHub: the text/html twin of the same bundle holds static SVG icicles, no script."""
    a, b = profmagic.load(BEFORE.encode(), format="folded"), profmagic.load(AFTER.encode(), format="folded")
    for view, n_svg in ((diff.compare(a, b), 3), (sidebyside.side_by_side({"x": a, "y": b}), 2)):
        bundle = view._repr_mimebundle_()
        assert set(bundle) == {PLOTLY_MIME, "text/html", "text/plain"}
        html = bundle["text/html"]
        assert html.count("<svg") == n_svg and "<script" not in html and "<table" in html
        assert not hasattr(view, "_ipython_display_")   # IPython shows this one bundle


def test_before_after_at_one_scale_with_a_normalise_switch_and_change_colours_in_the_static_twin():
    before = profmagic.load("main;slow 150\nmain;other 9\n")
    after = profmagic.load("main;slow 4\nmain;other 9\n")
    c = profmagic.compare(before, after)
    panels = [t for t in c.figure.data if t.type == "icicle" and "change:" not in (t.hovertemplate or "")]
    width = [t.domain.x[1] - t.domain.x[0] for t in panels]
    assert width[1] / width[0] == pytest.approx(13 / 159)          # the time ratio: one scale
    norm = next(b for b in c.figure.layout.updatemenus[0].buttons if b.label == "normalised")
    xs = norm.args[0]["domain.x"]
    assert xs[0][1] - xs[0][0] == pytest.approx(xs[1][1] - xs[1][0])   # normalised: each its own width
    html = c._repr_mimebundle_()["text/html"]
    diff_svg = html[html.index("class=\"profmagic-icicle profmagic-diff\""):]
    fills = set(re.findall(r'fill="(#[0-9a-f]{6})"', diff_svg[:diff_svg.index("</svg>")]))
    red = [f for f in fills if int(f[1:3], 16) > int(f[5:7], 16) + 60]
    blue = [f for f in fills if int(f[5:7], 16) > int(f[1:3], 16) + 60]
    assert red == [] and blue, fills                   # slow got faster: blue, nothing slower
    grew = profmagic.compare(after, before)._repr_mimebundle_()["text/html"]
    grew = grew[grew.index("profmagic-diff"):]
    assert any(int(f[1:3], 16) > int(f[5:7], 16) + 60 for f in re.findall(r'fill="(#[0-9a-f]{6})"', grew))


def test_merge_runs_wall_from_one_cpu_from_the_other():
    from profmagic.transforms import merge_runs
    b = StackBuilder()
    f = [b.frame(n, "a.py", i + 1, "python") for i, n in enumerate(["main", "work", "nap"])]
    b.add(b.stack("T", [f[0], f[1]]), samples=0, wall=0.30)
    b.add(b.stack("T", [f[0], f[2]]), samples=0, wall=0.60)
    wall = b.build(metric="wall", meta={"backend": "cprofile", "rate": 100.0})
    c = StackBuilder()
    g = [c.frame(n, "a.py", i + 1, "python") for i, n in enumerate(["main", "work", "nap", "gc"])]
    c.add(c.stack("T", [g[0], g[1]]), samples=0, cpu=0.25)
    c.add(c.stack("T", [g[0], g[2]]), samples=0, cpu=0.001)
    c.add(c.stack("T", [g[0], g[3]]), samples=0, cpu=0.01)   # seen in the cpu run only
    cpu = c.build(metric="cpu", meta={"backend": "cprofile", "cell_cpu": 0.261})
    p = merge_runs(wall, cpu)
    fn = {m: dict(zip(p.functions(m)["name"], p.functions(m)["total"])) for m in ("wall", "cpu", "off_cpu")}
    assert fn["wall"] == pytest.approx({"main": 0.91, "work": 0.30, "nap": 0.60, "gc": 0.01})
    assert fn["cpu"] == pytest.approx({"main": 0.261, "work": 0.25, "nap": 0.001, "gc": 0.01})
    assert fn["off_cpu"]["nap"] == pytest.approx(0.599)
    assert p.meta["runs"] == 2 and "two separate runs" in p.meta["approximate"]
    assert list(p.stacks["samples"][:2]) == [0, 0]   # cProfile has no samples: none invented


def test_calibrate_both_uses_the_wall_factor_for_a_thread_that_barely_ran():
    from profmagic.backends.pyspy import calibrate_both
    b = StackBuilder()
    f = [b.frame(n, "a.py", i + 1, "python") for i, n in enumerate(["main", "join", "spin"])]
    b.add(b.stack("cell", [f[0], f[1]]), samples=100, wall=1.0, cpu=0.02)   # 2 on-CPU samples
    b.add(b.stack("worker", [f[2]]), samples=100, wall=1.0, cpu=0.9)
    p = b.build(metric="wall", meta={"rate": 100.0})
    q = calibrate_both(p, "cell", wall_s=1.25, cpu_s=0.001, requested=100.0)
    assert q.meta["rate"] == pytest.approx(80.0) and q.meta["requested_rate"] == 100.0
    w = q.stacks.set_index("thread")
    assert w.loc["worker", "wall"] == pytest.approx(1.25)
    assert w.loc["worker", "cpu"] == pytest.approx(0.9 * 1.25)   # not 0.9 * 0.001 / 0.02
    assert "cpu weighted at the wall rate" in q.meta["cpu_calibration_note"]
    assert w.loc["cell", "cpu"] == pytest.approx(0.001)   # the cell's own thread: its measured CPU
    # Enough CPU on the cell thread: its own factor.
    b2 = StackBuilder()
    b2.add(b2.stack("cell", [b2.frame("spin", "a.py", 1, "python")]), samples=100, wall=1.0, cpu=0.5)
    r = calibrate_both(b2.build(metric="wall", meta={"rate": 100.0}), "cell", 1.0, 0.45, 100.0)
    assert r.stacks["cpu"].sum() == pytest.approx(0.45) and r.stacks["wall"].sum() == pytest.approx(1.0)

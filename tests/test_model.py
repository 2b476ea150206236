"""The Profile model: functions() rule (speedscope's), totals, metrics."""
from __future__ import annotations

import numpy as np
import pytest

import profmagic
from profmagic.model import StackBuilder


def _build(stacks, thread="t"):
    b = StackBuilder()
    ids = {}
    for names, n in stacks:
        fids = [ids.setdefault(x, b.frame(x, "m.py", 1, "python")) for x in names]
        b.add(b.stack(thread, fids), samples=n)
    return b.build(metric="samples")


def _self_total(p):
    fn = p.functions()
    return {r.name: (r.self, r.total) for r in fn.itertuples()}


def test_functions_rule_from_the_issue():
    p = _build([("abc", 2), ("abd", 4), ("abc", 3), ("ab", 5)])
    assert p.total() == 14
    assert _self_total(p) == {"a": (0, 14), "b": (5, 14), "c": (5, 5), "d": (4, 4)}
    # Heaviest total first (ties: heavier self first).
    assert list(p.functions()["name"]) == ["b", "a", "c", "d"]


def test_functions_recursion_counts_total_once_per_sample():
    p = _build([("abab", 3), ("ab", 1), ("aba", 2)])
    st = _self_total(p)
    assert st["a"] == (2, 6)  # a appears twice in a;b;a;b but counts once per sample
    assert st["b"] == (4, 6)
    assert p.total() == 6


def test_functions_with_folded_text_and_time_metric():
    p = profmagic.load("a;b;c 2\na;b;d 4\na;b;c 3\na;b 5\n")
    assert _self_total(p) == {"a": (0, 14), "b": (5, 14), "c": (5, 5), "d": (4, 4)}
    b = StackBuilder()
    f = [b.frame(x) for x in "xy"]
    b.add(b.stack("main", f), samples=2, wall=0.5, cpu=0.25)
    b.add(b.stack("main", f[:1]), samples=1, wall=0.25, cpu=0.25)
    p = b.build()
    assert p.metric == "wall"
    assert p.total("wall") == pytest.approx(0.75)
    assert p.total("cpu") == pytest.approx(0.5)
    assert p.total("off_cpu") == pytest.approx(0.25)
    assert p.total("samples") == 3
    fn = p.functions("cpu").set_index("name")
    assert fn.loc["x", "total"] == pytest.approx(0.5) and fn.loc["x", "self"] == pytest.approx(0.25)
    assert set(p.metrics) == {"samples", "wall", "cpu", "off_cpu"}


def test_unknown_metric_is_named():
    p = _build([("ab", 1)])
    with pytest.raises(KeyError, match="no 'wall' metric; it has samples"):
        p.total("wall")


def test_time_ordered_samples_keep_order_and_thread():
    b = StackBuilder()
    f = b.frame("f")
    g = b.frame("g")
    for i, (th, st) in enumerate([("A", (f,)), ("B", (f, g)), ("A", (f,))]):
        b.add(b.stack(th, st), time=0.1 * i, wall=0.1)
    p = b.build()
    assert list(p.samples["thread"]) == ["A", "B", "A"]
    assert np.allclose(p.samples["time"], [0.0, 0.1, 0.2])
    assert p.stacks.loc[p.samples["stack"].iloc[1], "stack"] == (f, g)
    assert p.duration == pytest.approx(0.2)


def test_functions_of_a_both_profile_have_wall_cpu_off_cpu_and_a_readable_index():
    b = StackBuilder()
    main = b.frame("main", "/app/main.py", 1, "python")
    run_a = b.frame("run", "/app/a/jobs.py", 3, "python")
    run_b = b.frame("run", "/app/b/jobs.py", 3, "python")
    b.add(b.stack("T", (main, run_a)), samples=4, wall=0.4, cpu=0.1)
    b.add(b.stack("T", (main, run_b)), samples=2, wall=0.2, cpu=0.2)
    b.add(b.stack("T", (main,)), samples=1, wall=0.1, cpu=0.05)
    f = b.build(metric="wall").functions()
    assert list(f.index) == ["main", "run (a/jobs.py)", "run (b/jobs.py)"] and f.index.name == "function"
    assert f.loc["main", ["total", "wall", "cpu", "off_cpu"]].tolist() == pytest.approx([0.7, 0.7, 0.35, 0.35])
    assert f.loc["run (a/jobs.py)", ["self_wall", "self_cpu", "self_off_cpu"]].tolist() == pytest.approx([0.4, 0.1, 0.3])
    assert f.loc["main", "self_off_cpu"] == pytest.approx(0.05)
    one = profmagic.load("a;b 2\n").functions()   # one clock: no per-clock columns
    assert list(one.columns) == ["id", "name", "file", "self", "total"] and list(one.index) == ["b", "a"] or \
        list(one.index) == ["a", "b"]

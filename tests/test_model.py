"""The Profile model: functions() rule (speedscope's), totals, metrics."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import profmagic
from profmagic.model import Profile, StackBuilder, make_frames


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
    plain = [c for c in one.columns if not c.endswith(("_lo", "_hi"))]   # the 95% interval's columns aside
    assert plain == ["id", "name", "file", "self", "total"] and list(one.index) == ["b", "a"] or \
        list(one.index) == ["a", "b"]


def _memory_profile(meta=None):
    """Two stacks with memory weights, as formats/memray.py builds them: no samples, integer bytes."""
    b = StackBuilder()
    cell, alloc, strs = (b.frame(n, "cell.py", i, "python") for i, n in enumerate(("cell", "alloc", "strs")))
    b.add(b.stack("t", (cell, alloc)), samples=0, bytes=21_313_384, allocated=23_310_808, allocations=59_804)
    b.add(b.stack("t", (cell, strs)), samples=0, bytes=0, allocated=25_333_852, allocations=399_817)
    return b.build(metric="bytes", meta={"backend": "memray", "memray": "1.20.0", "duration": 0.5, **(meta or {})})


def test_memory_metrics_total_functions_and_label():
    p = _memory_profile()
    assert p.metrics == ["samples", "bytes", "allocated", "allocations"]
    assert p.total() == 21_313_384 and isinstance(p.total(), int)
    assert p.total("allocated") == 48_644_660
    fn = p.functions().set_index("name")
    assert fn.loc["alloc", "total"] == 21_313_384 and fn.loc["strs", "total"] == 0
    assert fn["total"].dtype == np.int64
    assert p.functions("allocations").set_index("name").loc["strs", "self"] == 399_817
    d = p.describe()
    assert d.startswith("bytes alive at the memory high-water mark · backend memray 1.20.0 · 459,621 allocations")
    assert "Hz" not in d and "samples" not in d
    assert not p.is_empty
    # Leaks mode: the same column, named for what it holds.
    leaks = _memory_profile({"metric_labels": {"bytes": "bytes still alive at the end"}})
    assert leaks.describe().startswith("bytes still alive at the end · backend memray 1.20.0")


def test_memory_profile_round_trips_through_speedscope():
    from profmagic.formats import speedscope
    p = _memory_profile()
    doc = speedscope.to_dict(p)
    assert {q["unit"] for q in doc["profiles"]} == {"bytes"}
    q = speedscope.read(speedscope.write(p))
    assert q.metric == "bytes"
    for m in ("bytes", "allocated", "allocations", "samples"):
        assert q.total(m) == p.total(m), m
    a = q.replace(metric="allocations")
    assert {q_["unit"] for q_ in speedscope.to_dict(a)["profiles"]} == {"none"}
    assert speedscope.read(speedscope.write(a)).total("allocations") == 459_621


def test_memory_views_say_bytes():
    from profmagic import report
    from profmagic.views import fmt, icicle
    p = _memory_profile()
    assert fmt("bytes", 21_313_384) == "20.33 MiB" and fmt("allocations", 59_804) == "59,804 allocations"
    tr = icicle.figure(p).data[0]
    assert max(tr.values) == 21_313_384  # byte counts, not microseconds
    assert " B (" in tr.hovertemplate and "samples" not in tr.hovertemplate
    html = report.static_html(p)
    assert "20.33 MiB" in html and "bytes alive at the memory high-water mark" in html


def test_time_and_memory_profile_round_trips_through_speedscope():
    """Time rows with time-ordered samples beside memory rows (transforms.time_and_memory): each metric's
    total is its recording's own, one function across both; written per stack, nothing lost."""
    from profmagic import transforms
    from profmagic.formats import speedscope
    b = StackBuilder()
    cell, busy = (b.frame(n, "cell.py", i, "python") for i, n in enumerate(("cell", "busy")))
    for i in range(3):
        b.add(b.stack("t", (cell, busy)), samples=1, time=0.01 * i, wall=0.01, cpu=0.01)
    t = b.build(metric="wall")
    m = _memory_profile()
    both = transforms.time_and_memory(t, m)
    assert both.threads == ["t"] and both.metric == "wall" and len(both.samples) == 3
    for metric in ("wall", "cpu", "samples"):
        assert both.total(metric) == pytest.approx(t.total(metric)), metric
    for metric in ("bytes", "allocated", "allocations"):
        assert both.total(metric) == m.total(metric), metric
    fn = both.functions("bytes").set_index("name")
    assert fn.loc["cell", "total"] == 21_313_384 and fn.loc["busy", "total"] == 0
    assert both.functions("wall").set_index("name").loc["cell", "total"] == pytest.approx(0.03)
    q = speedscope.read(speedscope.write(both))
    for metric in ("wall", "cpu", "bytes", "allocated", "allocations", "samples"):
        assert q.total(metric) == pytest.approx(both.total(metric)), metric
    # A metric memray did not record (an aggregated capture) stays unknown, not 0 on the time rows.
    agg = m.replace(stacks=m.stacks.assign(allocated=np.nan, allocations=np.nan))
    agg = agg.with_meta(unknown={"allocated": "aggregated", "allocations": "aggregated"})
    assert transforms.time_and_memory(t, agg).metrics == ["samples", "wall", "cpu", "off_cpu", "bytes"]


def test_add_samples_in_bulk_with_per_sample_columns():
    b = StackBuilder()
    f, g = b.frame("f"), b.frame("g")
    a, c = b.stack("A", (f,)), b.stack("A", (f, g))
    b.add(a, time=0.0, wall=0.1)  # a single sample first: the bulk columns start after it
    b.add_samples([c, a, c], time=[0.1, 0.2, 0.3], wall=[0.1, 0.2, 0.3], cpu=[0.1, 0.0, 0.3],
                  columns={"state": ["R", "S", "R"], "on_cpu": np.array([True, False, True])})
    p = b.build()
    assert p.stacks["samples"].tolist() == [2, 2]
    assert p.stacks["wall"].tolist() == pytest.approx([0.3, 0.4])
    assert p.stacks["cpu"].tolist() == pytest.approx([0.0, 0.4])
    assert p.samples["state"].tolist() == [None, "R", "S", "R"]
    assert p.samples["cpu"].isna().tolist() == [True, False, False, False]
    only_bulk = StackBuilder()
    s = only_bulk.stack("A", (only_bulk.frame("f"),))
    only_bulk.add_samples([s, s], time=[0.0, 0.1], columns={"on_cpu": np.array([True, False])})
    assert only_bulk.build().samples["on_cpu"].dtype == bool
    with pytest.raises(ValueError, match="column 'x' has 1 values for 2 samples"):
        only_bulk.add_samples([s, s], time=[0.2, 0.3], columns={"x": [1]})


# -- a plain-data Profile (issue 26): read-only, consistent, deep-frozen meta ------------------------------
def _timed(n_main=6, n_worker=4):
    b = StackBuilder()
    f, g = b.frame("f", "m.py", 1, "python"), b.frame("g", "m.py", 2, "python")
    t = 0.0
    for thread, n, st in (("MainThread", n_main, (f,)), ("worker", n_worker, (f, g))):
        sid = b.stack(thread, st)
        for _ in range(n):
            b.add(sid, time=t, wall=0.01)
            t += 0.01
    return b.build(metric="wall", meta={"backend": "synthetic", "cell_thread": "MainThread", "sample_count": 10,
                                        "cell_thread_samples": 6, "processes": {"a": {"pid": 1, "argv": ["x"]}}})


@pytest.mark.parametrize("name", ["frames", "stacks", "samples", "meta", "thread_table", "raw", "metric"])
def test_attributes_are_read_only(name):
    p = _timed()
    with pytest.raises(AttributeError, match="read-only"):
        setattr(p, name, None)
    with pytest.raises(AttributeError):
        delattr(p, name)
    with pytest.raises(AttributeError):
        p.anything_new = 1


@pytest.mark.parametrize("write", [
    lambda p: p.frames.loc.__setitem__((0, "name"), "x"),
    lambda p: p.frames.iloc.__setitem__((0, 0), "x"),
    lambda p: p.stacks.at.__setitem__((0, "samples"), 99),
    lambda p: p.stacks.iat.__setitem__((0, 2), 99),
    lambda p: p.stacks.__setitem__("x", 1),
    lambda p: p.stacks.__setitem__("samples", 0),
    lambda p: p.stacks.__delitem__("samples"),
    lambda p: p.samples.insert(0, "y", 1),
    lambda p: p.samples.pop("time"),
    lambda p: p.thread_table.fillna({"name": "?"}, inplace=True),
    lambda p: p.frames.update(pd.DataFrame({"name": ["x"]})),
    lambda p: setattr(p.stacks, "columns", list("abcdefg")[:len(p.stacks.columns)]),
])
def test_frames_are_frozen(write):
    p = _timed()
    before = (p.frames.copy(), p.stacks.copy(), p.samples.copy(), p.thread_table.copy())
    with pytest.raises(TypeError, match="read-only"):
        write(p)
    for a, b in zip(before, (p.frames, p.stacks, p.samples, p.thread_table)):
        assert a.equals(pd.DataFrame(b)) and list(a.columns) == list(b.columns)


def test_derived_frames_are_ordinary_and_writable():
    p = _timed()
    c = p.stacks.copy()
    c["x"] = 1
    c.loc[0, "samples"] = 50
    assert type(c) is pd.DataFrame and p.stacks["samples"].tolist() == [6, 4]
    g = p.samples.groupby("thread", observed=True)["wall"].sum()
    assert type(g) is pd.Series and g.round(6).to_dict() == {"MainThread": 0.06, "worker": 0.04}
    agg = p.stacks.groupby("thread", observed=True).agg(n=("samples", "sum"))
    agg["m"] = 2
    assert type(agg) is pd.DataFrame and agg["n"].tolist() == [6, 4]
    sel = p.stacks[["thread", "samples"]]
    sel.loc[0, "samples"] = 7   # copy-on-write: the profile's frame stays as it was
    assert type(sel) is pd.DataFrame and p.stacks.loc[0, "samples"] == 6
    col = p.stacks["samples"]
    col.iloc[0] = 9
    assert p.stacks["samples"].tolist() == [6, 4] and p.sample_count == 10


def test_frames_given_to_a_profile_are_copies():
    frames = make_frames(["f"], ["m.py"], [1], ["python"])
    stacks = pd.DataFrame({"thread": ["t"], "stack": [(0,)], "samples": [3]})
    p = Profile(frames, stacks)
    frames.loc[0, "name"] = "changed"
    stacks.loc[0, "samples"] = 100
    assert p.frames.loc[0, "name"] == "f" and p.sample_count == 3


def test_subset_and_replace_recompute_derived_figures():
    p = _timed()
    assert p.meta["sample_count"] == p.sample_count == 10 and p.meta["cell_thread_samples"] == 6
    q = p.subset(p.stacks["thread"] == "worker")
    assert q.sample_count == 4 == q.meta["sample_count"] == len(q.samples)
    assert q.meta["cell_thread_samples"] == 0
    st = p.stacks.assign(samples=p.stacks["samples"] * 2)
    r = p.replace(stacks=st)
    assert r.meta["sample_count"] == 20 and r.meta["cell_thread_samples"] == 12
    assert p.meta["sample_count"] == 10   # the original is unchanged


def test_replace_stacks_checks_more_than_rows():
    p = _timed()
    with pytest.raises(ValueError, match="samples"):
        p.replace(stacks=p.stacks.iloc[:1])
    with pytest.raises(ValueError, match="frame ids that are not in frames: \\[7\\]"):
        p.replace(stacks=p.stacks.assign(stack=[(0,), (0, 7)]))
    with pytest.raises(ValueError, match="column\\(s\\) samples"):
        p.replace(stacks=p.stacks.drop(columns=["samples"]))
    with pytest.raises(ValueError, match="not in the thread table"):
        p.replace(stacks=p.stacks.assign(thread=["MainThread", "nobody"]), threads=p.thread_table)
    with pytest.raises(ValueError, match="frame ids"):
        p.replace(frames=p.frames.iloc[:1])


def test_meta_is_deep_frozen_and_json_writes_it():
    import copy
    import json
    import pickle
    p = _timed()
    procs = p.meta["processes"]
    with pytest.raises(TypeError, match="read-only"):
        procs["a"]["pid"] = 2
    with pytest.raises(TypeError):
        procs["b"] = {}
    with pytest.raises(TypeError):
        procs["a"]["argv"].append("y")
    with pytest.raises(TypeError):
        p.meta.extra["x"] = 1
    assert procs == {"a": {"pid": 1, "argv": ["x"]}} and procs["a"]["argv"] == ["x"]
    assert json.loads(json.dumps(p.meta.to_dict()))["processes"] == {"a": {"pid": 1, "argv": ["x"]}}
    assert copy.deepcopy(p.meta) == p.meta and pickle.loads(pickle.dumps(p.meta))["processes"] == procs
    mine = dict(procs["a"])   # a plain copy is the caller's to change
    mine["pid"] = 3
    assert procs["a"]["pid"] == 1


def test_with_process_leaves_the_input_meta_alone():
    from profmagic import multi
    p = _timed()
    q = multi.with_process(p, "a", {"pid": 5, "role": "parent"})
    assert p.meta["processes"] == {"a": {"pid": 1, "argv": ["x"]}}
    assert q.meta["processes"]["a"] == {"pid": 5, "argv": ["x"], "role": "parent"}
    assert set(q.thread_table["process"]) == {"a"}


def test_model_lends_nothing_upward():
    p = _timed()
    for name in ("save", "icicle", "sandwich", "timeline", "to_folded", "to_speedscope", "concat",
                 "_repr_mimebundle_"):
        assert not hasattr(p, name), name
    assert profmagic.to_folded(p, metric="samples") == "MainThread;f 6\nworker;f;g 4\n"
    assert profmagic.to_speedscope(p)["shared"]["frames"][1]["name"] == "g"
    assert {"f", "g"} <= set(profmagic.icicle(p).data[0].labels)


def test_most_read_extras_are_typed_fields_and_round_trip(tmp_path):
    from profmagic.model import Meta
    m = Meta.of({"backend": "memray", "timing": "timed", "memray": "1.15", "memray_mode": "aggregated",
                 "metric_labels": {"bytes": "bytes still alive at the end"}, "cluster": {"session": "s1", "ranks": [0, 1]},
                 "memory_timeline": {"t": [0.0, 0.5], "heap": [10, 20]}, "other": 1})
    assert (m.timing, m.memray, m.memray_mode) == ("timed", "1.15", "aggregated")
    assert m.metric_labels == {"bytes": "bytes still alive at the end"} and m.cluster["ranks"] == [0, 1]
    assert m.memory_timeline["heap"] == [10, 20] and dict(m.extra) == {"other": 1}
    assert m["timing"] == "timed" and m.get("cluster")["session"] == "s1"
    p = _timed().replace(meta=m, metric="samples")
    assert p.label("bytes") == "bytes still alive at the end"
    path = tmp_path / "p.speedscope.json"
    profmagic.save(p, path)
    back = profmagic.load(str(path)).meta
    assert (back.timing, back.memray_mode, back.metric_labels, back.cluster) == \
        ("timed", "aggregated", m.metric_labels, m.cluster)
    assert back.memory_timeline == m.memory_timeline

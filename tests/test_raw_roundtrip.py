"""Every raw capture is a format: for each backend, ``load(p.raw)`` gives back the Profile its
reader built (before the session's processors), and speedscope keeps the thread table."""
from __future__ import annotations

import threading

import numpy as np
import pytest
from workloads import busy, nap

import profmagic
from profmagic import backends, multi
from profmagic.backends.base import Options
from profmagic.model import StackBuilder


def content(p):
    """Everything a view shows: per (thread label, process, frame tuple) the samples and weights,
    and the time-ordered samples' count."""
    fr = p.frames
    key = {f: (fr.at[f, "name"], fr.at[f, "file"], None if fr.at[f, "line"] is np.nan else fr.at[f, "line"],
               str(fr.at[f, "kind"])) for f in fr.index}
    rows = {}
    table = p.thread_table
    for th, stack, row in zip(p.thread_ids(), p.stacks["stack"], p.stacks.itertuples()):
        k = (table.at[th, "label"], table.at[th, "process"], tuple(key[f] for f in stack))
        acc = rows.setdefault(k, [0, 0.0, 0.0])
        acc[0] += int(row.samples)
        for j, m in ((1, "wall"), (2, "cpu")):
            v = getattr(row, m, np.nan)
            acc[j] = acc[j] + (0.0 if v != v else float(v))
    n = 0 if p.samples is None else len(p.samples)
    return rows, n, list(table["label"]), list(table["tid"])


def assert_same(p, q):
    a, b = content(p), content(q)
    assert a[2] == b[2] and a[3] == b[3]
    assert a[1] == b[1]
    assert a[0].keys() == b[0].keys()
    for k in a[0]:
        assert a[0][k][0] == b[0][k][0]
        assert a[0][k][1:] == pytest.approx(b[0][k][1:], rel=1e-9, abs=1e-12)


def record(name: str, **opts):
    mod = backends.get(name)
    ok, why = mod.available()
    if not ok:
        pytest.fail(f"{name} cannot record here: {why}")
    o = Options(rate=200, **opts)
    rec = backends.recorder(mod, o)
    try:
        rec.start()
        t = threading.Thread(target=busy, args=(0.05,), name="helper")
        t.start()
        busy(0.15)
        nap(0.1)
        t.join()
        cap = rec.stop()
    finally:
        rec.close()
    return mod.read(cap, o)


@pytest.mark.parametrize("name,opts", [
    ("sampler", {"mode": "both"}),
    ("pyinstrument", {"mode": "wall"}),
    ("cprofile", {"mode": "cpu"}),
    pytest.param("py-spy", {"mode": "wall"}, marks=pytest.mark.requires("py-spy", "ptrace")),
    pytest.param("py-spy", {"mode": "cpu"}, marks=pytest.mark.requires("py-spy", "ptrace")),
    pytest.param("py-spy", {"mode": "both"}, marks=pytest.mark.requires("py-spy", "ptrace")),
    pytest.param("py-spy", {"mode": "wall", "extra": {"timing": "timed"}}, marks=pytest.mark.requires("py-spy", "ptrace")),
    pytest.param("py-spy", {"mode": "both", "extra": {"timing": "timed"}}, marks=pytest.mark.requires("py-spy", "ptrace")),
])
def test_load_raw_gives_back_the_backends_profile(name, opts):
    p = record(name, **opts)
    assert p.sample_count > 0 or p.total() > 0
    q = profmagic.load(p.raw)
    assert_same(p, q)
    assert q.metrics == p.metrics


def test_children_capture_round_trips():
    data = (b'{"v":1,"pid":5,"ppid":1,"argv":["python"],"t0":10.0,"rate":100.0}\n'
            b'["f",0,"main","a.py",1]\n["f",1,"work","a.py",5]\n'
            b'["s",10.1,77,"MainThread",0.01,0.008,[0,1]]\n["s",10.2,77,"MainThread",0.01,null,[0]]\n')
    p = profmagic.load(data)
    assert p.meta["format"] == "profmagic-children" and p.sample_count == 2
    assert p.thread_table.at[0, "tid"] == 77 and p.thread_table.at[0, "pid"] == 5
    assert_same(p, profmagic.load(p.raw))


def test_children_reasons_read_save_and_refuse():
    """A child's samples carry a reason and run-queue seconds (8th and 9th fields); a 7-field capture
    reads without reasons; an unknown reason is refused with the documented message."""
    import pytest
    from test_reasons import _documented

    from profmagic import reasons
    from profmagic.errors import ProfileFormatError
    from profmagic.formats import children, speedscope
    head = b'{"v":1,"pid":5,"ppid":1,"argv":["python"],"t0":10.0,"rate":100.0}\n["f",0,"main","a.py",1]\n'
    data = head + (b'["s",10.1,77,"MainThread",0.01,0.01,[0],"cpu"]\n'
                   b'["s",10.2,77,"MainThread",0.02,0.0,[0],"sleep"]\n'
                   b'["s",10.3,77,"MainThread",0.01,0.0,[0],"io",0.004]\n')
    p = profmagic.load(data)
    assert p.samples["reason"].astype(str).tolist() == ["cpu", "sleep", "io"]
    assert p.samples["runq"].tolist() == [0.0, 0.0, 0.004]
    assert list(p.stacks["reason"].cat.categories) == list(reasons.REASONS)
    # The run-queue seconds go to core; the rest of the 0.03 s off-CPU is shared 2:1 by the samples' parts.
    split = reasons.split(p).iloc[0]
    assert split[["cpu", "core", "sleep", "io"]].round(6).tolist() == [0.01, 0.004, 0.017333, 0.008667]
    assert_same(p, profmagic.load(p.raw))
    again = profmagic.load(speedscope.write(p))
    assert again.samples["reason"].astype(str).tolist() == ["cpu", "sleep", "io"]
    old = head + b'["s",10.1,77,"MainThread",0.01,0.0,[0]]\n'
    assert "reason" not in profmagic.load(old).samples
    mixed = profmagic.load(data + b'["s",10.4,77,"MainThread",0.01,0.0,[0]]\n')
    assert mixed.samples["reason"].astype(str).tolist()[-1] == "unknown"
    for bad, what in ((b'"napping"', "field 8 (the reason)"), (b'"sleep",-1', "field 9 (run-queue seconds)"),
                      (b'null', "field 8 (the reason)")):
        with pytest.raises(ProfileFormatError) as e:
            children.read(head + b'["s",10.1,77,"MainThread",0.01,0.0,[0],' + bad + b']\n', source="c.jsonl")
        assert str(e.value).startswith(f"c.jsonl: line 3: sample {what}: expected "), str(e.value)
        if what.startswith("field 8"):
            _documented("child-reason-unknown", str(e.value))


def rank(r: int):
    b = StackBuilder()
    th = b.thread('Thread 7 "MainThread"', tid=7, pid=1000 + r, name="MainThread", python=True)
    main, step = b.frame("main", "t.py", 1, "python"), b.frame("step", "t.py", 2, "python")
    for i in range(r + 2):
        b.add(b.stack(th, (main, step)), time=i * 0.01, wall=0.01, cpu=0.004)
    return b.build(meta={"backend": "test", "rate": 100.0})


def test_speedscope_round_trips_the_thread_table_of_many_processes(tmp_path):
    m = multi.concat([rank(r) for r in range(3)], key="rank")
    assert multi.processes(m) == ["rank 0", "rank 1", "rank 2"]
    profmagic.save(m, tmp_path / "m.speedscope.json")
    q = profmagic.load(tmp_path / "m.speedscope.json")
    assert list(q.thread_table["process"]) == ["rank 0", "rank 1", "rank 2"]
    assert list(q.thread_table["rank"]) == ["rank 0", "rank 1", "rank 2"]
    assert list(q.thread_table["pid"]) == [1000, 1001, 1002] and set(q.thread_table["tid"]) == {7}
    assert multi.by_process(q)["samples"].tolist() == [2, 3, 4]
    assert_same(m, q)

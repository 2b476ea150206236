"""Profile.concat / load of a glob (issue 9): which process each stack came from, exact totals."""
from __future__ import annotations

import profmagic
import numpy as np
import pytest

from profmagic import multi, transforms
from profmagic.formats import children, load_many
from profmagic.errors import ProfileFormatError
from profmagic.model import StackBuilder


def rank_profile(r: int):
    """Rank r: main -> step (r+1 samples of 10 ms) and main -> allreduce (10*r + 3 samples)."""
    b = StackBuilder()
    main = b.frame("main", "train.py", 1, "python")
    step = b.frame("step", "train.py", 10, "python")
    ar = b.frame("allreduce", "dist.py", 5, "python")
    t = 0.0
    for _ in range(r + 1):
        b.add(b.stack('Thread 7 "MainThread"', (main, step)), time=t, wall=0.01, cpu=0.01)
        t += 0.01
    for _ in range(10 * r + 3):
        b.add(b.stack('Thread 7 "MainThread"', (main, ar)), time=t, wall=0.01, cpu=0.002)
        t += 0.01
    return b.build(metric="wall", meta={"backend": "test", "rate": 100.0, "rank": r})


def test_concat_keeps_process_and_exact_totals():
    ps = [rank_profile(r) for r in range(4)]
    m = multi.concat(ps, key="rank")
    assert m.sample_count == sum(p.sample_count for p in ps)
    assert m.total("wall") == pytest.approx(sum(p.total("wall") for p in ps), abs=1e-12)
    assert m.total("cpu") == pytest.approx(sum(p.total("cpu") for p in ps), abs=1e-12)
    assert multi.processes(m) == ["rank 0", "rank 1", "rank 2", "rank 3"]
    # Same thread label and stack in every rank, yet one row per rank: nothing merged across processes.
    assert len(m.stacks) == 8
    assert len(m.frames) == 3            # frames unified by (name, file, line, kind)
    t = multi.by_process(m)
    for r in range(4):
        assert t.at[f"rank {r}", "samples"] == (r + 1) + (10 * r + 3)
        assert t.at[f"rank {r}", "cpu"] == pytest.approx(0.01 * (r + 1) + 0.002 * (10 * r + 3))
    ar = m.functions("samples").set_index("name").at["allreduce", "total"]
    assert ar == sum(10 * r + 3 for r in range(4))
    # time-ordered samples follow their rows
    assert len(m.samples) == m.sample_count
    rows = m.stacks.iloc[m.samples["stack"].to_numpy()]
    assert (rows["rank"].value_counts().sort_index().to_numpy() == [4, 15, 26, 37]).all()


def test_transforms_keep_processes_apart():
    m = multi.concat([rank_profile(r) for r in range(3)], key="rank")
    pr = transforms.prune(m, min_share=0.5)
    assert pr.total("wall") == pytest.approx(m.total("wall"))
    assert sorted(multi.by_process(pr)["samples"]) == sorted(multi.by_process(m)["samples"])
    f = transforms.focus(m, "allreduce")
    assert multi.by_process(f)["samples"].tolist() == [3, 13, 23]


def test_load_glob(tmp_path):
    for r in (0, 1, 2, 10):
        d = tmp_path / "runs" / f"node{r % 2}"
        d.mkdir(parents=True, exist_ok=True)
        profmagic.save(rank_profile(r), d / f"rank{r}.json")
    m = load_many(str(tmp_path / "runs" / "*" / "rank*.json"))
    assert multi.processes(m) == ["rank 0", "rank 1", "rank 2", "rank 10"]   # natural order
    t = multi.by_process(m)
    assert t.at["rank 10", "samples"] == 11 + 103
    assert m.sample_count == sum(rank_profile(r).sample_count for r in (0, 1, 2, 10))
    assert len(m.meta["sources"]) == 4


def test_load_glob_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no file matches"):
        load_many(str(tmp_path / "none*.json"))
    (tmp_path / "rank0.json").write_text('{"not": "a profile"}')
    with pytest.raises(ProfileFormatError):
        load_many(str(tmp_path / "rank*.json"))


def test_concat_rejects_duplicate_labels():
    with pytest.raises(ValueError, match="distinct"):
        multi.concat([rank_profile(0), rank_profile(1)], labels=["a", "a"])


def test_child_capture_torn_last_line_is_dropped_not_fatal():
    data = (b'{"v":1,"pid":5,"ppid":1,"argv":["python"],"t0":10.0,"rate":100.0}\n'
            b'["f",0,"main","a.py",1]\n["s",10.1,5,"MainThread",0.01,0.01,[0]]\n["s",10.2,5,"Main')
    p = children.read(data, t0=10.0)
    assert p.sample_count == 1 and p.meta["torn_lines"] == 1
    with pytest.raises(ProfileFormatError, match="line 2"):
        children.read(data.replace(b'["f",0', b'["f" 0'), t0=10.0)


def test_ranks_view_on_concat():
    from profmagic import analysis
    from profmagic.views import ranks
    ps = [rank_profile(r) for r in range(4)]
    ps[2] = rank_profile(2)
    b = StackBuilder()          # rank 4 runs <script> named code: escaped in the view
    f = b.frame("<script>evil()</script>", "x.py", 1, "python")
    b.add(b.stack("T", (f,)), wall=0.5, cpu=0.5)
    m = multi.concat(ps + [b.build(meta={"rank": 4})], key="rank")
    line = analysis.differs_most(m)
    assert line.startswith("rank 4 differs most")
    h = ranks.html(m, include_plotlyjs=False)
    assert "<script>evil" not in h and "&lt;script&gt;evil" in h
    fig = ranks.bars(m)
    cpu = dict(zip(fig.data[0].y, fig.data[0].x))
    assert cpu["rank 3"] == pytest.approx(0.01 * 4 + 0.002 * 33)
    w = ranks.widget(m)
    w.show_process(3)
    assert len(w.icicle_box.children) == 1
    assert np.isclose(analysis.process_profile(m, "rank 3").total("wall"), 0.01 * 37)


def test_load_glob_merges_per_rank_files(tmp_path):
    # load() of a glob: one multi-process profile, each stack keeping its rank.
    import profmagic
    for rank, n in enumerate((3, 5)):
        (tmp_path / f"rank{rank}.folded").write_text(f"main;step {n}\nmain;wait {rank + 1}\n")
    p = profmagic.load(str(tmp_path / "rank*.folded"))
    per = p.stacks.groupby("process")["samples"].sum()
    assert sorted(per.tolist()) == [4, 7] and len(per) == 2
    assert p.total("samples") == 11

"""The Tasks view (profmagic/views/tasks.py) and the Ranks view of a cluster profile, on a profile
recorded in this process: two "workers", each a thread recorded by its own WorkerSampler (the
sampler a Dask or Ray worker runs), plus the driver recorded by the built-in sampler. No engine is
needed; tests/test_cluster_dask.py and test_cluster_magic.py check the same views on real clusters.
"""
from __future__ import annotations

import re
import threading
import time

import pytest

import cluster_work as work
import profmagic
from profmagic.cluster import tasks as T
from profmagic.cluster.assemble import assemble
from profmagic.cluster.worker import WorkerSampler
from profmagic.views import ranks
from profmagic.views import tasks as view
from plotly_json import arr

pytestmark = pytest.mark.timed

EVIL = "<img src=x onerror=alert(1)>"      # a task prefix is whatever the user named the function
UNREACHABLE = "OSError: Timed out trying to connect to tcp://10.0.0.9:4242 after 10 s"


def _worker(name: str, hold: float, out: dict, ready: threading.Barrier):
    """A worker thread with its own sampler: 3 rounds of a task that waits ``hold`` s on a lock
    held by another thread, then spins 0.1 s, and one task with markup in its prefix."""
    running = {}
    s = WorkerSampler(100.0, task_of=lambda: dict(running), prefix=lambda k: k.rsplit("-", 1)[0])
    s.start()
    ready.wait()
    me, lock = threading.get_ident(), threading.Lock()   # each worker its own lock, as in its own process
    results = []
    for i in range(3):
        running[me] = f"locked-{i}"
        results.append(work.locked(i, 0.1, hold, lock))
        running[me] = f"{EVIL}-{i}"
        results.append(work.spin(i, 0.05))
        running.pop(me)
    out[name] = (s.stop(), results)


@pytest.fixture(scope="module")
def cluster_profile():
    out, ready = {}, threading.Barrier(2)
    with profmagic.profile("sampler", announce=lambda s: None) as drv:
        threads = [threading.Thread(target=_worker, args=(n, h, out, ready), name=n)
                   for n, h in (("slow", 0.4), ("fast", 0.0))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    results = [{"status": "ok", "payload": out[n][0], "name": n, "pid": 1000 + i} for i, n in enumerate(("slow", "fast"))]
    # Fault injected: an unreachable worker is produced for real in test_cluster_dask.py (SIGSTOP);
    # here its result, as the engine returns it, is given to assemble directly.
    results.append({"status": "unreachable", "name": "gone", "pid": 1002, "error": UNREACHABLE})
    p = assemble(results, drv.profile, engine="dask", t0=time.time(), driver_pid=999, driver_name="kernel")
    truth = {n: work.truth(out[n][1]) for n in out}
    return p, truth


def labels(p):
    r = T.ranks(p)
    return {r.at[lab, "role"] if r.at[lab, "role"] == "driver" else p.meta["processes"][lab]["name"]: lab
            for lab in r.index}


def test_summed_figure_is_the_task_table(cluster_profile):
    p, truth = cluster_profile
    fig = view.summed(p)
    t = T.tasks(p)
    cpu, off = fig.data
    assert list(cpu.y) == [profmagic.views.esc(k, 70) for k in t.index]
    assert EVIL not in list(cpu.y) and "&lt;img src=x onerror=alert(1)&gt;" in list(cpu.y)
    assert list(cpu.x) == list(t["cpu"]) and list(off.x) == list(t["off_cpu"])
    # What the tasks measured themselves, summed over both workers, within 10%.
    true_locked = sum(truth[n]["locked"]["wall"] for n in truth)
    assert abs(t.at["locked", "wall"] - true_locked) <= 0.1 * true_locked, (t, true_locked)
    text = fig.layout.title.text
    assert "Tasks · summed over 2 workers (1 without data)" in text and "wall time (s)" in text and "100 Hz" in text
    assert f"{p.sample_count:,} samples" in text or f"{p.sample_count} samples" in text


def test_per_worker_figure_has_each_workers_tasks_and_the_unreachable_one(cluster_profile):
    p, truth = cluster_profile
    lab = labels(p)
    fig = view.per_worker(p)
    per = T.tasks(p, by_worker=True)
    by_name = {tr.name: tr for tr in fig.data}
    y = list(by_name["locked · CPU"].y)
    assert y[:2] == [lab["slow"], lab["fast"]] and y[2].startswith(lab["gone"]) and "could not be reached" in y[2]
    for w in ("slow", "fast"):
        i = y.index(lab[w])
        c, off = by_name["locked · CPU"].x[i], by_name["locked · off-CPU"].x[i]
        assert c == pytest.approx(per.at[("locked", lab[w]), "cpu"])
        assert c + off == pytest.approx(per.at[("locked", lab[w]), "wall"])
    gone = by_name["no data"]
    assert list(gone.customdata) == [UNREACHABLE]
    # The slow worker waited on its lock: most of its locked time is off-CPU; it ran 1.2 s longer.
    slow_off = per.at[("locked", lab["slow"]), "off_cpu"] / per.at[("locked", lab["slow"]), "wall"]
    assert slow_off > 0.5, per


def test_straggler_line_and_differs_most_name_the_slow_worker(cluster_profile):
    p, _ = cluster_profile
    lab = labels(p)
    s = T.straggler(p)
    assert s["worker"] == lab["slow"] and s["task"] == "locked", s
    assert ranks.differs_most(p) == s["text"]          # the driver is not a candidate
    assert view.line(p) == profmagic.views.esc(s["text"], 600)


def test_static_html_has_no_script_and_escapes_names(cluster_profile):
    p, _ = cluster_profile
    lab = labels(p)
    h = view.html(p)
    assert "<script" not in h and "<img" not in h and "&lt;img src=x onerror=alert(1)&gt;" in h
    assert f"<b>{profmagic.views.esc(T.straggler(p)['text'], 600)}</b>" in h
    assert h.count("class='profmagic-task'") == len(T.tasks(p))
    rows = re.findall(r"<tr class='profmagic-task-worker[^']*'>(.*?)</tr>", h)
    assert len(rows) == 3 and rows[0].startswith(f"<td>{lab['slow']}</td>")
    assert f"no data: {UNREACHABLE}" in rows[2]


def test_ranks_view_lists_the_unreachable_worker_with_its_error(cluster_profile):
    p, _ = cluster_profile
    lab = labels(p)
    fig = ranks.bars(p)
    cpu = fig.data[0]
    assert list(cpu.y) == [lab["driver"], lab["slow"], lab["fast"]]
    assert list(cpu.customdata) == list(T.ranks(p).loc[list(cpu.y), "samples"])
    gone = [tr for tr in fig.data if tr.name == "no samples"][0]
    assert list(gone.y) == [f"{lab['gone']} (no samples)"]
    assert list(gone.customdata) == [f"could not be reached: {UNREACHABLE}"]
    h = ranks.html(p)
    assert f"<td>{lab['gone']} (no samples)</td><td></td><td>could not be reached: {UNREACHABLE}</td>" in h


def test_clicking_a_task_or_a_worker_shows_its_icicle(cluster_profile):
    p, _ = cluster_profile
    lab = labels(p)
    box = view.widget(p)
    assert box.icicle_box.children == ()
    for task, worker in (("locked", None), (None, lab["fast"]), ("locked", lab["slow"])):
        box.show_icicle(task=task, worker=worker)
        fig = box.icicle_box.children[0].outputs[0]["data"]["application/vnd.plotly.v1+json"]
        sub = T.sub_profile(p, rank=worker, task=task)
        what = " · ".join(x for x in (f"task {task}" if task else "", worker or "every worker") if x)
        assert f"Icicle · {what}" in fig["layout"]["title"]["text"]
        root = fig["data"][0]
        assert arr(root["values"])[0] == pytest.approx(sub.total(p.metric) * 1e6, rel=1e-3)
        names = set(sub.frames.loc[[f for s in sub.stacks["stack"] for f in s], "name"])
        assert ("locked" in names) == (task == "locked" or worker is not None)
        assert sub.total("wall") < p.total("wall")
    box.show_icicle()
    assert box.icicle_box.children == ()


def test_the_widget_holds_a_weakly_referenced_profile_weakly():
    import gc
    import weakref
    out, ready = {}, threading.Barrier(1)
    _worker("solo", 0.0, out, ready)
    p = assemble([{"status": "ok", "payload": out["solo"][0], "name": "solo", "pid": 7}], engine="dask")
    box = view.widget(weakref.ref(p))
    box.show_icicle(task="locked")
    assert len(box.icicle_box.children) == 1
    del p
    gc.collect()
    box.show_icicle(task="locked")          # the same pick again: drawn anew, from the reference
    assert "deleted" in box.icicle_box.children[0].value


def test_a_worker_that_ran_no_task_is_listed_as_such():
    out = {}
    _worker("busy", 0.0, out, threading.Barrier(1))
    idle = WorkerSampler(100.0, task_of=lambda: {})          # a worker whose threads ran no task
    idle.start()
    time.sleep(0.1)
    p = assemble([{"status": "ok", "payload": out["busy"][0], "name": "busy", "pid": 1},
                  {"status": "ok", "payload": idle.stop(), "name": "idle", "pid": 2}], engine="dask")
    assert "no data: ran no task during the recording" in view.html(p)
    (gone,) = [tr for tr in view.per_worker(p).data if tr.name == "no data"]
    assert list(gone.customdata) == ["ran no task during the recording"] and gone.y[0].endswith("dask worker idle")
    assert T.missing(p) == {}                                # it ran to the end: not missing from the Ranks view


def test_the_report_of_a_cluster_profile_has_a_tasks_tab_and_static_block(cluster_profile):
    from profmagic.report import Report, static_html
    p, _ = cluster_profile
    r = Report(p)
    assert r.TABS.index("Ranks") < r.TABS.index("Tasks") < r.TABS.index("Table")
    i = r.TABS.index("Tasks")
    r.tabs.selected_index = i
    (box,) = r.panes[i].children
    assert box is r.tasks and f"<b>{view.line(p)}</b>" == box.children[0].value
    h = static_html(p)
    assert "Tasks (wall and CPU by task prefix" in h and view.html(p) in h and "<img" not in h
    plain = profmagic.profile("sampler", announce=lambda s: None)
    with plain:
        time.sleep(0.05)
    assert "Tasks" not in Report(plain.profile).TABS

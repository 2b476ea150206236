"""%%profile --cluster ray, engine side (issue 17): a real local Ray (``ray.init(num_cpus=2)``).

Every worker process of the job samples itself, started through Ray's worker start-up hook
(profmagic/cluster/ray.py). Checked: the workers are ranks beside the driver, labelled with node,
pid and actor class; per-task wall and CPU against what the tasks measured themselves (within
10%); nothing is left on the node; an actor killed mid-recording keeps what it had spilled; a
worker that does not answer is named.
"""
from __future__ import annotations

import os
import signal
import time

import pytest

try:
    import ray
except ImportError:   # the requires("ray") mark says how to install it
    ray = None

import cluster_work as work  # noqa: E402
from profmagic import cluster  # noqa: E402
from profmagic.cluster import ray as engine  # noqa: E402
from profmagic.cluster import tasks as tasks_view  # noqa: E402

pytestmark = [pytest.mark.timed, pytest.mark.timeout(240), pytest.mark.requires("ray")]


@pytest.fixture(scope="module")
def ray_job():
    with work.local_ray():
        ray.get([ray.remote(work.nap).remote(i, 0.01) for i in range(4)])   # two warm workers
        yield {"spin": ray.remote(work.spin), "nap": ray.remote(work.nap)}


def clean():
    """On every node: no session folder; in every worker no sampler, and no profmagic thread but
    the hook's agent (blocked in accept(): no CPU)."""
    for node, r in engine.leftovers().items():
        assert not isinstance(r, BaseException), r
        assert r["dirs"] == [] and r["sampling"] and all(v is False for v in r["sampling"].values()), r
        assert all(t == ["profmagic-ray-agent"] for t in r["threads"].values()), r


def test_workers_are_ranks_and_tasks_match_the_truth(ray_job):
    spin, nap = ray_job["spin"], ray_job["nap"]
    p, results = work.record_cell("ray", lambda: ray.get([spin.remote(i) for i in range(8)]
                                                         + [nap.remote(i) for i in range(8)]))
    r = tasks_view.ranks(p)
    assert (r["role"] == "driver").sum() == 1
    pids = {x["pid"] for x in results}
    busy = r[(r["role"] == "worker") & (r["tasks_wall"] > 0)]
    assert {p.meta["processes"][lab]["pid"] for lab in busy.index} == pids, r
    for lab in busy.index:
        assert lab.startswith(f"pid {p.meta['processes'][lab]['pid']} · ray node ") and lab.endswith("· tasks")
        assert p.meta["processes"][lab]["node"] == ray.get_runtime_context().get_node_id()
    errs = work.errors(p, results)
    assert all(e["ok"] for e in errs.values()), "\n".join(f"{k}: {v}" for k, v in errs.items())
    assert set(tasks_view.tasks(p).index) == {"spin", "nap"}
    clean()


@ray.remote
class Spinner:
    def pid(self):
        return os.getpid()

    def spin(self, seconds):
        return work.spin(0, seconds)


def test_killed_actor_keeps_what_it_spilled(ray_job):
    a = Spinner.remote()
    pid = ray.get(a.pid.remote())
    rec = cluster.Recording("ray")
    rec.start()
    try:
        a.spin.remote(6.0)
        t0 = time.monotonic()
        time.sleep(2.5)     # at least two spills (every second)
        os.kill(pid, signal.SIGKILL)
        killed_after = time.monotonic() - t0
        time.sleep(0.5)
        p = rec.stop()
    finally:
        rec.close()
    r = tasks_view.ranks(p)
    dead = r[r["status"] == "ended"]
    assert len(dead) == 1, r
    lab = dead.index[0]
    assert lab == f"pid {pid} · ray node {p.meta['processes'][lab]['host']} · actor Spinner", lab
    per = tasks_view.tasks(p, by_worker=True)
    spun = float(per.at[("Spinner.spin", lab), "wall"])
    assert 1.0 <= spun <= killed_after + 0.2, (spun, killed_after)
    clean()


def test_unreachable_worker_is_named_and_stopped_afterwards(ray_job):
    a = Spinner.remote()
    pid = ray.get(a.pid.remote())
    rec = cluster.Recording("ray", timeout=2.0)
    rec.start()
    try:
        ray.get(a.spin.remote(0.2))
        os.kill(pid, signal.SIGSTOP)
        try:
            p = rec.stop()
        finally:
            os.kill(pid, signal.SIGCONT)
    finally:
        rec.close()    # asks the resumed worker again: its sampler stops, the folder goes
    r = tasks_view.ranks(p)
    gone = r[r["status"] == "unreachable"]
    assert len(gone) == 1 and gone.index[0].startswith(f"pid {pid} · "), r
    assert "timed out" in gone["error"].iloc[0], gone
    clean()
    ray.kill(a)

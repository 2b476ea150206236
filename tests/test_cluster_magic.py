"""%%profile --cluster in a real Jupyter kernel (issue 17): a real LocalCluster of 2 worker
processes, then a real local Ray in the same kernel.

Checked: the workers are ranks beside the kernel (the driver); task prefixes against what the tasks
measured themselves (within 10%); the report shows the ranks and names the straggler; a cell that
raises still shows its profile; nothing is left on the workers; bad --cluster values and missing
engines are one line each, before the cell runs; ``%load_ext profmagic`` gives a later ray.init()
profmagic's worker hook without importing Ray.

The 10% bound is the issue's. Measured errors (bench/RESULTS.md) are under 1% at load average 10;
one run at load ~13 with 4 spin and 4 nap tasks missed it (nap wall +14%: a sampling interval
stretched by the load at each task's start), so the cells run 8 of each, like the engine tests.
"""
from __future__ import annotations

import os

import pytest

pytest.importorskip("distributed", reason="Dask is in the cluster extra: pip install -e '.[cluster]'")
pytest.importorskip("ray", reason="Ray is in the cluster extra: pip install -e '.[cluster]'")

from faults.conftest import documented  # noqa: E402

pytestmark = [pytest.mark.timed, pytest.mark.kernel, pytest.mark.timeout(300)]
TESTS = os.path.dirname(os.path.abspath(__file__))

SETUP = '''
%load_ext profmagic
import os, sys
sys.path.insert(0, TESTS)
import cluster_work as work
import distributed
from profmagic.cluster import tasks as T
from profmagic.cluster import dask as dask_engine
cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0")
client = distributed.Client(cluster)
client.wait_for_workers(2)

def summary(results=None):
    p = _profile
    r = T.ranks(p)
    out = dict(roles=list(r["role"]), status=list(r["status"]), samples=[int(x) for x in r["samples"]],
               pids=[p.meta["processes"][lab].get("pid") for lab in r.index], labels=list(r.index),
               tasks=sorted(T.tasks(p).index), partial=p.meta.get("partial"), straggler=T.straggler(p)["text"])
    if results is not None:
        out["errors"] = {k: e["ok"] for k, e in work.errors(p, results).items()}
        out["error_detail"] = repr(work.errors(p, results))
        out["result_pids"] = sorted({x["pid"] for x in results})
    return out

def ray_leftovers():
    """Per node: session folders left, whether any worker samples, its profmagic threads."""
    from profmagic.cluster import ray as ray_engine
    return [repr(v) if isinstance(v, BaseException) else
            (v["dirs"], sorted({str(x) for x in v["sampling"].values()}),
             sorted({tuple(t) for t in v["threads"].values()})) for v in ray_engine.leftovers().values()]

def dask_leftovers():
    """What the last recording left on the workers or here (its spill folders: the temporary folder
    is shared with other runs on this machine)."""
    session = _profile.meta["cluster"]["session"]
    return [w for w in list(client.run(dask_engine._leftovers, session).values()) + [dask_engine._leftovers(session)]
            if w["threads"] or w["spill_dirs"] or w["sessions"]]
'''

DASK_CELL = '''%%profile --backend sampler --cluster {target}
ran = True
results = client.gather([client.submit(work.spin, i, pure=False) for i in range(8)]
                        + [client.submit(work.nap, i, pure=False) for i in range(8)])
'''


@pytest.fixture(scope="module")
def k():
    from kernel import Kernel
    kern = Kernel()
    r = kern.run(f"TESTS = {TESTS!r}\n" + SETUP, timeout=180)
    assert r.status == "ok", r.text() + str(r.error)
    yield kern
    kern.run("client.close(); cluster.close()", timeout=60)
    kern.close()


def html_of(reply) -> str:
    return "\n".join(d.get("text/html", "") for d in reply.data + reply.updates)


def test_cluster_dask_profiles_the_kernel_and_every_worker(k):
    r = k.run(DASK_CELL.format(target="dask"))
    assert r.status == "ok", r.text() + str(r.error)
    assert "recording with sampler at 100 Hz" in r.text() and "and every dask worker" in r.text()
    s = k.value("summary(results)")
    assert s["roles"] == ["driver", "worker", "worker"] and s["status"] == ["ok"] * 3, s
    assert s["labels"][0] == f"pid {s['pids'][0]} · kernel" and s["pids"][0] == k.pid
    assert set(s["pids"][1:]) == set(s["result_pids"]) and min(s["samples"]) > 0, s
    assert s["tasks"] == ["nap", "spin"] and all(s["errors"].values()), s["error_detail"]
    # The report shows the ranks side by side, the kernel one of them.
    page = html_of(r)
    assert "Processes side by side" in page and "pid %d · kernel" % k.pid in page
    assert k.value("dask_leftovers()") == []


def test_named_client_and_a_cell_that_raises_still_show_the_profile(k):
    k.run("other = client")
    r = k.run(DASK_CELL.format(target="dask:other") + "raise ValueError('after the tasks')\n")
    assert r.status == "error" and r.error["ename"] == "ValueError", r.text()
    assert "Processes side by side" in html_of(r)          # the profile is shown, then the error
    s = k.value("summary(results)")
    assert s["partial"].startswith("the code raised ValueError")
    assert s["roles"] == ["driver", "worker", "worker"] and all(s["errors"].values()), s["error_detail"]
    assert k.value("dask_leftovers()") == []


@pytest.mark.parametrize("line, error_id, text", [
    ("--cluster dask:nope", "cluster-no-such-client", "there is no variable 'nope' in the notebook"),
    ("--cluster dask:work", "cluster-no-such-client", "work is a module, not a distributed.Client"),
    ("--cluster spark", "cluster-unknown-engine", "unknown cluster engine 'spark'"),
    ("--cluster dask --subprocesses", "cluster-option-conflict", "combined with --subprocesses"),
    ("--cluster dask --rerun", "cluster-option-conflict", "combined with --rerun"),
])
def test_bad_cluster_options_are_one_line_before_the_cell_runs(k, line, error_id, text):
    k.run("ran = False")
    r = k.run(f"%%profile {line}\nran = True\n")
    assert r.status == "ok" and r.stderr.count("\n") == 1 and r.stderr.startswith("profmagic: "), r.stderr
    assert r.stderr.count("profmagic:") == 1 and text in r.stderr, r.stderr
    documented(error_id, r.stderr)
    assert k.value("ran") is False


def test_missing_dask_is_one_line_with_the_install(k):
    # Fault injected: Dask is installed here, so the kernel is made unable to import it.
    r = k.run("saved = sys.modules['distributed']; sys.modules['distributed'] = None\n"
              "%profile --cluster dask 1\n"
              "sys.modules['distributed'] = saved")
    assert r.stderr.count("\n") == 1 and "pip install 'dask[distributed]'" in r.stderr, r.stderr
    documented("cluster-engine-missing", r.stderr)


def test_cluster_ray_after_load_ext_gets_the_hook_without_importing_ray(k):
    # %load_ext profmagic (in SETUP) found Ray without importing it and set Ray's env hook.
    before = k.value("('ray' in sys.modules, os.environ.get('RAY_RUNTIME_ENV_HOOK'))")
    assert before == (False, "profmagic.cluster.ray.runtime_env_hook")
    r = k.run("%profile --cluster ray 1")
    documented("cluster-ray-not-connected", r.stderr)
    r = k.run("import ray\n"
              "ray_job = work.local_ray(hook=False); ray_job.__enter__()   # ray.init without runtime_env\n"
              "spin, nap = ray.remote(work.spin), ray.remote(work.nap)\n"
              "_ = ray.get([nap.remote(i, 0.01) for i in range(4)])          # two warm workers\n", timeout=240)
    assert r.status == "ok", r.text() + str(r.error)
    try:
        r = k.run("%%profile --backend sampler --cluster ray\n"
                  "results = ray.get([spin.remote(i) for i in range(8)] + [nap.remote(i) for i in range(8)])\n",
                  timeout=180)
        assert r.status == "ok" and "and every ray worker" in r.text(), r.text() + str(r.error)
        s = k.value("summary(results)")
        assert s["roles"][0] == "driver" and s["pids"][0] == k.pid, s
        busy = {pid for pid, role, n in zip(s["pids"], s["roles"], s["samples"]) if role == "worker" and n}
        assert busy == set(s["result_pids"]), s
        assert s["tasks"] == ["nap", "spin"] and all(s["errors"].values()), s["error_detail"]
        # No folder; no worker sampling; no profmagic thread but the hook's agent (idle in accept()).
        assert k.value("ray_leftovers()") == [([], ["False"], [("profmagic-ray-agent",)])]
    finally:
        k.run("ray_job.__exit__(None, None, None)", timeout=120)

"""Tasks for the cluster tests and bench, importable by Dask and Ray workers (tests/ is on their
path): each returns what it measured itself, the truth the profile is checked against."""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# Not a fake of anything under test: in this environment Jupyter's jsonschema[format-nongpl] brings
# rfc3987-syntax, whose import compiles a grammar for ~3 s of CPU in every Python that imports Ray
# (each of Ray's own helper processes and each worker). On a busy 2-core machine that pushed Ray's
# dashboard agent past the raylet's fixed 15 s wait and ray.init failed. Ray's processes get a
# PYTHONPATH where that optional jsonschema plugin is absent; jsonschema then skips IRI checks.
NO_RFC3987 = "raise ImportError('rfc3987_syntax left out of Ray processes in profmagic tests')\n"


def local_dask(n_workers: int = 2):
    """A module fixture's body: a LocalCluster of ``n_workers`` worker processes and its Client."""
    import distributed
    cl = distributed.LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True, dashboard_address=":0")
    c = distributed.Client(cl)
    c.wait_for_workers(n_workers)
    yield c
    c.close()
    cl.close()


def _measure(kind, work):
    t0, c0 = time.perf_counter(), time.thread_time()
    work()
    return {"task": kind, "wall": time.perf_counter() - t0, "cpu": time.thread_time() - c0, "pid": os.getpid()}


def _burn(seconds):
    c0 = time.thread_time()
    while time.thread_time() - c0 < seconds:
        pass


def spin(i=0, seconds=0.3):
    """``seconds`` of CPU time."""
    return _measure("spin", lambda: _burn(seconds))


def nap(i=0, seconds=0.3):
    """``seconds`` asleep: off-CPU."""
    return _measure("nap", lambda: time.sleep(seconds))


def pid(*_):
    return os.getpid()


_LOCK = threading.Lock()


def locked(i=0, seconds=0.3, hold=0.0, lock=None):
    """Waits for ``lock`` (default: this process's) held by another thread for ``hold`` seconds,
    then spins."""
    lock = lock or _LOCK

    def work():
        if hold:
            threading.Thread(target=_hold, args=(lock, hold), daemon=True).start()
            time.sleep(0.01)
        with lock:
            _burn(seconds)
    return _measure("locked", work)


def _hold(lock, seconds):
    with lock:
        time.sleep(seconds)


def truth(results) -> dict:
    """{task: {"wall": s, "cpu": s, "n": tasks}} summed over ``results``."""
    out: dict = {}
    for r in results:
        t = out.setdefault(r["task"], {"wall": 0.0, "cpu": 0.0, "n": 0})
        t["wall"] += r["wall"]
        t["cpu"] += r["cpu"]
        t["n"] += 1
    return out


def errors(profile, results, tol: float = 0.10) -> dict:
    """Per task prefix, how far the profile is from the tasks' own measurements: relative errors of
    wall and CPU seconds (CPU only where the tasks used some), and absolute errors of the prefix's
    share of all task wall and of all task CPU (a nap's CPU share is ~0 either way)."""
    from profmagic.cluster import tasks as tasks_view
    true = truth(results)
    got = tasks_view.tasks(profile)
    tw = sum(t["wall"] for t in true.values())
    tc = sum(t["cpu"] for t in true.values())
    gw = float(got.loc[[k for k in true if k in got.index], "wall"].sum())
    gc = float(got.loc[[k for k in true if k in got.index], "cpu"].sum())
    out = {}
    for k, t in true.items():
        w = float(got.at[k, "wall"]) if k in got.index else 0.0
        c = float(got.at[k, "cpu"]) if k in got.index else 0.0
        e = {"wall": abs(w - t["wall"]) / t["wall"], "wall_share": abs(w / gw - t["wall"] / tw),
             "cpu_share": abs(c / gc - t["cpu"] / tc), "measured": (w, c), "true": (t["wall"], t["cpu"])}
        if t["cpu"] > 0.01 * t["wall"]:
            e["cpu"] = abs(c - t["cpu"]) / t["cpu"]
        e["ok"] = all(v <= tol for key, v in e.items() if key in ("wall", "cpu", "wall_share", "cpu_share"))
        out[k] = e
    return out


def record_cell(target, fn):
    """(profile, fn's result): the driver recorded by the built-in sampler, every worker of
    ``target`` (a Dask client or "ray") too, like one %%profile --cluster cell."""
    import profmagic
    with profmagic.profile("sampler", mode="both", announce=lambda s: None, cluster=target) as rec:
        out = fn()
    return rec.profile, out


@contextlib.contextmanager
def local_ray(num_cpus: int = 2, hook: bool = True):
    """A real local Ray job started with profmagic's worker hook (``hook=False``: the runtime_env is
    not given, the hook must come from ``profmagic.cluster.ray.install()``), tests/ on its workers'
    path; shut down and cleaned up after. ray.init is tried once more only when Ray's own start-up timed
    out (its raylet waits a fixed 15 s for its dashboard agent, which a loaded machine can miss)."""
    import ray

    from profmagic.cluster import ray as engine
    stub = tempfile.mkdtemp(prefix="profmagic-test-raypath-")
    try:
        os.mkdir(os.path.join(stub, "rfc3987_syntax"))
        with open(os.path.join(stub, "rfc3987_syntax", "__init__.py"), "w") as f:
            f.write(NO_RFC3987)
        saved = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (stub, HERE, saved) if p)
        try:
            for attempt in (1, 2):
                try:
                    ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
                             **({"runtime_env": engine.runtime_env()} if hook else {}))
                    break
                except Exception as e:  # noqa: BLE001 - Ray raises a bare Exception for this
                    if "timed out during startup" not in str(e) or attempt == 2:
                        raise
                    ray.shutdown()
        finally:
            if saved is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = saved
        yield
    finally:
        ray.shutdown()
        shutil.rmtree(stub, ignore_errors=True)

"""Profile every worker of a Dask or Ray cluster, with the driver, as one multi-process Profile.

    p = profmagic.cluster.record(client, duration=10)    # a running Dask cluster, for 10 s
    p = profmagic.cluster.record("ray", duration=10)     # the Ray job this process is connected to

    rec = profmagic.cluster.Recording("dask")            # start/stop, for the magic and profile()
    rec.start(); ...; p = rec.stop(driver_profile); rec.close()

Each worker samples itself in-process (cluster/worker.py: wall and CPU per thread, every sample
labelled with its task prefix), aggregates there, and sends the result back through the engine
(dask.py, ray.py). ``assemble.py`` makes the Profile; ``tasks.py`` the per-task and per-rank tables.

``%%profile --cluster dask|dask:NAME|ray`` and ``profmagic.profile(backend, cluster=...)`` record the
driver (the kernel) with the chosen backend and the workers with a ``Recording`` (session.py).
"""
from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

from ..errors import ProfilerError

if TYPE_CHECKING:   # not imported: a worker loads this package and must not pay for pandas
    from ..model import Profile

ENGINES = ("dask", "ray")
INSTALL = {"dask": "pip install 'dask[distributed]'", "ray": "pip install ray"}


def missing_engine(engine: str) -> ProfilerError:
    return ProfilerError(f"profmagic: --cluster {engine} needs {'Dask' if engine == 'dask' else 'Ray'}, which is "
                         f"not installed here: {INSTALL[engine]} (or pip install 'profmagic[cluster]')")


def engine_of(target) -> str:
    """"dask", "dask:NAME" (resolved by the caller), a distributed.Client, or "ray"."""
    if isinstance(target, str):
        name = target.split(":", 1)[0]
        if name not in ENGINES:
            raise ProfilerError(f"profmagic: unknown cluster engine {target!r}; choose dask, dask:NAME or ray")
        return name
    if type(target).__module__.split(".")[0] == "distributed":
        return "dask"
    raise ProfilerError(f"profmagic: cannot profile a cluster through a {type(target).__name__}; "
                        "give a distributed.Client, \"dask\" or \"ray\"")


def _dask_client(target):
    try:
        import distributed
    except ImportError:
        raise missing_engine("dask") from None
    if not isinstance(target, str):
        return target
    try:
        return distributed.get_client()
    except ValueError as e:
        raise ProfilerError(f"profmagic: no Dask client to profile ({e}). Fix: create one first "
                            "(client = distributed.Client(...)), or name it: --cluster dask:client") from None


def resolve(target, namespace=None):
    """What ``--cluster`` / ``cluster=`` names, checked before anything runs (ProfilerError, one line,
    otherwise): "dask" -> the current ``distributed.Client``; "dask:NAME" -> the Client in variable
    NAME of ``namespace`` (the notebook's); a Client -> itself; "ray" -> "ray" once Ray is connected
    with profmagic's worker hook; a ``Recording`` -> itself."""
    if isinstance(target, Recording):
        return target
    engine = engine_of(target)
    if engine == "ray":
        try:
            import ray  # noqa: F401
        except ImportError:
            raise missing_engine("ray") from None
        from . import ray as ray_engine
        ray_engine.check()
        return "ray"
    if not isinstance(target, str) or ":" not in target:
        return _dask_client(target)
    name = target.split(":", 1)[1]
    try:
        import distributed
    except ImportError:
        raise missing_engine("dask") from None
    if namespace is None or name not in namespace:
        where = "the notebook" if namespace is not None else "Python (pass the Client itself: cluster=client)"
        raise ProfilerError(f"profmagic: --cluster dask:{name}: there is no variable {name!r} in {where}")
    client = namespace[name]
    if not isinstance(client, distributed.Client):
        raise ProfilerError(f"profmagic: --cluster dask:{name}: {name} is a {type(client).__name__}, not a "
                            "distributed.Client")
    return client


def session(target, **options):
    """The engine's Session for ``target``: ``start()``, ``stop() -> results``, ``close()``."""
    engine = engine_of(target)
    if engine == "dask":
        from . import dask
        return dask.Session(_dask_client(target), **options)
    try:
        import ray  # noqa: F401
    except ImportError:
        raise missing_engine("ray") from None
    from . import ray as ray_engine
    return ray_engine.Session(**options)


class Recording:
    """One recording of every worker. ``start()``; run the code; ``stop(driver)`` -> Profile;
    ``close()`` always (it stops any sampler left on a worker that did not answer ``stop``)."""

    def __init__(self, target="dask", **options):
        self.session = session(target, **options)
        self.engine = self.session.engine
        self.t0: float | None = None
        self.results: list[dict] | None = None      # what collect() brought back
        self.stop_seconds: dict[str, float] = {}
        self.profile: Profile | None = None
        self.warning: str | None = None              # the engine's, when it could not collect

    def start(self) -> None:
        self.t0 = time.time()
        self.session.start()

    def collect(self) -> None:
        """Stop every worker's sampler and bring back what it recorded (once; ``stop`` calls it)."""
        if self.results is None:
            t = time.perf_counter()
            self.results = self.session.stop()
            self.stop_seconds["collect"] = time.perf_counter() - t
            self.warning = getattr(self.session, "warning", None)
            if self.warning:    # also in the profile's meta["warnings"]
                print(self.warning, file=sys.stderr, flush=True)

    def stop(self, driver: Profile | None = None, driver_pid: int | None = None,
             driver_name: str = "driver") -> Profile:
        from .assemble import assemble
        self.collect()
        t = time.perf_counter()
        p = assemble(self.results, driver, engine=self.engine, t0=self.t0, driver_pid=driver_pid,
                     driver_name=driver_name, session=self.session.id,
                     warnings=[self.warning] if self.warning else None)
        self.stop_seconds["assemble"] = time.perf_counter() - t
        return p

    def close(self) -> None:
        self.session.close()

    def __enter__(self):
        """``with Recording(client) as rec: work()``; then ``rec.profile`` (workers only)."""
        self.start()
        return self

    def __exit__(self, *exc):
        try:
            self.profile = self.stop()
        finally:
            self.close()
        return False


def record(target="dask", duration: float | None = None, **options) -> Profile:
    """Record every worker of an already-running cluster for ``duration`` seconds (None: until
    Ctrl-C). No driver rank: the code runs elsewhere."""
    rec = Recording(target, **options)
    try:
        rec.start()
        try:
            if duration is None:
                while True:
                    time.sleep(3600)
            else:
                time.sleep(float(duration))
        except KeyboardInterrupt:
            pass
        return rec.stop()
    finally:
        rec.close()

"""Dask: a worker plugin starts a ``WorkerSampler`` in every worker (those that join later too);
``client.run`` stops them and brings their payloads back through Dask's own comms.

Each worker labels a sample with the key its thread is running (``Worker.active_threads``, the
``{thread ident: key}`` map Dask keeps for its own profiler), reduced to the key's prefix with
``dask.utils.key_split`` (``('inc-9a8b…', 3)`` → ``inc``).

A worker that dies mid-recording left its last spill file (rewritten every second) in
``<tmp>/profmagic-cluster-<session>/`` on its node; the nannies, which outlive their workers, read
and remove those files (with no nannies, the surviving workers do). Every call to a worker has a
timeout: a worker that does not answer is named with Dask's error, or with "no answer in N s".
"""
from __future__ import annotations

import asyncio
import os
import shutil
import socket
import tempfile
import uuid

from .worker import WorkerSampler, samples_per_worker

_SESSIONS: dict[str, WorkerSampler] = {}   # in each worker process: session id -> its sampler
_ERRORS: dict[str, str] = {}               # session id -> why it could not start here
PLUGIN_PREFIX = "profmagic-"
SPILL_PREFIX = "profmagic-cluster-"


def spill_dir(session: str) -> str:
    return os.path.join(tempfile.gettempdir(), SPILL_PREFIX + session)


# -- worker side ---------------------------------------------------------------------------
def _start_here(worker, session: str, rate: float, threads: str, max_samples: int, max_seconds: float) -> None:
    if session in _SESSIONS:
        return
    try:
        from dask.utils import key_split
        active = worker.active_threads
        name = str(worker.name)
        _SESSIONS[session] = s = WorkerSampler(
            rate, task_of=lambda: dict(active), prefix=key_split, threads=threads, max_samples=max_samples,
            spill=os.path.join(spill_dir(session), f"{name}-{os.getpid()}.json.z"), max_seconds=max_seconds,
            info={"engine": "dask", "address": worker.address, "name": name, "nthreads": worker.state.nthreads})
        s.start()
    except Exception as e:  # noqa: BLE001 - reported by _stop_here, never raised into Dask
        _SESSIONS.pop(session, None)
        _ERRORS[session] = f"{type(e).__name__}: {e}"


def _stop_here(session: str) -> dict:
    s = _SESSIONS.pop(session, None)
    if s is None:
        err = _ERRORS.pop(session, None)
        return {"status": "error", "error": err} if err else {"status": "not started", "pid": os.getpid()}
    return {"status": "ok", "payload": s.stop(), "pid": os.getpid()}


def _collect_spill(session: str, dask_worker=None) -> dict[str, bytes]:
    """On a nanny (or a worker): the spill files of this node's recording, read and removed."""
    d = spill_dir(session)
    out = {}
    try:
        names = os.listdir(d)
    except FileNotFoundError:
        return out
    for n in names:
        p = os.path.join(d, n)
        if n.endswith(".json.z"):
            try:
                with open(p, "rb") as f:
                    out[f"{socket.gethostname()}:{n}"] = f.read()
            except OSError:
                continue
    shutil.rmtree(d, ignore_errors=True)
    return out


def _leftovers(session: str | None = None, dask_worker=None) -> dict:
    """What a recording may leave on a worker: profmagic threads alive and spill folders."""
    from .worker import profmagic_threads
    tmp = tempfile.gettempdir()
    dirs = [n for n in os.listdir(tmp) if n.startswith(SPILL_PREFIX + (session or ""))]
    return {"threads": profmagic_threads(), "spill_dirs": dirs, "sessions": list(_SESSIONS), "pid": os.getpid()}


try:
    from distributed.diagnostics.plugin import WorkerPlugin as _WorkerPlugin
except ImportError:  # the module still imports; start() says how to install Dask
    _WorkerPlugin = object


class SamplerPlugin(_WorkerPlugin):
    """Starts the session's sampler on every worker, including workers that join during it."""
    idempotent = True

    def __init__(self, session: str, rate: float, threads: str, max_samples: int, max_seconds: float):
        self.session, self.rate, self.threads = session, rate, threads
        self.max_samples, self.max_seconds = max_samples, max_seconds

    def setup(self, worker):
        _start_here(worker, self.session, self.rate, self.threads, self.max_samples, self.max_seconds)

    def teardown(self, worker):   # a sampler nobody collected (the driver gave up on this worker)
        s = _SESSIONS.pop(self.session, None)
        if s is not None:
            s.stop()


# -- driver side ---------------------------------------------------------------------------
def _call(client, fn, addrs, *args, nanny: bool = False, timeout: float = 10.0) -> dict:
    """``fn(*args)`` on each worker (or its nanny) at once, each with its own timeout: {addr: result
    or the exception Dask raised, or TimeoutError}. One silent worker does not hold up the others."""
    async def one(addr):
        try:
            r = await asyncio.wait_for(client._run(fn, *args, workers=[addr], nanny=nanny, on_error="return"),
                                       timeout)
        except asyncio.TimeoutError:
            return addr, TimeoutError(f"no answer in {timeout:g} s")
        except Exception as e:  # noqa: BLE001 - the engine's own error names the fault
            return addr, e
        return addr, r.get(addr, KeyError(f"{addr} did not answer (Dask returned {sorted(r)})"))

    async def every():
        return dict(await asyncio.gather(*(one(a) for a in addrs)))
    return client.sync(every) if addrs else {}


def _describe(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


class Session:
    """One recording on a Dask client: ``start()``, then ``stop()`` -> list of WorkerResult dicts.
    ``close()`` (always) stops any sampler still running and removes the plugin."""

    engine = "dask"

    def __init__(self, client, rate: float = 100.0, threads: str = "tasks", timeout: float = 10.0,
                 max_samples: int | None = None, max_seconds: float = 3600.0, start_timeout: float = 60.0):
        self.client = client
        self.rate = float(rate)
        self.threads = threads
        self.timeout = float(timeout)
        # A worker's first recording imports profmagic's worker side (no pandas, but a loaded
        # machine can take seconds to start anything).
        self.start_timeout = float(start_timeout)
        self.start_error: str | None = None
        self.max_samples = max_samples
        self.max_seconds = float(max_seconds)
        self.id = uuid.uuid4().hex[:12]
        self.plugin = PLUGIN_PREFIX + self.id
        self.workers: dict[str, dict] = {}   # address -> scheduler's info, at start and at stop
        self.started = False

    def _known(self) -> dict[str, dict]:
        # Not client.scheduler_info(): it returns a cache that the client's periodic refresh
        # replaces with one holding no workers, and under load that refresh can land in between.
        return dict(self.client.sync(self.client.scheduler.identity, n_workers=-1)["workers"])

    def start(self) -> None:
        self.workers = self._known()
        self.started = True
        self.max_samples = int(self.max_samples or samples_per_worker(len(self.workers)))
        plugin = SamplerPlugin(self.id, self.rate, self.threads, self.max_samples, self.max_seconds)

        async def register():
            return await asyncio.wait_for(self.client._register_worker_plugin(
                plugin=plugin, name=self.plugin, idempotent=True), self.start_timeout)
        try:
            self.client.sync(register)
        except Exception as e:  # noqa: BLE001 - a worker that cannot start is named by stop()
            self.start_error = _describe(e)

    def stop(self) -> list[dict]:
        now = self._known()
        gone = [a for a in self.workers if a not in now]
        for a, info in now.items():
            self.workers.setdefault(a, info)
        live = [a for a in self.workers if a in now]
        answers = _call(self.client, _stop_here, live, self.id, timeout=self.timeout)
        results = []
        for addr in live:
            r = answers.get(addr)
            info = self.workers[addr]
            base = {"address": addr, "name": str(info.get("name")), "host": info.get("host")}
            if isinstance(r, BaseException):
                results.append({**base, "status": "unreachable", "error": _describe(r)})
                continue
            if r["status"] == "ok":
                results.append({**base, "status": "ok", "payload": r["payload"], "pid": r["pid"]})
            else:
                why = r.get("error") or self.start_error or "the worker plugin did not run there"
                results.append({**base, "status": "error", "error": f"the sampler did not start: {why}"})
        spilled = self._spilled(live) if gone else {}
        for addr in gone:
            info = self.workers[addr]
            name = str(info.get("name"))
            mine = {k: v for k, v in spilled.items() if k.split(":", 1)[1].startswith(f"{name}-")}
            base = {"address": addr, "name": name, "host": info.get("host")}
            if mine:
                key = sorted(mine)[0]
                results.append({**base, "status": "ended", "payload": mine[key],
                                "error": "the worker left the cluster during the recording (died or was "
                                         "removed); its samples up to its last spill are kept"})
            else:
                results.append({**base, "status": "ended", "error": "the worker left the cluster during the "
                                "recording and left no spill file on its node"})
        return results

    def _spilled(self, live: list[str]) -> dict[str, bytes]:
        """Spill files on every node (left by workers that died), through the nannies if any."""
        nannies = any(self.workers[a].get("nanny") for a in live)
        got = _call(self.client, _collect_spill, live, self.id, nanny=nannies, timeout=self.timeout)
        out = {}
        for r in got.values():
            if isinstance(r, dict):
                out.update(r)
        return out

    def close(self) -> None:
        """Remove the plugin (its teardown stops samplers that were never collected)."""
        if not self.started:
            return
        self.started = False

        async def unregister():
            await asyncio.wait_for(self.client._unregister_worker_plugin(self.plugin), self.timeout)
        try:
            self.client.sync(unregister)
        except Exception:  # noqa: BLE001 - best effort: a worker that never answers keeps its lease
            pass

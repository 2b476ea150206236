"""Dask: a worker plugin starts a ``WorkerSampler`` in every worker (those that join later too);
``client.run`` stops them and brings their payloads back through Dask's own comms.

Each worker labels a sample with the key its thread is running (``Worker.active_threads``, the
``{thread ident: key}`` map Dask keeps for its own profiler), reduced to the key's prefix with
``dask.utils.key_split`` (``('inc-9a8b…', 3)`` → ``inc``).

Every call carries the session's secret (``_stop_here``, ``_collect_spill``), which only the
worker plugin brings to the workers. A worker that dies mid-recording left its last spill file
(rewritten every second) in its node's private ``<tmp>/profmagic-cluster.<session>.<tag>/``
(``tag`` from the secret); the nannies, which outlive their workers, read
and remove those files (with no nannies, the surviving workers do). Every call to a worker has a
timeout: a worker that does not answer is named with Dask's error, or with "no answer in N s".
A client closed mid-recording: ``stop()`` names the workers as not collected with a warning, and
a scheduler plugin (``WatchPlugin``) has unregistered the worker plugin as the client left.
"""
from __future__ import annotations

import asyncio
import hashlib
import os
import re
import socket
import tempfile

from . import channel
from .worker import WorkerSampler, samples_per_worker

_SESSIONS: dict[str, WorkerSampler] = {}   # in each worker process: session id -> its sampler
_SECRETS: dict[str, str] = {}              # session id -> its secret
_ERRORS: dict[str, str] = {}               # session id -> why it could not start here
PLUGIN_PREFIX = "profmagic-"
WATCH_PREFIX = "profmagic-watch-"
SPILL_PREFIX = "profmagic-cluster."   # a dot: tempdirs.sweep() takes "profmagic-word-<digits>-" for a dead pid's
REFUSED = {"status": "refused"}


def spill_dir(session: str, secret: str) -> str:
    """``<tmp>/profmagic-cluster.<session>.<16 hex of a hash of the secret>``: a name no one without
    the secret can know beforehand (so none can make it first), and that only the secret finds."""
    tag = hashlib.sha256(f"{channel.session_name(session)}:{secret}".encode()).hexdigest()[:16]
    return os.path.join(tempfile.gettempdir(), f"{SPILL_PREFIX}{session}.{tag}")


def name_tag(name: str) -> str:
    """A worker's name in its spill file's name (a name can hold any character)."""
    return hashlib.sha256(str(name).encode()).hexdigest()[:12]


# -- worker side ---------------------------------------------------------------------------
def _start_here(worker, session: str, secret: str, opts: dict) -> None:
    if session in _SESSIONS:
        return
    try:
        from dask.utils import key_split
        opts = channel.options({**opts, "secret": secret})
        active = worker.active_threads
        name = str(worker.name)
        spill = os.path.join(spill_dir(session, secret), f"{name_tag(name)}-{os.getpid()}.json.z")
        s = WorkerSampler(
            opts["rate"], task_of=lambda: dict(active), prefix=key_split, threads=opts["threads"],
            max_samples=opts["max_samples"], spill=spill, max_seconds=opts["max_seconds"],
            info={"engine": "dask", "address": worker.address, "name": name, "nthreads": worker.state.nthreads})
        _SESSIONS[session], _SECRETS[session] = s, secret
        s.start()
    except Exception as e:  # noqa: BLE001 - reported by _stop_here, never raised into Dask
        _SESSIONS.pop(session, None)
        _SECRETS.pop(session, None)
        _ERRORS[session] = f"{type(e).__name__}: {e}"


def _stop_here(session: str, secret: str) -> dict:
    """This worker's payload, for the holder of the session's secret only."""
    if session not in _SESSIONS:
        err = _ERRORS.pop(session, None) if isinstance(session, str) else None
        return {"status": "error", "error": err} if err else {"status": "not started", "pid": os.getpid()}
    if not channel.same_secret(secret, _SECRETS.get(session)):
        return REFUSED
    s = _SESSIONS.pop(session)
    _SECRETS.pop(session, None)
    return {"status": "ok", "payload": s.stop(), "pid": os.getpid(), "name": s.info.get("name")}


def _collect_spill(session: str, secret: str, skip=(), dask_worker=None) -> dict[str, bytes]:
    """On a nanny (or a worker): the spill files of this node's recording, read and removed, but
    those of the pids in ``skip`` (live workers, which remove their own); only from the private
    folder of ours that the secret names."""
    try:
        d = spill_dir(session, secret)
        channel.check_private(d)
        names = os.listdir(d)
    except (OSError, ValueError):
        return {}
    out = {}
    for n in names:
        m = re.fullmatch(r"[0-9a-f]{12}-(\d{1,10})\.json\.z", n)
        if m and int(m.group(1)) not in skip:
            p = os.path.join(d, n)
            try:
                out[f"{socket.gethostname()}:{n}"] = channel.read_own(p, channel.MAX_PAYLOAD)
                os.unlink(p)
            except (OSError, ValueError):
                continue
    try:
        os.rmdir(d)          # the last one out removes the folder
    except OSError:
        pass
    return out


def _leftovers(session: str | None = None, dask_worker=None) -> dict:
    """What a recording may leave on a worker: profmagic threads alive and spill folders."""
    from .worker import profmagic_threads
    tmp = tempfile.gettempdir()
    dirs = [n for n in os.listdir(tmp) if n.startswith(SPILL_PREFIX + (session or ""))]
    return {"threads": profmagic_threads(), "spill_dirs": dirs, "sessions": list(_SESSIONS), "pid": os.getpid()}


try:
    from distributed.diagnostics.plugin import SchedulerPlugin as _SchedulerPlugin
    from distributed.diagnostics.plugin import WorkerPlugin as _WorkerPlugin
except ImportError:  # the module still imports; start() says how to install Dask
    _WorkerPlugin = _SchedulerPlugin = object


class SamplerPlugin(_WorkerPlugin):
    """Starts the session's sampler on every worker, including workers that join during it. Holds
    the session's secret: what it starts answers only calls that carry it."""
    idempotent = True

    def __init__(self, session: str, secret: str, opts: dict):
        self.session, self.secret, self.opts = session, secret, dict(opts)

    def setup(self, worker):
        _start_here(worker, self.session, self.secret, self.opts)

    def teardown(self, worker):
        """The plugin removed (the recording ended or its client left): stop and remove everything.
        The worker closing mid-recording (``client.restart()``, scaled down): stop, and leave the
        last payload in the spill file for the nanny to bring back at ``stop()``."""
        s = _SESSIONS.pop(self.session, None)
        _SECRETS.pop(self.session, None)
        if s is not None:
            status = getattr(getattr(worker, "status", None), "name", "")
            s.stop(keep_spill=status in ("closing", "closing_gracefully", "closed", "failed"))


class WatchPlugin(_SchedulerPlugin):
    """On the scheduler: when the recording's client leaves (closed, or lost), unregister the
    worker plugin (its teardown stops every sampler and removes the spill files; workers that
    start later, e.g. after ``client.restart()``, do not get it) and remove itself."""

    def __init__(self, client_id: str, plugin: str, name: str):
        self.client_id, self.plugin, self.name = client_id, plugin, name

    def remove_client(self, scheduler, client: str) -> None:
        if client != self.client_id:
            return
        try:
            scheduler.remove_plugin(name=self.name)
        except ValueError:
            pass

        async def unregister():
            try:
                await scheduler.unregister_worker_plugin(None, self.plugin)
            except ValueError:   # the driver unregistered it first
                pass
        asyncio.ensure_future(unregister())


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
    """One recording on a Dask client: ``start()``, then ``stop()`` -> list of WorkerResult dicts
    (never raises: a client closed or lost mid-recording gives the workers as not collected and
    ``warning``). ``close()`` (always) stops any sampler still running and removes the plugins."""

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
        self.id = channel.new_session()
        self.secret = channel.new_secret()     # in the worker plugin only: Dask hands it to the workers
        self.plugin = PLUGIN_PREFIX + self.id
        self.watch = WATCH_PREFIX + self.id
        self.workers: dict[str, dict] = {}   # address -> scheduler's info, at start and at stop
        self.started = False
        self.warning: str | None = None

    def _known(self) -> dict[str, dict]:
        # Not client.scheduler_info(): it returns a cache that the client's periodic refresh
        # replaces with one holding no workers, and under load that refresh can land in between.
        return dict(self.client.sync(self.client.scheduler.identity, n_workers=-1)["workers"])

    def _gone(self) -> str | None:
        """Why the client can no longer reach the cluster, or None."""
        status = getattr(self.client, "status", None)
        if status != "running" or getattr(self.client, "scheduler", None) is None:
            return f"the Dask client was closed during the recording (its status: {status})"
        return None

    def start(self) -> None:
        self.workers = self._known()
        self.started = True
        self.max_samples = int(self.max_samples or samples_per_worker(len(self.workers)))
        opts = {"rate": self.rate, "threads": self.threads, "max_samples": self.max_samples,
                "max_seconds": self.max_seconds}
        channel.options({**opts, "secret": self.secret})      # ValueError now, not on every worker
        plugin = SamplerPlugin(self.id, self.secret, opts)
        watch = WatchPlugin(self.client.id, self.plugin, self.watch)

        async def register():
            try:   # best effort: with no profmagic on the scheduler, samplers stop at max_seconds
                await asyncio.wait_for(self.client._register_scheduler_plugin(
                    plugin=watch, name=self.watch, idempotent=True), self.start_timeout)
            except Exception:  # noqa: BLE001
                pass
            return await asyncio.wait_for(self.client._register_worker_plugin(
                plugin=plugin, name=self.plugin, idempotent=True), self.start_timeout)
        try:
            self.client.sync(register)
        except Exception as e:  # noqa: BLE001 - a worker that cannot start is named by stop()
            self.start_error = _describe(e)

    def stop(self) -> list[dict]:
        why = self._gone()
        if why is None:
            try:
                return self._stop()
            except Exception as e:  # noqa: BLE001 - e.g. the scheduler went away mid-stop
                why = self._gone() or f"the Dask cluster could not be asked ({_describe(e)})"
        self.warning = (f"profmagic: {why}: the workers' samples could not be collected; the profile holds "
                        "what was gathered (docs/errors.md: cluster-client-closed)")
        return [{"address": a, "name": str(i.get("name")), "host": i.get("host"), "status": "error",
                 "error": f"not collected: {why}"} for a, i in self.workers.items()]

    def _stop(self) -> list[dict]:
        now = self._known()
        gone = [a for a in self.workers if a not in now]
        for a, info in now.items():
            self.workers.setdefault(a, info)
        live = [a for a in self.workers if a in now]
        answers = _call(self.client, _stop_here, live, self.id, self.secret, timeout=self.timeout)
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
        alive = sorted({r["pid"] for r in answers.values() if isinstance(r, dict) and r.get("pid") is not None})
        spilled = self._spilled(live, alive) if gone else {}
        for addr in gone:
            info = self.workers[addr]
            name = str(info.get("name"))
            mine = {k: v for k, v in spilled.items() if k.split(":", 1)[1].startswith(f"{name_tag(name)}-")}
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

    def _spilled(self, live: list[str], alive: list[int]) -> dict[str, bytes]:
        """Spill files on every node left by workers that died (not those of the ``alive`` pids, e.g.
        the workers a restart started), through the nannies if any."""
        nannies = any(self.workers[a].get("nanny") for a in live)
        got = _call(self.client, _collect_spill, live, self.id, self.secret, alive, nanny=nannies,
                    timeout=self.timeout)
        out = {}
        for r in got.values():
            if isinstance(r, dict):
                out.update(r)
        return out

    def close(self) -> None:
        """Remove the plugins (the worker plugin's teardown stops samplers that were never
        collected). With the client gone, the scheduler's WatchPlugin has done it."""
        if not self.started:
            return
        self.started = False
        if self._gone():
            return

        async def unregister():
            await asyncio.wait_for(self.client._unregister_worker_plugin(self.plugin), self.timeout)
            try:
                await asyncio.wait_for(self.client.scheduler.unregister_scheduler_plugin(name=self.watch),
                                       self.timeout)
            except Exception:  # noqa: BLE001 - never registered (no profmagic on the scheduler)
                pass
        try:
            self.client.sync(unregister)
        except Exception:  # noqa: BLE001 - best effort: a worker that never answers keeps its lease
            pass

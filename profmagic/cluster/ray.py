"""Ray: every worker process of the job samples itself, started by Ray's worker start-up hook.

Ray runs ``runtime_env["worker_process_setup_hook"]`` in each worker process of a job when it
starts. Ours (``setup_hook``) only opens a listening Unix socket in the abstract namespace,
``@profmagic-ray-<job id>-<pid>`` (no file, no CPU while it waits in ``accept()``); it samples
nothing until asked. The job must be started with it::

    ray.init(runtime_env=profmagic.cluster.ray.runtime_env())      # or install() before ray.init()

A recording runs one small task per node (``num_cpus=0``, pinned with node affinity). At start it
writes ``<tmp>/profmagic-ray-<job>/<session>/ACTIVE`` (workers that start during the recording
see it and sample from their start) and tells every worker of the job on that node to start a
``WorkerSampler``. At stop it removes ACTIVE, asks each worker for its payload over the socket,
reads the spill files of workers that died, removes the folder, and returns all of it through
Ray's object store. Each sample's task is the first function on its thread's stack called from
Ray's own code (``spin``, ``Counter.incr``): the task Ray is executing on that thread.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import struct
import tempfile
import threading
import time
import uuid

from .worker import WorkerSampler, samples_per_worker

HOOK = "profmagic.cluster.ray.setup_hook"
ENV_NEXT_HOOK = "PROFMAGIC_RAY_NEXT_HOOK"   # a setup hook the job had before ours: called after it
SOCKET_PREFIX = "profmagic-ray-"
DIR_PREFIX = "profmagic-ray-"
ACTIVE = "ACTIVE"
ANSWER_TIMEOUT = 10.0


# -- job set-up (driver) ----------------------------------------------------------------------
def runtime_env(env: dict | None = None) -> dict:
    """``env`` with profmagic's worker start-up hook; an existing module-path hook still runs."""
    env = dict(env or {})
    prev = env.get("worker_process_setup_hook")
    if prev == HOOK:
        return env
    if prev is not None:
        if not isinstance(prev, str):
            raise ValueError("profmagic can chain a worker_process_setup_hook given as a module path "
                             "('pkg.mod.fn'), not as a function object")
        env["env_vars"] = {**(env.get("env_vars") or {}), ENV_NEXT_HOOK: prev}
    env["worker_process_setup_hook"] = HOOK
    return env


def runtime_env_hook(env: dict | None) -> dict:
    """For ``RAY_RUNTIME_ENV_HOOK``: Ray calls it in ``ray.init`` with the job's runtime_env."""
    return runtime_env(env)


def install() -> None:
    """Every later ``ray.init()`` in this process gets the hook (through ``RAY_RUNTIME_ENV_HOOK``)."""
    os.environ.setdefault("RAY_RUNTIME_ENV_HOOK", "profmagic.cluster.ray.runtime_env_hook")


def hooked() -> bool:
    """Whether the connected job's workers run profmagic's hook."""
    import ray
    env = ray.get_runtime_context().runtime_env or {}
    hook = env.get("worker_process_setup_hook")
    if hook == HOOK:
        return True
    # Ray turns a module-path hook into an environment variable of the job's workers.
    return (env.get("env_vars") or {}).get("__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR") == HOOK


def not_hooked_message() -> str:
    return ("profmagic: this Ray job was started without profmagic's worker hook, so its workers cannot "
            "record themselves. Fix: start Ray with ray.init(runtime_env=profmagic.cluster.ray.runtime_env()) "
            "(or call profmagic.cluster.ray.install() before ray.init()), then run the cell again")


def check() -> None:
    """Ray is connected, and its job's workers run profmagic's hook (ProfilerError otherwise)."""
    import ray

    from ..errors import ProfilerError
    if not ray.is_initialized():
        raise ProfilerError("profmagic: --cluster ray needs a connected Ray: call ray.init() first (after "
                            "%load_ext profmagic, or with runtime_env=profmagic.cluster.ray.runtime_env())")
    if not hooked():
        raise ProfilerError(not_hooked_message())


# -- worker side ----------------------------------------------------------------------------
_agent = None


def _job() -> str:
    return os.environ.get("RAY_JOB_ID") or "nojob"


def socket_name(job: str, pid: int) -> str:
    return f"{SOCKET_PREFIX}{job}-{pid}"


def session_dir(job: str, session: str) -> str:
    return os.path.join(tempfile.gettempdir(), f"{DIR_PREFIX}{job}", session)


def _ray_dir() -> tuple:
    """Ray's package folder, and profmagic's cluster folder (our own control tasks are no task)."""
    import ray
    return (os.path.dirname(os.path.abspath(ray.__file__)) + os.sep,
            os.path.dirname(os.path.abspath(__file__)) + os.sep)


def stack_task(frames: list, ray_dir: tuple, stdlib: tuple = ()) -> str | None:
    """The task on a stack: the first frame of neither Ray nor the standard library that is called
    from a frame of Ray (Ray's own threads wait in ``threading``: no task). Its qualified name
    without the enclosing function's ``<locals>`` (``spin``, ``Counter.incr``)."""
    inside = False
    for name, file, _line in frames:
        if file.startswith(ray_dir):
            inside = True
            continue
        if inside and not _is_stdlib(file, stdlib):
            return name.rsplit("<locals>.", 1)[-1]
        inside = False
    return None


def _stdlib_dirs() -> tuple:
    import sysconfig
    paths = sysconfig.get_paths()
    return tuple({os.path.join(paths[k], "") for k in ("stdlib", "platstdlib") if paths.get(k)})


def _is_stdlib(file: str, stdlib: tuple) -> bool:
    if file.startswith("<frozen "):
        return True
    return file.startswith(stdlib) and "-packages" + os.sep not in file


def _title() -> str:
    try:
        with open("/proc/self/cmdline", "rb") as f:
            return f.read().split(b"\0", 1)[0].decode(errors="replace")
    except OSError:
        return ""


def _whoami() -> dict:
    import ray
    ctx = ray.get_runtime_context()
    actor = ctx.get_actor_id()
    title = _title()
    cls = None
    if actor and title.startswith("ray::"):
        cls = title[5:].split(".", 1)[0]
    return {"engine": "ray", "node": ctx.get_node_id(), "actor_id": actor, "actor": cls,
            "node_ip": ray.util.get_node_ip_address(), "title": title}


class Agent:
    """In each worker: a socket that starts and stops this process's sampler on request."""

    def __init__(self, job: str):
        self.job = job
        self.sampler: WorkerSampler | None = None
        self.session: str | None = None
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind("\0" + socket_name(job, os.getpid()))
        self.sock.listen(8)
        self.thread = threading.Thread(target=self.serve, name="profmagic-ray-agent", daemon=True)
        self.thread.start()

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                try:
                    conn.settimeout(ANSWER_TIMEOUT)
                    req = json.loads(_recv(conn))
                    _send(conn, self.handle(req))
                except Exception as e:  # noqa: BLE001 - one bad request must not end the agent
                    try:
                        _send(conn, json.dumps({"status": "error", "error": f"{type(e).__name__}: {e}"}).encode())
                    except OSError:
                        pass

    def handle(self, req: dict) -> bytes:
        op = req.get("op")
        if op == "start":
            self.start(req["session"], req["rate"], req["threads"], req["max_samples"], req["max_seconds"])
            ok = self.sampler is not None and self.session == req["session"]
            return json.dumps({"status": "ok" if ok else "error", "pid": os.getpid()}).encode()
        if op == "stop":
            return self.stop(req["session"])
        if op == "status":
            from .worker import profmagic_threads
            return json.dumps({"status": "ok", "pid": os.getpid(), "session": self.session,
                               "sampling": self.sampler is not None and self.sampler.running,
                               "threads": profmagic_threads()}).encode()
        raise ValueError(f"unknown op {op!r}")

    def start(self, session: str, rate: float, threads: str, max_samples: int, max_seconds: float) -> None:
        if self.sampler is not None:
            if self.session == session:
                return
            self.sampler.stop()   # a session nobody stopped (its driver went away): the new one wins
        ray_dir, stdlib = _ray_dir(), _stdlib_dirs()
        d = session_dir(self.job, session)
        self.session = session
        self.sampler = WorkerSampler(rate, stack_task=lambda frames: stack_task(frames, ray_dir, stdlib),
                                     threads=threads, max_samples=max_samples,
                                     spill=os.path.join(d, f"{os.getpid()}.json.z"), max_seconds=max_seconds,
                                     info=_whoami())
        self.sampler.start()

    def stop(self, session: str) -> bytes:
        """The payload, prefixed with one JSON line: {"status", "pid", "info"}."""
        s = self.sampler
        if s is None or self.session != session:
            return json.dumps({"status": "not started", "pid": os.getpid()}).encode()
        self.sampler = self.session = None
        s.info.update(_whoami())   # the actor class is known once the actor exists
        data = s.stop()
        return json.dumps({"status": "ok", "pid": os.getpid(), "info": s.info}).encode() + b"\n" + data


def setup_hook() -> None:
    """Ray's worker_process_setup_hook: open this worker's control socket; if a recording is
    running on this node, start sampling now."""
    global _agent
    nxt = os.environ.get(ENV_NEXT_HOOK)
    if nxt:
        import importlib
        mod, _, fn = nxt.rpartition(".")
        getattr(importlib.import_module(mod), fn)()
    if _agent is not None:
        return
    _agent = Agent(_job())
    base = os.path.join(tempfile.gettempdir(), f"{DIR_PREFIX}{_agent.job}")
    try:
        sessions = os.listdir(base)
    except OSError:
        return
    for s in sessions:
        try:
            with open(os.path.join(base, s, ACTIVE)) as f:
                req = json.load(f)
        except (OSError, ValueError):
            continue
        _agent.start(s, req["rate"], req["threads"], req["max_samples"], req["max_seconds"])
        break


# -- the socket protocol: 8-byte length, then the bytes -----------------------------------------
def _send(conn, data: bytes) -> None:
    conn.sendall(struct.pack("!Q", len(data)) + data)


def _recv(conn) -> bytes:
    head = _exact(conn, 8)
    return _exact(conn, struct.unpack("!Q", head)[0])


def _exact(conn, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = conn.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError(f"the worker closed the connection after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def _ask(job: str, pid: int, req: dict, timeout: float) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
        c.settimeout(timeout)
        c.connect("\0" + socket_name(job, pid))
        _send(c, json.dumps(req).encode())
        return _recv(c)


def _agents(job: str) -> list[int]:
    """Pids of this job's workers on this node that listen for profmagic (from /proc/net/unix)."""
    prefix = "@" + SOCKET_PREFIX + job + "-"
    pids = set()
    try:
        with open("/proc/net/unix") as f:
            for line in f:
                parts = line.split()
                path = parts[7] if len(parts) >= 8 else ""
                if path.startswith(prefix):
                    try:
                        pids.add(int(path[len(prefix):]))
                    except ValueError:
                        pass
    except OSError:
        pass
    return sorted(pids)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# -- node side: one task per node -----------------------------------------------------------------
def node_start(session: str, opts: dict) -> dict:
    """On one node: mark the recording active and start every worker of the job there."""
    job = _job()
    d = session_dir(job, session)
    os.makedirs(d, mode=0o700, exist_ok=True)
    tmp = os.path.join(d, ACTIVE + ".tmp")
    with open(tmp, "w") as f:
        json.dump(opts, f)
    os.replace(tmp, os.path.join(d, ACTIVE))
    req = {"op": "start", "session": session, **opts}
    out = {}
    for pid in _agents(job):
        try:
            if pid == os.getpid() and _agent is not None:   # this task's own worker
                _agent.handle(req)
                out[pid] = "ok"
            else:
                out[pid] = json.loads(_ask(job, pid, req, opts["timeout"])).get("status", "?")
        except Exception as e:  # noqa: BLE001 - named in the results
            out[pid] = f"{type(e).__name__}: {e}"
    return {"node": _node_id(), "started": out}


def node_stop(session: str, timeout: float) -> dict:
    """On one node: stop every worker of the job, collect payloads and dead workers' spill files,
    remove the session's folder."""
    job = _job()
    d = session_dir(job, session)
    try:
        os.unlink(os.path.join(d, ACTIVE))
    except FileNotFoundError:
        pass
    req = {"op": "stop", "session": session}
    results = []
    answered = set()
    for pid in _agents(job):
        try:
            if pid == os.getpid() and _agent is not None:
                raw = _agent.handle(req)
            else:
                raw = _ask(job, pid, req, timeout)
        except Exception as e:  # noqa: BLE001 - the worker is named with the error
            results.append({"pid": pid, "status": "unreachable", "error": f"{type(e).__name__}: {e}"})
            answered.add(pid)
            continue
        head, _, payload = raw.partition(b"\n")
        h = json.loads(head)
        answered.add(pid)
        if h.get("status") == "ok":
            results.append({"pid": pid, "status": "ok", "payload": payload, "info": h.get("info") or {}})
        elif h.get("status") == "error":
            results.append({"pid": pid, "status": "error", "error": h.get("error")})
    try:
        names = os.listdir(d)
    except FileNotFoundError:
        names = []
    for n in names:
        if not n.endswith(".json.z"):
            continue
        pid = int(n.split(".", 1)[0])
        if pid in answered and _alive(pid):   # an unreachable worker may still write: leave it be
            continue
        try:
            with open(os.path.join(d, n), "rb") as f:
                payload = f.read()
        except OSError:
            continue
        results.append({"pid": pid, "status": "ended", "payload": payload,
                        "error": "the worker process ended during the recording; its samples up to its last "
                                 "spill are kept"})
    if not any(r["status"] == "unreachable" for r in results):
        shutil.rmtree(d, ignore_errors=True)
        try:
            os.rmdir(os.path.dirname(d))
        except OSError:
            pass
    return {"node": _node_id(), "results": results}


def node_leftovers(session: str | None = None) -> dict:
    """What a recording may leave on a node: its folder, and per worker whether it still samples
    and its profmagic threads (the agent's own, idle in accept(), stays for the worker's life)."""
    job = _job()
    base = os.path.join(tempfile.gettempdir(), f"{DIR_PREFIX}{job}")
    leftover = os.listdir(base) if os.path.isdir(base) else []
    sampling, threads = {}, {}
    for pid in _agents(job):
        try:
            r = json.loads(_ask(job, pid, {"op": "status"}, 5.0)) if pid != os.getpid() else \
                json.loads(_agent.handle({"op": "status"}))
            sampling[pid], threads[pid] = r.get("sampling"), r.get("threads")
        except Exception as e:  # noqa: BLE001
            sampling[pid] = f"{type(e).__name__}: {e}"
    return {"node": _node_id(), "dirs": leftover, "sampling": sampling, "threads": threads}


def _node_id() -> str:
    import ray
    return ray.get_runtime_context().get_node_id()


# -- driver side -----------------------------------------------------------------------------------
def _on_each_node(fn, *args, timeout: float):
    """``fn(*args)`` as one task on every alive node: {node id: result or the Ray error}."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    task = ray.remote(num_cpus=0, max_retries=0)(fn)
    nodes = [n["NodeID"] for n in ray.nodes() if n.get("Alive")]
    refs = {n: task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False)).remote(*args)
            for n in nodes}
    out = {}
    deadline = time.monotonic() + timeout
    for n, ref in refs.items():
        try:
            out[n] = ray.get(ref, timeout=max(0.0, deadline - time.monotonic()))
        except Exception as e:  # noqa: BLE001 - the node is named with Ray's error
            out[n] = e
            if type(e).__name__ == "GetTimeoutError":
                ray.cancel(ref)
    return out


class Session:
    """One recording of every worker process of the connected Ray job."""

    engine = "ray"

    def __init__(self, rate: float = 100.0, threads: str = "tasks", timeout: float = 10.0,
                 max_samples: int | None = None, max_seconds: float = 3600.0, node_timeout: float = 60.0):
        import ray
        check()
        self.id = uuid.uuid4().hex[:12]
        # Workers of the job are not known before they are asked: one per CPU of the cluster, at most.
        workers = int(ray.cluster_resources().get("CPU", 1))
        self.opts = {"rate": float(rate), "threads": threads,
                     "max_samples": int(max_samples or samples_per_worker(workers)),
                     "max_seconds": float(max_seconds), "timeout": float(timeout)}
        self.timeout = float(timeout)
        # A node task may wait for a worker process to start (seconds under load), so its own
        # deadline is longer than one worker's.
        self.node_timeout = float(node_timeout)
        self.started: dict = {}
        self.open = False

    def start(self) -> None:
        self.open = True
        self.started = _on_each_node(node_start, self.id, self.opts, timeout=self.node_timeout)

    def stop(self) -> list[dict]:
        got = _on_each_node(node_stop, self.id, self.timeout, timeout=self.node_timeout)
        results = []
        for node, r in got.items():
            if isinstance(r, BaseException):
                results.append({"name": f"node {node[:8]}", "label": f"ray node {node[:8]} (all its workers)",
                                "node": node, "status": "unreachable", "error": f"{type(r).__name__}: {r}"})
                continue
            for w in r["results"]:
                info = dict(w.get("info") or {})
                if w.get("payload") is not None and not info:
                    info = _payload_info(w["payload"])
                ip = info.get("node_ip") or node[:8]
                what = f"actor {info['actor']}" if info.get("actor") else "tasks"
                results.append({**w, "name": str(w["pid"]), "node": node, "host": ip, "actor": info.get("actor"),
                                "label": f"ray node {ip} · {what}"})
        self.open = any(r["status"] == "unreachable" for r in results)
        return results

    def close(self) -> None:
        """Stop what a previous stop() could not reach (best effort)."""
        if self.open:
            self.open = False
            _on_each_node(node_stop, self.id, self.timeout, timeout=self.node_timeout)


def _payload_info(payload: bytes) -> dict:
    from .assemble import decode
    try:
        return decode(payload).get("info") or {}
    except ValueError:
        return {}


def leftovers() -> dict:
    """Per node: session folders left and whether any worker still samples (for tests)."""
    return _on_each_node(node_leftovers, timeout=60.0)

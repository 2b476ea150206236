"""Ray: every worker process of the job samples itself, started by Ray's worker start-up hook.

Ray runs ``runtime_env["worker_process_setup_hook"]`` in each worker process of a job when it
starts. Ours (``setup_hook``) only opens a listening Unix socket in the abstract namespace,
``@profmagic-ray-<job id>-<pid>-<random>`` (no file, no CPU while it waits in ``accept()``); it
samples nothing until asked, and answers only its own uid with the recording's secret
(cluster/channel.py). The job must be started with it::

    ray.init(runtime_env=profmagic.cluster.ray.runtime_env())      # or install() before ray.init()

A recording runs one small task per node (``num_cpus=0``, pinned with node affinity). At start it
writes ``ACTIVE`` (options and secret) in the private ``<tmp>/profmagic-ray.<job>.<session>/``
(workers that start during the recording see it and sample from their start) and tells every worker of the job on that node to start a
``WorkerSampler``. At stop it removes ACTIVE, asks each worker for its payload over the socket,
reads the spill files of workers that died, removes the folder, and returns all of it through
Ray's object store. Each sample's task is the first function on its thread's stack called from
Ray's own code (``spin``, ``Counter.incr``): the task Ray is executing on that thread.
"""
from __future__ import annotations

import errno
import json
import os
import re
import secrets
import shutil
import socket
import sys
import tempfile
import threading
import time

from ..interrupts import start_thread
from . import channel
from .worker import WorkerSampler, samples_per_worker

HOOK = "profmagic.cluster.ray.setup_hook"
ENV_NEXT_HOOK = "PROFMAGIC_RAY_NEXT_HOOK"   # a setup hook the job had before ours: called after it
SOCKET_PREFIX = "profmagic-ray-"
DIR_PREFIX = "profmagic-ray."   # dots: tempdirs.sweep() takes "profmagic-word-<digits>-" for a dead pid's
ACTIVE = "ACTIVE"
ANSWER_TIMEOUT = 10.0
REQUEST_SECONDS = 5.0     # a connection's whole request must arrive within this
BIND_TRIES = 20
REFUSED = b'{"status": "refused"}'


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
_JOB_RE = re.compile(r"[0-9a-fA-F]{1,64}")


def _job() -> str:
    job = os.environ.get("RAY_JOB_ID") or ""
    return job if _JOB_RE.fullmatch(job) else "nojob"


def socket_name(job: str, pid: int, tag: str) -> str:
    """``profmagic-ray-<job>-<pid>-<tag>``: a fresh random tag at each bind, so no one can take a
    future worker's name before it."""
    return f"{SOCKET_PREFIX}{job}-{pid}-{tag}"


def session_dir(job: str, session: str) -> str:
    """The session's private folder: ``<tmp>/profmagic-ray.<job>.<session>`` (a name, never a path)."""
    return os.path.join(tempfile.gettempdir(), f"{DIR_PREFIX}{job}.{channel.session_name(session)}")


def _session_dirs(job: str) -> dict[str, str]:
    """{session: folder} of every folder here named like a session of ``job`` (not yet checked)."""
    pat = re.compile(re.escape(f"{DIR_PREFIX}{job}.") + r"([0-9a-f]{12})")
    try:
        tmp = tempfile.gettempdir()
        names = os.listdir(tmp)
    except OSError:
        return {}
    return {m.group(1): os.path.join(tmp, n) for n in names if (m := pat.fullmatch(n))}


def _active(folder: str) -> dict:
    """A session's ACTIVE options, honoured only from a private folder of ours and a regular file of
    ours, every value checked (channel.options); OSError or ValueError otherwise."""
    channel.check_private(folder)
    return channel.options(channel.loads(channel.read_own(os.path.join(folder, ACTIVE), channel.MAX_ACTIVE),
                                         channel.MAX_ACTIVE))


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
    """In each worker: a socket that starts and stops this process's sampler on request. Only a
    peer of this process's uid is answered (anyone else: closed, no data read or sent), and only a
    request carrying the session's secret acts; each connection has REQUEST_SECONDS to send its
    request."""

    def __init__(self, job: str):
        self.job = job
        self.uid = os.geteuid()
        self.sampler: WorkerSampler | None = None
        self.session: str | None = None
        self.secret: str | None = None
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        for _ in range(BIND_TRIES):
            self.name = socket_name(job, os.getpid(), secrets.token_hex(8))
            try:
                self.sock.bind("\0" + self.name)
                break
            except OSError as e:
                if e.errno != errno.EADDRINUSE:
                    raise
        else:
            raise OSError(errno.EADDRINUSE, f"no free socket name after {BIND_TRIES} tries")
        self.sock.listen(16)
        start_thread(threading.Thread(target=self.serve, name="profmagic-ray-agent", daemon=True), self, "thread")

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                try:
                    if channel.peer(conn)[1] != self.uid:
                        continue
                    self.answer(conn)
                except Exception:  # noqa: BLE001,S112 - one bad connection must not end the agent
                    continue

    def answer(self, conn) -> None:
        try:
            req = channel.loads(channel.recv(conn, channel.MAX_REQUEST, time.monotonic() + REQUEST_SECONDS))
            out = self.handle(req)
        except (OSError, ValueError, TypeError, KeyError) as e:
            if isinstance(e, (TimeoutError, ConnectionError)):
                return
            out = json.dumps({"status": "error", "error": f"{type(e).__name__}: {e}"}).encode()
        conn.settimeout(ANSWER_TIMEOUT)
        channel.send(conn, out)

    def handle(self, req: dict) -> bytes:
        """One request: {"op": "start"|"stop"|"status", "session", "secret"}."""
        if not isinstance(req, dict):
            raise ValueError("a request is a JSON object")
        op, secret = req.get("op"), req.get("secret")
        if op == "start":
            session = channel.session_name(req.get("session"))
            opts = _active(session_dir(self.job, session))     # written by the node task, with the secret
            if not channel.same_secret(secret, opts["secret"]):
                return REFUSED
            self.start(session, opts)
            ok = self.sampler is not None and self.session == session
            return json.dumps({"status": "ok" if ok else "error", "pid": os.getpid()}).encode()
        if op == "stop":
            if self.session is None or req.get("session") != self.session:
                return json.dumps({"status": "not started", "pid": os.getpid()}).encode()
            if not channel.same_secret(secret, self.secret):
                return REFUSED
            return self.stop()
        if op == "status":
            if self.session is not None and not channel.same_secret(secret, self.secret):
                return REFUSED
            from .worker import profmagic_threads
            return json.dumps({"status": "ok", "pid": os.getpid(), "session": self.session,
                               "sampling": self.sampler is not None and self.sampler.running,
                               "threads": profmagic_threads()}).encode()
        raise ValueError("unknown op")

    def start(self, session: str, opts: dict) -> None:
        if self.sampler is not None:
            if self.session == session:
                return
            self.sampler.stop()   # a session nobody stopped (its driver went away): the new one wins
        ray_dir, stdlib = _ray_dir(), _stdlib_dirs()
        d = session_dir(self.job, session)
        self.sampler = self.session = self.secret = None
        sampler = WorkerSampler(opts["rate"], stack_task=lambda frames: stack_task(frames, ray_dir, stdlib),
                                threads=opts["threads"], max_samples=opts["max_samples"],
                                spill=os.path.join(d, f"{os.getpid()}.json.z"), max_seconds=opts["max_seconds"],
                                info=_whoami())
        sampler.start()
        self.sampler, self.session, self.secret = sampler, session, opts["secret"]

    def stop(self) -> bytes:
        """The payload, prefixed with one JSON line: {"status", "pid", "info"}."""
        s = self.sampler
        self.sampler = self.session = self.secret = None
        s.info.update(_whoami())   # the actor class is known once the actor exists
        data = s.stop()
        return json.dumps({"status": "ok", "pid": os.getpid(), "info": s.info}).encode() + b"\n" + data

    def join_active(self) -> None:
        """If a recording of this job is running on this node, sample from now on."""
        for session, folder in _session_dirs(self.job).items():
            try:
                opts = _active(folder)
            except (OSError, ValueError):
                continue        # not ours, not private, or not a valid ACTIVE: ignored
            self.start(session, opts)
            return


def setup_hook() -> None:
    """Ray's worker_process_setup_hook: open this worker's control socket; if a recording is
    running on this node, start sampling now. Never raises into Ray for its own part (a job's own
    chained hook raises as it would without profmagic): a failure is one line on stderr and the
    worker runs unrecorded."""
    global _agent
    nxt = os.environ.get(ENV_NEXT_HOOK)
    if nxt:
        import importlib
        mod, _, fn = nxt.rpartition(".")
        getattr(importlib.import_module(mod), fn)()
    if _agent is not None:
        return
    try:
        _agent = Agent(_job())
        _agent.join_active()
    except Exception as e:  # noqa: BLE001 - the user's actor must live
        print(f"profmagic: this Ray worker (pid {os.getpid()}) is not recorded: {type(e).__name__}: {e}",
              file=sys.stderr, flush=True)


# -- node side: one task per node -----------------------------------------------------------------
_NAME_RE = re.compile(r"(\d{1,10})-([0-9a-f]{16})")


class NotOurs(PermissionError):
    """A socket named like an agent, held by another uid or another process than its name says."""


def _agents(job: str) -> list[tuple[int, str, int]]:
    """(pid, socket name, inode) of every socket named like an agent of this job on this node (from
    /proc/net/unix; who holds each is checked before connecting, ``_holds``)."""
    prefix = "@" + SOCKET_PREFIX + job + "-"
    out = set()
    try:
        with open("/proc/net/unix") as f:
            for line in f:
                parts = line.split()
                path = parts[7] if len(parts) >= 8 else ""
                if path.startswith(prefix) and (m := _NAME_RE.fullmatch(path[len(prefix):])):
                    out.add((int(m.group(1)), path[1:], int(parts[6])))
    except (OSError, ValueError):
        pass
    return sorted(out)


def _holds(pid: int, inode: int, cache: dict) -> bool:
    """Whether process ``pid``, one of this uid, holds socket ``inode``: a name that another user
    bound (a squatter, a fake agent) is passed over without connecting, so it cannot make us wait."""
    if pid not in cache:
        held = set()
        try:
            if os.stat(f"/proc/{pid}").st_uid == os.geteuid():
                for fd in os.listdir(f"/proc/{pid}/fd"):
                    try:
                        link = os.readlink(f"/proc/{pid}/fd/{fd}")
                    except OSError:
                        continue
                    if link.startswith("socket:["):
                        held.add(link[8:-1])
        except OSError:
            pass
        cache[pid] = held
    return str(inode) in cache[pid]


def _ask(name: str, pid: int, req: dict, timeout: float) -> bytes:
    """Send ``req`` to the agent at ``name`` once the peer is checked (this uid, the pid of the
    name; NotOurs otherwise, before anything is sent), and its bounded answer by ``timeout``."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
        c.settimeout(timeout)
        deadline = time.monotonic() + timeout
        c.connect("\0" + name)
        ppid, uid = channel.peer(c)
        if uid != os.geteuid() or ppid != pid:
            raise NotOurs(f"{name} is held by pid {ppid}, uid {uid}")
        channel.send(c, json.dumps(req).encode())
        return channel.recv(c, channel.MAX_PAYLOAD + channel.MAX_REQUEST, deadline)


def _each_agent(job: str, req: dict, timeout: float):
    """(pid, answer bytes or the exception) for every agent of ours on this node; sockets of other
    users or of squatters are passed over."""
    cache: dict = {}
    for pid, name, inode in _agents(job):
        try:
            if _agent is not None and name == _agent.name:   # this task's own worker
                yield pid, _agent.handle(req)
            elif _holds(pid, inode, cache):
                yield pid, _ask(name, pid, req, timeout)
        except NotOurs:
            continue
        except Exception as e:  # noqa: BLE001 - named in the results
            yield pid, e


def node_start(session: str, secret: str, opts: dict) -> dict:
    """On one node: mark the recording active (ACTIVE, with the secret, in the session's private
    folder) and start every worker of the job there."""
    job = _job()
    timeout = float(opts.get("timeout", ANSWER_TIMEOUT))
    opts = channel.options({**{k: opts[k] for k in ("rate", "threads", "max_samples", "max_seconds")},
                            "secret": secret})
    d = channel.private_dir(session_dir(job, session))
    channel.write_new(os.path.join(d, ACTIVE), json.dumps(opts).encode())
    out = {}
    for pid, r in _each_agent(job, {"op": "start", "session": session, "secret": secret}, timeout):
        if isinstance(r, BaseException):
            out[pid] = f"{type(r).__name__}: {r}"
        else:
            try:
                out[pid] = channel.loads(r).get("status", "?")
            except (ValueError, AttributeError) as e:
                out[pid] = f"{type(e).__name__}: {e}"
    return {"node": _node_id(), "started": out}


def node_stop(session: str, secret: str, timeout: float) -> dict:
    """On one node: stop every worker of the job, collect payloads and dead workers' spill files,
    remove the session's folder (only a private folder of ours is read or removed)."""
    job = _job()
    d = session_dir(job, session)
    try:
        channel.check_private(d)
        mine = True
    except OSError:
        mine = False
    if mine:
        try:
            os.unlink(os.path.join(d, ACTIVE))
        except FileNotFoundError:
            pass
    results = []
    answered = set()
    for pid, raw in _each_agent(job, {"op": "stop", "session": session, "secret": secret}, timeout):
        answered.add(pid)
        if isinstance(raw, BaseException):
            results.append({"pid": pid, "status": "unreachable", "error": f"{type(raw).__name__}: {raw}"})
            continue
        head, _, payload = raw.partition(b"\n")
        try:
            h = channel.loads(head)
            status = h.get("status")
        except (ValueError, AttributeError) as e:
            results.append({"pid": pid, "status": "error", "error": f"an unreadable answer ({e})"})
            continue
        if status == "ok":
            results.append({"pid": pid, "status": "ok", "payload": payload, "info": h.get("info") or {}})
        elif status in ("error", "refused"):
            results.append({"pid": pid, "status": "error", "error": h.get("error") or status})
    try:
        names = os.listdir(d) if mine else []
    except FileNotFoundError:     # the last worker to stop removed it
        names = []
    for n in names:
        m = re.fullmatch(r"(\d{1,10})\.json\.z", n)
        if not m:
            continue
        pid = int(m.group(1))
        if pid in answered and _alive(pid):   # an unreachable worker may still write: leave it be
            continue
        try:
            payload = channel.read_own(os.path.join(d, n), channel.MAX_PAYLOAD)
        except (OSError, ValueError):
            continue
        results.append({"pid": pid, "status": "ended", "payload": payload,
                        "error": "the worker process ended during the recording; its samples up to its last "
                                 "spill are kept"})
    if mine and not any(r["status"] == "unreachable" for r in results):
        shutil.rmtree(d, ignore_errors=True)
    return {"node": _node_id(), "results": results}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def node_leftovers(session: str | None = None) -> dict:
    """What a recording may leave on a node: its folders, and per worker whether it still samples
    and its profmagic threads (the agent's own, idle in accept(), stays for the worker's life)."""
    job = _job()
    leftover = sorted(os.path.basename(f) for f in _session_dirs(job).values())
    sampling, threads = {}, {}
    for pid, r in _each_agent(job, {"op": "status", "secret": None}, 5.0):
        try:
            if isinstance(r, BaseException):
                raise r
            r = channel.loads(r)
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
        self.id = channel.new_session()
        self.secret = channel.new_secret()      # handed to the node tasks as an argument, never in a file of theirs
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
        self.warning: str | None = None

    def start(self) -> None:
        self.open = True
        self.started = _on_each_node(node_start, self.id, self.secret, self.opts, timeout=self.node_timeout)

    def stop(self) -> list[dict]:
        got = _on_each_node(node_stop, self.id, self.secret, self.timeout, timeout=self.node_timeout)
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
            _on_each_node(node_stop, self.id, self.secret, self.timeout, timeout=self.node_timeout)


def _payload_info(payload: bytes) -> dict:
    from .assemble import decode
    try:
        return decode(payload).get("info") or {}
    except ValueError:
        return {}


def leftovers() -> dict:
    """Per node: session folders left and whether any worker still samples (for tests)."""
    return _on_each_node(node_leftovers, timeout=60.0)

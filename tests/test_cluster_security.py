"""Other local users against a cluster recording (issue 28): user ``nobody`` (``setpriv``) attacks a
real local Ray job's worker sockets and a real Dask cluster's profmagic calls, while root records.

Checked: nobody gets no byte from any profmagic socket; its symlink and absolute-session ``start``s
change nothing; an ACTIVE file it plants is ignored; sockets it squats (future pids, fake agents,
connections held open) neither stop nor slow a recording nor inject a rank; a same-uid request
without the secret is refused, an 800 MB flood refused by its length prefix; a zlib bomb payload is
refused with the limit named, the driver's memory bounded; on Dask, calls without the secret get
nothing, and a client closed mid-recording leaves no plugin, thread or spill folder, even after
``client.restart()``.
"""
from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import sysconfig
import tempfile
import textwrap
import time

import pytest

try:
    import ray
except ImportError:   # the requires("ray") mark says how to install it
    ray = None
try:
    import distributed
except ImportError:
    distributed = None

import cluster_work as work  # noqa: E402
import tools  # noqa: E402
from faults.conftest import documented  # noqa: E402
from profmagic import cluster  # noqa: E402
from profmagic.cluster import channel  # noqa: E402
from profmagic.cluster import tasks as tasks_view  # noqa: E402

pytestmark = [pytest.mark.timed, pytest.mark.timeout(300), pytest.mark.requires("setpriv", "root")]
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SITE = sysconfig.get_paths()["purelib"]      # Dask for nobody's Python


@pytest.fixture(scope="module")
def nobody_python():
    """A Python of this version that user nobody can run (the venv's may sit under /root)."""
    want = repr(tuple(sys.version_info[:2]))
    for py in (os.path.realpath(sys.executable), f"/usr/bin/python{sys.version_info[0]}.{sys.version_info[1]}"):
        r = subprocess.run(NOBODY + [py, "-c", "import sys; print(tuple(sys.version_info[:2]))"],
                           capture_output=True, text=True, timeout=60)
        if r.returncode == 0 and r.stdout.strip() == want:
            return py
    tools.lacking(f"needs a Python {want} that user nobody can run (tried {sys.executable} and /usr/bin)")


def as_nobody(py: str, code: str, *args, timeout: float = 120, background: bool = False):
    """Run ``code`` as user nobody (uid 65534, no groups); its stdout as JSON (or the Popen)."""
    cmd = NOBODY + [py, "-c", textwrap.dedent(code), *map(str, args)]
    if background:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd="/")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


# -- Ray ----------------------------------------------------------------------------------------
# As nobody: every profmagic socket, each asked status, start (nobody's folder holding symlinks to a
# root file; an absolute path), stop, and flooded. What came back, per socket and request.
KNOCK = r'''
import json, os, socket, struct, sys
session, absolute = sys.argv[1], sys.argv[2]
names = [p[7] for p in (l.split() for l in open("/proc/net/unix")) if len(p) >= 8 and p[7].startswith("@profmagic-ray-")]
reqs = [{"op": "status"}, {"op": "start", "session": session, "secret": "0" * 32},
        {"op": "start", "session": absolute, "secret": "0" * 32}, {"op": "stop", "session": session}]
out = {}
for n in names:
    for req in reqs + ["flood"]:
        got, err = b"", None
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
                c.settimeout(5)
                c.connect("\0" + n[1:])
                data = json.dumps(req).encode() if req != "flood" else b"x" * (1 << 20)
                try:
                    c.sendall(struct.pack("!Q", len(data) if req != "flood" else 800 << 20) + data)
                except OSError as e:
                    err = type(e).__name__
                while True:
                    chunk = c.recv(65536)
                    if not chunk:
                        break
                    got += chunk
        except OSError as e:
            err = err or type(e).__name__
        out.setdefault(n, []).append([len(got), err])
print(json.dumps(out))
'''

# As nobody: a folder named like a session of the job, with symlinks to a root file where a worker
# would write, and an ACTIVE asking for rate 0 (the next actor died of it) or 10000.
PLANT = r'''
import json, os, sys
job, target, tmp = sys.argv[1], sys.argv[2], sys.argv[4]
made = []
for i, rate in enumerate((0, 10000)):
    for d in (f"{tmp}/profmagic-ray.{job}.{i:012x}", f"{tmp}/profmagic-ray-{job}/{i:012x}"):
        os.makedirs(d, exist_ok=True)
        os.chmod(d, 0o777 if i else 0o700)
        with open(os.path.join(d, "ACTIVE"), "w") as f:
            json.dump({"rate": rate, "threads": "all", "max_samples": 100, "max_seconds": 60,
                       "secret": "0" * 32}, f)
        for pid in range(int(sys.argv[3]), int(sys.argv[3]) + 200):
            for n in (f"{pid}.json.z", f"{pid}.json.z.tmp"):
                try:
                    os.symlink(target, os.path.join(d, n))
                except FileExistsError:
                    pass
        made.append(d)
print(json.dumps(made))
'''

# As nobody, left running: names of the job's agents for the next pids and for the live workers'
# pids (old and new form), listening without accepting, or answering at once with a fake rank;
# and connections to every real agent held open, sending one byte.
SQUAT = r'''
import json, os, resource, secrets, socket, struct, sys, threading, time, zlib
resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
job, pids = sys.argv[1], [int(p) for p in sys.argv[2].split(",")]
last = int(open("/proc/sys/kernel/ns_last_pid").read())
head = json.dumps({"v": 1, "pid": 4242, "host": "evil", "info": {}, "rate": 100, "t0": 0, "duration": 1,
                   "frames": [["INJECTED", "evil.py", 1]], "threads": [[1, "evil"]], "tasks": ["evil"],
                   "stacks": [[0, 0, [0], 1000, 10.0, 10.0]], "n_samples": 0, "byteorder": "little"}).encode()
fake = zlib.compress(b"PMW1" + struct.pack("!I", len(head)) + head)
answer = json.dumps({"status": "ok", "pid": 4242, "info": {"actor": "Evil"}}).encode() + b"\n" + fake
socks = []
def serve(s):
    while True:
        try:
            c, _ = s.accept()
            c.sendall(struct.pack("!Q", len(answer)) + answer)
            socks.append(c)
        except OSError:
            return
for i, pid in enumerate(list(range(last + 1, last + 400)) + pids):
    for name in (f"profmagic-ray-{job}-{pid}", f"profmagic-ray-{job}-{pid}-{secrets.token_hex(8)}"):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.bind("\0" + name)
        except OSError:
            continue
        s.listen(0 if i % 2 else 16)
        socks.append(s)
        if not i % 2:
            threading.Thread(target=serve, args=(s,), daemon=True).start()
real = [p[7] for p in (l.split() for l in open("/proc/net/unix")) if len(p) >= 8 and p[7].startswith("@profmagic-ray-")]
for n in real:
    try:
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.connect("\0" + n[1:])
        c.send(b"\0")
        socks.append(c)
    except OSError:
        pass
print(json.dumps({"squatted": len(socks), "from": last + 1}), flush=True)
time.sleep(600)
'''


class _Actor:
    def pid(self):
        return os.getpid()

    def spin(self, seconds):
        return work.spin(0, seconds)


Actor = ray.remote(_Actor) if ray is not None else None


@pytest.fixture(scope="module")
def ray_job():
    with work.local_ray():
        ray.get([ray.remote(work.nap).remote(i, 0.01) for i in range(2)])
        yield {"spin": ray.remote(work.spin), "job": ray.get_runtime_context().get_job_id()}


def agents() -> dict[int, str]:
    """pid -> socket name of this job's agents here (the real ones: held by a process of root)."""
    from profmagic.cluster import ray as engine
    return {pid: name for pid, name, inode in engine._agents(engine_job()) if engine._holds(pid, inode, {})}


def engine_job() -> str:
    return ray.get_runtime_context().get_job_id()


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


def ask(name: str, req, length: int | None = None, extra: bytes = b"") -> bytes:
    """One request from this process (root: the agents' own uid) over the real socket; the answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
        c.settimeout(10)
        c.connect("\0" + name)
        data = json.dumps(req).encode() if req is not None else extra
        try:
            c.sendall(struct.pack("!Q", len(data) if length is None else length) + data)
        except (BrokenPipeError, ConnectionResetError):   # the agent stopped reading: its answer is queued
            pass
        return channel.recv(c, 1 << 20, time.monotonic() + 10)


@pytest.mark.requires("ray")
def test_nobody_gets_no_answer_and_its_attacks_change_nothing(ray_job, nobody_python, tmp_path):
    a = Actor.remote()
    actor_pid = ray.get(a.pid.remote())
    mine = agents()
    assert actor_pid in mine and len(mine) >= 2, mine
    target = tmp_path / "root-only"
    target.write_bytes(b"root's data\n")
    target.chmod(0o600)
    absolute = os.path.join(tempfile.gettempdir(), f"profmagic-abs-{os.getpid()}", "s")
    planted = as_nobody(nobody_python, PLANT, ray_job["job"], target, min(mine), tempfile.gettempdir())
    try:
        knocked = as_nobody(nobody_python, KNOCK, f"{0:012x}", absolute)
        # Every real agent was knocked at five times; none sent one byte, none held nobody (no timeout).
        assert {n[1:] for n in knocked} >= set(mine.values()), (knocked, mine)
        for name in mine.values():
            assert [got for got, _ in knocked["@" + name]] == [0] * 5, knocked["@" + name]
            assert all(err != "TimeoutError" for _, err in knocked["@" + name]), knocked["@" + name]
        # Root itself (the agents' uid) without the secret: refused, or an error naming what is wrong.
        name = mine[actor_pid]
        assert json.loads(ask(name, {"op": "start", "session": f"{0:012x}", "secret": "0" * 32})) == \
            {"status": "error", "error": f"PermissionError: {planted[0]} is not a private folder of uid 0"}
        assert json.loads(ask(name, {"op": "start", "session": absolute, "secret": "0" * 32}))["error"] == \
            "ValueError: not a profmagic session name"
        assert json.loads(ask(name, {"op": "stop", "session": f"{0:012x}", "secret": None}))["status"] == \
            "not started"
        # A flood from root is refused by its length prefix: the worker reads none of it.
        before = rss(actor_pid)
        assert json.loads(ask(name, None, length=800 << 20, extra=b"x" * (1 << 20)))["error"] == \
            f"TooLarge: a message of {800 << 20} bytes, over the limit of {channel.MAX_REQUEST}"
        assert rss(actor_pid) - before < 20 << 20
        # A new actor ignores nobody's ACTIVE files (rate 0 killed it, 10000 made it spin): it lives, idle.
        b = Actor.remote()
        new_pid = ray.get(b.pid.remote(), timeout=120)
        from profmagic.cluster import ray as engine
        (node,) = engine.leftovers().values()
        assert node["sampling"][new_pid] is False and node["sampling"][actor_pid] is False, node
        # A recording runs as if nothing happened, and the root file and the absolute path are untouched.
        rec = cluster.Recording("ray")
        rec.start()
        try:
            ray.get(b.spin.remote(0.3))
            p = rec.stop()
        finally:
            rec.close()
        r = tasks_view.ranks(p)
        lab = next(lab for lab in r.index if p.meta["processes"][lab]["pid"] == new_pid)
        assert r.at[lab, "samples"] > 0 and r.at[lab, "status"] == "ok", r
        ray.kill(b)
    finally:
        subprocess.run(["rm", "-rf", *planted, os.path.dirname(planted[1])], check=False)
    assert target.read_bytes() == b"root's data\n" and oct(target.stat().st_mode & 0o777) == "0o600"
    assert not os.path.exists(os.path.dirname(absolute))
    ray.kill(a)


@pytest.mark.requires("ray")
def test_squatted_names_and_fake_agents_do_not_stop_slow_or_join_a_recording(ray_job, nobody_python):
    a = Actor.remote()
    old = ray.get(a.pid.remote(), timeout=120)
    pids = sorted(agents())
    assert old in pids
    squat = as_nobody(nobody_python, SQUAT, ray_job["job"], ",".join(map(str, pids)), background=True)
    try:
        ready = json.loads(squat.stdout.readline())
        assert ready["squatted"] > 800, ready
        # Fake agents hold the live workers' pids in both name forms; the next 400 pids' names are
        # taken too (other processes on the machine may use those pids first: not asserted). A worker
        # started now binds a fresh name.
        b = Actor.remote()
        new = ray.get(b.pid.remote(), timeout=120)
        t0 = time.monotonic()
        rec = cluster.Recording("ray")
        rec.start()
        try:
            ray.get([a.spin.remote(0.3), b.spin.remote(0.3)])
            p = rec.stop()
        finally:
            rec.close()
        took = time.monotonic() - t0
        assert took < 15, took          # was 55 s with squatted names
        r = tasks_view.ranks(p)
        assert (r["status"] == "ok").all(), r
        got = {p.meta["processes"][lab]["pid"]: r.at[lab, "samples"] for lab in r.index}
        assert got[old] > 0 and got[new] > 0 and 4242 not in got and set(got) <= set(agents()), (got, agents())
        assert "INJECTED" not in set(p.frames["name"]) and "Evil" not in " ".join(r.index)
    finally:
        squat.kill()
        squat.wait()
    ray.kill(a)
    ray.kill(b)


def test_a_zlib_bomb_payload_is_refused_with_the_limit_and_the_driver_stays_small():
    code = textwrap.dedent('''
        import resource, zlib
        from profmagic.cluster.assemble import assemble, decode
        from profmagic.errors import ProfileFormatError
        z = zlib.compressobj(9)
        chunk = bytes(1 << 20)
        bomb = b"".join([z.compress(chunk) for _ in range(1024)] + [z.flush()])   # 1 GiB of zeros
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        for call in (lambda: decode(bomb, source="ray worker 7"),
                     lambda: assemble([{"status": "ok", "payload": bomb, "name": "7"}], engine="ray")):
            try:
                call()
            except ProfileFormatError as e:
                print(e)
        print(len(bomb), (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)
    ''')
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    lines = out.stdout.strip().split("\n")
    assert len(lines) == 3, out.stdout + out.stderr
    size, grew = map(int, lines[2].split())
    assert size < 2 << 20
    cap = channel.MAX_RATIO * size
    assert lines[0] == (f"ray worker 7: byte offset 0: the payload expands beyond {cap} bytes from {size} "
                        f"compressed (the limit: 100x its compressed size, at least 4 MiB, at most 512 MiB): refused")
    assert lines[1].startswith("ray worker 7: byte offset 0: the payload expands beyond")
    documented("cluster-payload-too-large", lines[0])
    assert grew < 1.3 * cap, grew       # decompressed 1 MiB at a time up to the cap: the 1 GiB is never made (was 2.2 GB)


# -- Dask ---------------------------------------------------------------------------------------
# As nobody, a client of the cluster: profmagic's calls on the workers and nannies without the secret.
DASK_CALLS = r'''
import json, sys
sys.path[:0] = [sys.argv[3], sys.argv[4]]
import distributed
from profmagic.cluster import dask as engine
with distributed.Client(sys.argv[1], timeout=60) as c:
    out = {"stop": c.run(engine._stop_here, sys.argv[2], "0" * 32),
           "stop_no_secret": c.run(engine._stop_here, sys.argv[2], None),
           "spill": c.run(engine._collect_spill, sys.argv[2], "0" * 32),
           "spill_nanny": c.run(engine._collect_spill, sys.argv[2], "0" * 32, nanny=True)}
print(json.dumps(out, default=repr))
'''


client = pytest.fixture(scope="module", name="client")(work.local_dask)


def leftovers(client, session) -> dict:
    from profmagic.cluster import dask as engine
    return client.run(lambda dask_worker: {**engine._leftovers(session),
                                           "plugins": [n for n in dask_worker.plugins if n.startswith("profmagic-")]})


@pytest.fixture(scope="module")
def nobody_imports_dask(nobody_python):
    """Nobody's Python imports Dask and profmagic from this checkout and its venv (not so when the
    checkout sits in a folder only root can read: .ci/run opens its clone's folder for this)."""
    r = subprocess.run(NOBODY + [nobody_python, "-c", "import sys; sys.path[:0] = sys.argv[1:]; "
                                 "import distributed, profmagic.cluster.dask", ROOT, SITE],
                       capture_output=True, text=True, timeout=120, cwd="/")
    if r.returncode:
        tools.lacking(f"user nobody cannot import Dask and profmagic from {ROOT} and {SITE} (a folder on the "
                      f"way is closed to other users): {r.stderr.strip().splitlines()[-1]}")
    return nobody_python


@pytest.mark.requires("dask")
def test_dask_calls_without_the_secret_get_nothing(client, nobody_imports_dask):
    nobody_python = nobody_imports_dask
    rec = cluster.Recording(client)
    rec.start()
    try:
        client.gather([client.submit(work.spin, i, 0.2, pure=False) for i in range(2)])
        got = as_nobody(nobody_python, DASK_CALLS, client.scheduler.address, rec.session.id, ROOT, SITE)
        p = rec.stop()
    finally:
        rec.close()
    assert list(got["stop"].values()) == [{"status": "refused"}] * 2, got
    assert list(got["stop_no_secret"].values()) == [{"status": "refused"}] * 2, got
    assert list(got["spill"].values()) == [{}, {}] and list(got["spill_nanny"].values()) == [{}, {}], got
    r = tasks_view.ranks(p)       # the owner still gets every worker's samples
    assert len(r) == 2 and (r["status"] == "ok").all() and (r["samples"] > 0).all(), r


@pytest.mark.requires("dask")
def test_a_client_closed_mid_recording_stops_cleanly_and_restart_brings_nothing_back(client, capfd):
    other = distributed.Client(client.scheduler.address)
    rec = cluster.Recording(other)
    rec.start()
    client.gather([client.submit(work.spin, i, 0.2, pure=False) for i in range(2)])
    other.close()
    p = rec.stop()                                   # was AttributeError: 'NoneType' ... 'identity'
    rec.close()
    why = "not collected: the Dask client was closed during the recording (its status: closed)"
    r = tasks_view.ranks(p)
    assert list(r["status"]) == ["error", "error"] and list(r["error"]) == [why, why], r
    (warning,) = p.meta["warnings"]
    documented("cluster-client-closed", warning)
    assert capfd.readouterr().err.count(warning) == 1
    deadline = time.monotonic() + 20
    while any(w["plugins"] or w["threads"] for w in leftovers(client, rec.session.id).values()) \
            and time.monotonic() < deadline:
        time.sleep(0.1)
    client.restart()          # new workers: the scheduler must not hand them profmagic's plugin
    client.wait_for_workers(2)
    time.sleep(1.5)           # a sampler would have spilled (every second) by now
    for addr, w in leftovers(client, rec.session.id).items():
        assert w["plugins"] == [] and w["threads"] == [] and w["spill_dirs"] == [] and w["sessions"] == [], (addr, w)
    assert not [n for n in os.listdir(tempfile.gettempdir()) if n.startswith(f"profmagic-cluster.{rec.session.id}")]


@pytest.mark.requires("dask")
def test_a_client_restarted_mid_recording_gives_every_worker_and_leaves_nothing(client):
    old = client.run(work.pid)
    rec = cluster.Recording(client)
    rec.start()
    try:
        client.gather([client.submit(work.spin, i, 0.3, pure=False) for i in range(2)])
        time.sleep(1.2)                 # each worker has spilled once
        client.restart()                # kills the workers: their spill files are what is left of them
        client.wait_for_workers(2)
        client.gather([client.submit(work.spin, i, 0.3, pure=False) for i in range(2)])
        p = rec.stop()
    finally:
        rec.close()
    new = client.run(work.pid)
    r = tasks_view.ranks(p)
    by_pid = {p.meta["processes"][lab]["pid"]: lab for lab in r.index}
    assert set(by_pid) == set(old.values()) | set(new.values()), (by_pid, old, new)
    for pid in old.values():            # ended, with what they spilled: the spin before the restart
        assert r.at[by_pid[pid], "status"] == "ended" and r.at[by_pid[pid], "tasks_wall"] > 0.1, r
    for pid in new.values():            # started by the plugin as they joined, collected at stop
        assert r.at[by_pid[pid], "status"] == "ok" and r.at[by_pid[pid], "tasks_wall"] > 0.1, r
    for addr, w in leftovers(client, rec.session.id).items():
        assert w["plugins"] == [] and w["threads"] == [] and w["spill_dirs"] == [] and w["sessions"] == [], (addr, w)
    assert not [n for n in os.listdir(tempfile.gettempdir()) if n.startswith(f"profmagic-cluster.{rec.session.id}")]

"""The in-worker sampler and its payload, in this process (issue 17): no engine needed.

A thread runs known work under a task label; the sampler's rows, thinning and payload are checked
against it, and damaged payloads raise ProfileFormatError naming where.
"""
from __future__ import annotations

import threading
import time
import zlib

import numpy as np
import pytest

import cluster_work as work
from profmagic.cluster.assemble import assemble, decode
from profmagic.cluster.tasks import tasks
from profmagic.cluster.worker import WorkerSampler, profmagic_threads
from profmagic.errors import ProfileFormatError

pytestmark = pytest.mark.timed


def run_labelled(seconds=1.0, **kw):
    """A thread that spins 0.2 s then sleeps 0.2 s, labelled as tasks ``spin-…``/``nap-…`` like
    Dask's keys; recorded by a WorkerSampler with task_of() reading the labels."""
    running, stop, results = {}, threading.Event(), []

    def loop():
        me = threading.get_ident()
        i = 0
        while not stop.is_set():
            running[me] = f"spin-{i:08x}"
            results.append(work.spin(i, 0.2))
            running[me] = f"nap-{i:08x}"
            results.append(work.nap(i, 0.2))
            running.pop(me, None)
            i += 1
    s = WorkerSampler(100.0, task_of=lambda: dict(running), prefix=lambda k: k.split("-")[0], **kw)
    s.start()
    th = threading.Thread(target=loop, name="task-thread")
    th.start()
    time.sleep(seconds)
    stop.set()
    th.join()
    data = s.stop()
    return s, data, results


def test_rows_hold_every_sample_and_the_list_is_thinned_evenly():
    s, data, results = run_labelled(1.6, max_samples=40)
    doc = decode(data)
    n_rows = sum(r[3] for r in doc["stacks"])
    assert doc["n_samples"] < 40 <= n_rows and doc["stride"] >= 2
    assert doc["n_samples"] == pytest.approx(n_rows / doc["stride"], abs=doc["stride"] + 1)
    times = doc["samples"]["time"]
    assert (times[1:] >= times[:-1]).all() and times[-1] > 1.0      # spread over the run, in order
    assert doc["task_keys"] == {k: v["n"] for k, v in work.truth(results).items()}   # every key seen
    assert profmagic_threads() == []
    p = assemble([{"status": "ok", "payload": data, "name": "w0", "pid": 1}], engine="test")
    t = tasks(p)
    true = work.truth(results)
    assert abs(t.at["spin", "cpu"] - true["spin"]["cpu"]) <= 0.1 * true["spin"]["cpu"] + 0.02
    assert abs(t.at["nap", "wall"] - true["nap"]["wall"]) <= 0.1 * true["nap"]["wall"] + 0.02
    assert int(p.stacks["samples"].sum()) == n_rows and len(p.samples) == doc["n_samples"]


def test_thinning_keeps_whole_passes_of_every_thread():
    s, data, _ = run_labelled(1.0, threads="all", max_samples=60)
    doc = decode(data)
    threads = {doc["stacks"][r][0] for r in doc["samples"]["stack"]}
    assert doc["stride"] >= 2 and len(threads) >= 2             # not one thread's samples only
    t = doc["samples"]["time"]
    per_pass = np.unique(t, return_counts=True)[1]
    assert per_pass.min() >= 2                                   # each kept pass whole


def test_threads_tasks_keeps_only_task_samples_and_counts_the_rest():
    s, data, _ = run_labelled(0.8)
    doc = decode(data)
    names = {doc["threads"][r[0]][1] for r in doc["stacks"]}
    assert names == {"task-thread"} and all(r[1] >= 0 for r in doc["stacks"])
    s2, data2, _ = run_labelled(0.8, threads="all")
    doc2 = decode(data2)
    assert {"MainThread", "task-thread"} <= {doc2["threads"][r[0]][1] for r in doc2["stacks"]}
    assert any(r[1] == -1 for r in doc2["stacks"])


def test_spill_file_is_written_while_recording_and_removed_at_stop(tmp_path):
    spill = tmp_path / "session" / "w-1.json.z"
    s = WorkerSampler(100.0, threads="all", spill=str(spill), flush=0.2)
    s.start()
    time.sleep(0.7)
    doc = decode(spill.read_bytes())      # what a killed worker leaves: a complete payload
    assert doc["passes"] >= 5 and doc["ended"] is None
    s.stop()
    assert not spill.exists() and not spill.parent.exists()


def test_damaged_payloads_name_what_was_expected():
    _, data, _ = run_labelled(0.3)
    raw = zlib.decompress(data)
    with pytest.raises(ProfileFormatError, match=r"w7: byte offset 0: expected a zlib-compressed worker payload"):
        decode(b"not a payload", source="w7")
    with pytest.raises(ProfileFormatError, match=r"expected a worker payload starting with b'PMW1'"):
        decode(zlib.compress(b"{}"), source="w7")
    with pytest.raises(ProfileFormatError, match=r"w7: byte offset \d+: expected \d+ cpu values, the payload ends"):
        decode(zlib.compress(raw[:-30]), source="w7")
    bad = raw.replace(b'"stacks":[[', b'"stacks":[[999,', 1)
    bad = bad[:4] + (int.from_bytes(raw[4:8], "big") + 4).to_bytes(4, "big") + bad[8:]
    with pytest.raises(ProfileFormatError, match=r"test worker 7: stacks: expected the worker payload's stacks"):
        assemble([{"status": "ok", "payload": zlib.compress(bad), "name": "7"}], engine="test").stacks


def test_sub_profile_keeps_one_task_with_its_samples():
    from profmagic.cluster.tasks import sub_profile
    _, data, results = run_labelled(0.8)
    p = assemble([{"status": "ok", "payload": data, "name": "w0", "pid": 1}], engine="test")
    nap = sub_profile(p, task="nap")
    assert set(nap.stacks["task"]) == {"nap"} and nap.total("wall") == pytest.approx(tasks(p).at["nap", "wall"])
    assert len(nap.samples) == int((p.samples["stack"].map(p.stacks["task"]) == "nap").sum())
    assert (nap.samples["stack"] < len(nap.stacks)).all()
    assert set(nap.frames.loc[[s[-1] for s in nap.stacks["stack"]], "name"]) == {"nap.<locals>.<lambda>"}   # in sleep()


def test_the_worker_side_imports_no_pandas():
    # What a Ray worker imports at every start (the hook) and a Dask worker at its first recording.
    import subprocess
    import sys
    code = ("import sys\nimport profmagic.cluster.ray\n"
            "print(sorted(m for m in ('pandas', 'numpy', 'profmagic.model') if m in sys.modules))\n"
            "import profmagic.cluster.dask\nprint('pandas' in sys.modules, 'profmagic.model' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split("\n")[:2] == ["[]", "False False"], out.stdout + out.stderr


def test_options_from_a_file_or_request_are_checked_field_by_field():
    from profmagic.cluster import channel
    from profmagic.validate import MAX_RATE
    good = {"rate": 100, "threads": "tasks", "max_samples": 1000, "max_seconds": 60, "secret": "ab" * 16}
    assert channel.options(good) == {**good, "rate": 100.0, "max_seconds": 60.0}
    assert channel.options({**good, "rate": MAX_RATE})["rate"] == MAX_RATE
    for bad, what in (({"rate": 0}, "rate must be above 0"), ({"rate": MAX_RATE * 2}, "rate must be above 0"),
                      ({"rate": float("nan")}, "rate"), ({"rate": True}, "rate"), ({"rate": "100"}, "rate"),
                      ({"threads": "some"}, "threads must be one of"), ({"max_samples": 10 ** 9}, "max_samples"),
                      ({"max_samples": 1.5}, "max_samples"), ({"max_seconds": float("inf")}, "max_seconds"),
                      ({"secret": "../x"}, "secret"), ({"secret": None}, "secret")):
        with pytest.raises(ValueError, match=what):
            channel.options({**good, **bad})
    for s in ("/tmp/x", "../abcdefabcdef", "abcdefabcdef/..", "ABCDEFABCDEF", 12, None):
        with pytest.raises(ValueError, match="not a profmagic session name"):
            channel.session_name(s)
    assert channel.loads(b'{"a": [1, {"b": "[[[[[[[[[[[["}]}') == {"a": [1, {"b": "[[[[[[[[[[[["}]}
    with pytest.raises(ValueError, match="nested deeper than 8"):
        channel.loads(b"[" * 9 + b"]" * 9)
    with pytest.raises(ValueError, match=f"over {channel.MAX_REQUEST} bytes"):
        channel.loads(b" " * (channel.MAX_REQUEST + 1))


def test_private_folders_and_new_files_are_never_followed(tmp_path):
    import os
    from profmagic.cluster import channel
    target = tmp_path / "target"
    target.write_bytes(b"keep")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    (tmp_path / "real").mkdir(mode=0o700)
    with pytest.raises(PermissionError, match="is not a private folder of uid"):
        channel.private_dir(str(tmp_path / "link"))             # a symlink to a private folder: not taken
    (tmp_path / "open").mkdir()
    os.chmod(tmp_path / "open", 0o755)
    with pytest.raises(PermissionError, match="is not a private folder of uid"):
        channel.private_dir(str(tmp_path / "open"))
    d = channel.private_dir(str(tmp_path / "new"))
    assert os.stat(d).st_mode & 0o777 == 0o700
    os.symlink(target, os.path.join(d, "f"))
    channel.write_new(os.path.join(d, "f"), b"data")            # replaces the link, never writes through it
    assert target.read_bytes() == b"keep" and open(os.path.join(d, "f"), "rb").read() == b"data"
    assert sorted(os.listdir(d)) == ["f"]
    os.symlink(target, os.path.join(d, "g"))
    with pytest.raises(OSError):
        channel.read_own(os.path.join(d, "g"), 100)             # not followed either
    with pytest.raises(ValueError, match="is over 2 bytes"):
        channel.read_own(os.path.join(d, "f"), 2)


def test_a_failed_ray_hook_is_one_line_and_the_worker_lives():
    # A real fault: no file descriptor left, so the agent's socket cannot be made.
    import subprocess
    import sys
    from faults.conftest import documented
    code = ("import os, resource\nfrom profmagic.cluster import ray\n"
            "n = len(os.listdir('/proc/self/fd')) - 1\n"
            "resource.setrlimit(resource.RLIMIT_NOFILE, (n, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))\n"
            "ray.setup_hook()\nprint('alive', ray._agent)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout == "alive None\n", out.stderr
    assert out.stderr.count("\n") == 1, out.stderr
    documented("cluster-worker-not-recorded", out.stderr)
    assert "OSError: [Errno 24] Too many open files" in out.stderr


def test_a_returned_functions_locals_are_freed_at_once():
    """The worker sampler's tick once kept sys._current_frames()' dict in a cycle with its own frame,
    so each sampled frame, and the locals of a function that had since returned, lived until gc ran."""
    import gc
    import weakref

    class Big:
        pass

    def hold(seconds):
        big = Big()
        ref = weakref.ref(big)
        time.sleep(seconds)   # sampled in here
        return ref

    s = WorkerSampler(1000.0, threads="all")
    gc.disable()   # no collection may free what a cycle keeps
    try:
        s.start()
        alive = [hold(0.03)() is not None for _ in range(10)]
        data = s.stop()
    finally:
        gc.enable()
    assert alive == [False] * 10
    doc = decode(data)
    names = {f[0].rsplit(".", 1)[-1] for f in doc["frames"]}
    assert "hold" in names and doc["passes"] >= 100

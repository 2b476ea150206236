"""The py-spy backend on its own: attach to a real Python child, stop, read, clean up."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from profmagic.backends import pyspy
from profmagic.backends.base import Options
from profmagic.errors import ProfilerError

pytestmark = pytest.mark.timeout(120)

WORKLOAD = r'''
import sys, time
def busy(t=0.3):
    end = time.thread_time() + t   # 0.3 s of CPU, however loaded the machine is
    while time.thread_time() < end:
        pass
def nap(t=0.6):
    time.sleep(t)
print("ready", flush=True)
sys.stdin.readline()
t0 = time.perf_counter(); busy(); t1 = time.perf_counter(); nap(); t2 = time.perf_counter()
print("done", t1 - t0, t2 - t1, flush=True)
sys.stdin.readline()
'''


@pytest.fixture
def child():
    p = subprocess.Popen([sys.executable, "-c", WORKLOAD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    yield p
    p.kill()
    p.wait()


def go(p, line="go"):
    p.stdin.write(line + "\n")
    p.stdin.flush()


def test_available_and_binary():
    ok, reason = pyspy.available()
    assert ok, reason
    assert pyspy.binary() == os.path.join(os.path.dirname(sys.executable), "py-spy")
    assert pyspy.version().startswith("0.")


@pytest.mark.parametrize("idle", [True, False])
def test_record_child(child, idle):
    opts = Options(pid=child.pid, idle=idle, rate=100)
    rec = pyspy.Recorder(opts)
    try:
        rec.start()
        # Its own session: an interrupt to our process group does not reach it.
        assert os.getsid(rec.proc.pid) == rec.proc.pid
        assert "--idle" in rec.command() if idle else "--idle" not in rec.command()
        tmp = rec.tmp.path
        go(child)
        word, busy_wall, nap_wall = child.stdout.readline().split()
        assert word == "done"
        cap = rec.stop()
    finally:
        rec.close()
    assert not os.path.exists(tmp)
    assert rec.proc is None
    p = pyspy.read(cap, opts)
    assert p.metric == ("wall" if idle else "cpu")
    main = [t for t in p.threads if t.startswith(f"Thread {child.pid} ")]
    assert len(main) == 1, p.threads   # named "" here: the child never imported threading
    fn = p.functions().set_index("name")["total"]
    if idle:
        share = fn["nap"] / (fn["nap"] + fn["busy"])
        truth = float(nap_wall) / (float(nap_wall) + float(busy_wall))   # measured in the child
        assert abs(share - truth) < 0.1, (fn, truth)
    else:
        assert fn.get("nap", 0) < 0.05 and fn["busy"] > 0.2, fn
    assert p.meta["backend"] == "py-spy" and p.meta["versions"]["py-spy"]


def test_attach_failure_names_cause_fix_and_way_out():
    # A process with no Python interpreter in it: py-spy cannot attach, just as without ptrace rights.
    target = subprocess.Popen(["sleep", "30"])
    rec = pyspy.Recorder(Options(pid=target.pid))
    try:
        with pytest.raises(ProfilerError) as e:
            rec.start()
    finally:
        rec.close()
        target.kill()
        target.wait()
    msg = str(e.value)
    assert "could not attach" in msg and "SYS_PTRACE" in msg and "--backend sampler" in msg
    assert rec.tmp is None and rec.proc is None


def test_stop_is_sigint_and_file_complete(child):
    opts = Options(pid=child.pid, idle=True)
    rec = pyspy.Recorder(opts)
    try:
        rec.start()
        go(child)
        child.stdout.readline()
        cap = rec.stop()
    finally:
        rec.close()
    assert cap.meta["exit"] == 0 and "Wrote speedscope file" in cap.meta["status"]
    assert cap.data.startswith(b"{") and cap.data.rstrip().endswith(b"}")

"""The py-spy backend on its own: attach to a real Python child, stop, read, clean up."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import retries
import tools

from profmagic.backends import pyspy
from profmagic.backends.base import Options
from profmagic.errors import ProfilerError

pytestmark = [pytest.mark.timed, pytest.mark.timeout(120), pytest.mark.requires("py-spy", "ptrace")]

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


def start_child():
    p = subprocess.Popen([sys.executable, "-c", WORKLOAD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    return p


@pytest.fixture
def child():
    p = start_child()
    yield p
    p.kill()
    p.wait()


def go(p, line="go"):
    p.stdin.write(line + "\n")
    p.stdin.flush()


def test_available_and_binary():
    ok, reason = pyspy.available()
    assert ok, reason
    assert pyspy.binary() == tools.find("py-spy")   # next to the interpreter, else on PATH
    assert pyspy.version().startswith("0.")


def record_child(child, idle):
    """One recording of the child's busy() then nap(): (profile, busy's and nap's measured wall)."""
    opts = Options(pid=child.pid, idle=idle, rate=100)
    rec = pyspy.Recorder(opts)
    try:
        rec.start()
        # Its own process group (an interrupt to ours does not reach it), in our session (CPU group).
        assert os.getpgid(rec.proc.pid) == rec.proc.pid and os.getsid(rec.proc.pid) == os.getsid(0)
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
    assert p.meta["backend"] == "py-spy" and p.meta["versions"]["py-spy"]
    return p, float(busy_wall), float(nap_wall)


# Counted tries (tests/retries.py): py-spy's samples carry no time and jitter on a loaded machine.
# Noise: `PROFMAGIC_MEASURE_NOISE=40 pytest tests/test_pyspy.py::test_record_child_idle` missed 0 of 40
# (2026-12-01, load average 5 on 2 cores), then 2 of 40 quiet (2026-12-05), and a fresh clone's serial
# phase missed 3 of 13 (its rule then was 2 in 16): counted together, 5 of 93.
CHILD_IDLE = retries.plan(5, 93, "0 of 40 at load 5 (2026-12-01), 2 of 40 quiet and 3 of 13 in CI (2026-12-05)")


def test_record_child_idle():
    """nap's share within 10 points of the share measured in the child, under the counted rule above."""
    def once():
        child = start_child()
        try:
            p, busy_wall, nap_wall = record_child(child, idle=True)
        finally:
            child.kill()
            child.wait()
        fn = p.functions().set_index("name")["total"]
        share = fn["nap"] / (fn["nap"] + fn["busy"])
        truth = nap_wall / (nap_wall + busy_wall)   # measured in the child
        return None if abs(share - truth) < 0.1 else f"nap's share {share:.3f}, measured {truth:.3f}"
    retries.run(CHILD_IDLE, once)


def test_record_child_cpu(child):
    """Without --idle py-spy keeps the running samples: busy's, not nap's. Its seconds are samples/rate,
    uncalibrated here, and run short when py-spy falls behind its rate (0.19 s for busy's 0.3 s once in
    CI): busy's share of the profile, and its seconds against half its measured wall at the least."""
    p, busy_wall, _ = record_child(child, idle=False)
    fn = p.functions().set_index("name")["total"]
    assert fn.get("nap", 0) < 0.05 and fn["busy"] > 0.9 * fn.max() and fn["busy"] > 0.5 * busy_wall, (fn, busy_wall)


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


def test_timed_in_a_session_every_thread_keeps_its_own_seconds():
    """--timing timed through the Session (as %%profile runs it): nothing calibrated; the block's
    thread sums to its measured wall time, and a thread that ended during the block to its own (its
    end is known from the thread watch: py-spy writes nothing when a thread exits). Bound 5%: within
    1.5% in 4 runs under load 13 (test_cli's record test, same reader)."""
    import threading
    import time

    import profmagic
    from workloads import busy, nap
    early = {}

    def worker():
        t0 = time.perf_counter()
        busy(0.1)
        nap(0.2)
        early["wall"] = time.perf_counter() - t0
        early["tid"] = threading.get_native_id()

    with profmagic.profile("py-spy", mode="wall", timing="timed", announce=lambda text: None) as rec:
        t0 = time.perf_counter()
        t = threading.Thread(target=worker, name="early")
        t.start()
        t.join()
        busy(0.2)
        nap(0.4)
        wall = time.perf_counter() - t0
    p = rec.profile
    assert p.meta["timing"] == pyspy.TIMED and not p.meta.get("calibrated")
    st, table = p.stacks, p.thread_table
    mine = (st["thread"] == p.meta["cell_thread"]).to_numpy()
    assert float(st.loc[mine, "wall"].sum()) == pytest.approx(wall, rel=0.05)
    label = table.loc[table["tid"] == early["tid"], "label"].item()
    assert label == f'Thread {early["tid"]} "early"'
    # Its end is put on py-spy's clock through py-spy's start (off by up to 12 ms at load 10:
    # bench/bench_pyspy_clock.py); its first sample is up to an interval plus a wait for a core late.
    assert float(st.loc[(st["thread"] == label).to_numpy(), "wall"].sum()) == pytest.approx(early["wall"], abs=0.05)
    names = p.frames["name"]
    assert not any("_bootstrap_inner" in names[f] and "_hook" in names[f] for s in st["stack"] for f in s)


def test_timed_refuses_cpu_and_gil():
    for kw in ({"mode": "cpu"}, {"mode": "wall", "gil": True}):
        with pytest.raises(ProfilerError, match="timed format needs wall time"):
            pyspy.recorder(Options(extra={"timing": "timed"}, **kw))

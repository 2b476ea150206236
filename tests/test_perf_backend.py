"""perf backend on real processes: a pthread without Python state, and Python 3.13 -X perf_jit."""
import glob
import os
import subprocess
import sys
import textwrap
import time

import pytest
import tools

from native.cbuild import build_cthread, load_cthread
from profmagic.backends import perf
from profmagic.backends.base import Options

pytestmark = [pytest.mark.timeout(180), pytest.mark.requires("perf", "perf_event")]
PY313 = tools.find("python3.13")


def _names(p, row):
    return [p.frames.at[f, "name"] for f in p.stacks.at[row, "stack"]]


@pytest.mark.requires("gcc")
def test_busy_c_function_seen_and_the_sleep_not(tmp_path):
    lib = load_cthread(build_cthread(tmp_path))
    assert lib.cthread_start(30, 30, 0) == 0
    rec = perf.Recorder(Options(pid=os.getpid(), rate=200))
    try:
        rec.start()
        tmp = rec.tmp.path
        time.sleep(3)
        cap = rec.stop()
    finally:
        rec.close()
        lib.cthread_stop()
    assert not os.path.exists(tmp)
    p = perf.read(cap, Options(rate=200))
    assert p.meta["backend"] == "perf" and p.meta["python_mode"] in ("native", "trampoline")
    assert p.metric == "cpu"
    rows = [r for r in range(len(p.stacks)) if "cthread_main" in _names(p, r)]
    assert rows
    cpu = p.stacks.loc[rows, "cpu"]
    busy = cpu[[r for r in rows if "cthread_busy" in _names(p, r)]].sum()
    sleep = cpu[[r for r in rows if "cthread_sleep" in _names(p, r)]].sum()
    # perf samples on-CPU only: the thread's time goes to the busy loop, hardly any to nanosleep
    # (only its on-CPU entry and exit can be hit).
    assert busy > 0.9 * cpu.sum()
    assert sleep < 0.05 * cpu.sum()
    # The pure C thread is its own root in perf too (comm, then the thread entry).
    for r in rows:
        names = _names(p, r)
        assert "_PyEval_EvalFrameDefault" not in names and names.index("cthread_main") <= 3


WORKLOAD = textwrap.dedent("""\
    import time
    def jit_inner_spin(n):
        s = 0
        for i in range(n):
            s += i
        return s
    def jit_outer():
        t = time.time()
        while time.time() - t < 3.0:
            jit_inner_spin(20000)
    time.sleep(0.5)
    jit_outer()
    """)


@pytest.mark.requires("python3.13")
def test_perf_jit_on_313_shows_python_names(tmp_path):
    script = tmp_path / "w.py"
    script.write_text(WORKLOAD)
    child = subprocess.Popen([PY313, "-X", "perf_jit", str(script)])
    rec = perf.Recorder(Options(pid=child.pid, rate=200))
    try:
        time.sleep(0.2)
        rec.start()
        assert rec.mode == "perf_jit"
        # CPython buffers /tmp/jit-PID.dump: the names are complete once the child has exited.
        child.wait(30)
        cap = rec.stop()
    finally:
        rec.close()
        if child.poll() is None:
            child.kill()
        child.wait()
    assert not glob.glob(f"/tmp/jitted-{child.pid}-*.so") and not os.path.exists(f"/tmp/jit-{child.pid}.dump")
    p = perf.read(cap, Options(rate=200))
    assert p.meta["python_mode"] == "perf_jit"
    py = p.frames[p.frames["kind"] == "python"]
    assert {"jit_inner_spin", "jit_outer"} <= set(py["name"])
    # Mixed stacks: a Python frame above interpreter C frames in one stack.
    mixed = [r for r in range(len(p.stacks))
             if "jit_inner_spin" in _names(p, r) and "_PyEval_EvalFrameDefault" in _names(p, r)]
    assert mixed


def test_paranoid_and_missing_perf_messages_name_the_fix():
    ok, reason = perf.available()
    assert ok and "perf_event_paranoid" in reason
    # A target that does not exist: perf fails and the error carries its words.
    from profmagic.errors import ProfilerError
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    rec = perf.Recorder(Options(pid=child.pid))
    try:
        with pytest.raises(ProfilerError, match="perf"):
            rec.start()
    finally:
        rec.close()
    assert rec.tmp.path is None

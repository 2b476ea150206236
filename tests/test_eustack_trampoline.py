"""eu-stack on CPython 3.12 with its perf trampolines on: the unwind stops at the first trampoline
(JIT code without unwind info), and the recorder names it from /tmp/perf-PID.map so that the reader
splices the Python frames read from memory in above it (issue 24 item 8)."""
from __future__ import annotations

import os
import subprocess
import time

import pytest
import tools

from native.cbuild import build_cthread
from native.pynames import CTYPES_OUTER, PYTHONS, share_above
from profmagic.backends import eustack
from profmagic.backends.base import Options

pytestmark = [pytest.mark.timed, pytest.mark.timeout(240)]

# The trampoline from the interpreter's start (-X perf), or switched on later, as perf's recorder
# does in a kernel (sys.activate_stack_trampoline).
LATE = "import sys; sys.activate_stack_trampoline('perf')\n" + CTYPES_OUTER


@pytest.fixture(scope="module")
def so(tmp_path_factory):
    return build_cthread(tmp_path_factory.mktemp("tramp"))


@pytest.mark.requires("python3.12", "eu-stack", "ptrace")
@pytest.mark.parametrize("how", ["-X perf", "activate_stack_trampoline"])
def test_python_names_above_a_c_busy_loop_under_the_perf_trampoline(so, how):
    args = ["-X", "perf", "-c", CTYPES_OUTER] if how == "-X perf" else ["-c", LATE]
    c = subprocess.Popen([PYTHONS["3.12"][-1], *args, so], stdout=subprocess.PIPE, text=True)
    try:
        assert c.stdout.readline().strip() == "ready"
        time.sleep(0.3)
        assert os.path.exists(f"/tmp/perf-{c.pid}.map")
        cap = tools.record_for(eustack.Recorder(Options(pid=c.pid, rate=50)), 3)
    finally:
        c.kill()
        c.wait()
        c.stdout.close()
    # The recorder named the trampoline where the unwind stopped.
    assert b"py::outer:<string> - /tmp/perf-%d.map" % c.pid in cap.data
    p = eustack.read(cap, Options())
    share, n = share_above(p)
    assert n >= 20 and share >= 0.9, (share, n, p.meta["python_stacks"])
    # Above outer, the module's frame spliced in from memory; no [python] left, no trampoline name.
    names = {p.frames.at[f, "name"] for st in p.stacks["stack"] for f in st}
    assert {"outer", "<module>", "cthread_busy"} <= names
    assert not any(n.startswith("py::") for n in names) and "[python]" not in names

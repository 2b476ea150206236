"""py-spy+eu-stack: a Python thread that waits (in a ctypes call) on a pure C thread; both appear,
each from the tool that sees it, with its own names."""
import os
import threading

import pytest

from native.cbuild import build_cthread, load_cthread
from profmagic.backends import combined
from profmagic.backends.base import Options

pytestmark = [pytest.mark.timeout(180), pytest.mark.requires("py-spy", "eu-stack", "gcc", "ptrace")]


def _names(p, thread):
    rows = p.stacks[p.stacks["thread"] == thread]
    return {p.frames.at[f, "name"] for st in rows["stack"] for f in st}


def test_python_waiter_and_c_worker_in_one_profile(tmp_path):
    lib = load_cthread(build_cthread(tmp_path))

    def wait_for_c_worker():
        lib.cthread_join()  # ctypes releases the GIL while the C call waits

    waiter = threading.Thread(target=wait_for_c_worker, name="waiter")
    rec = combined.Recorder(Options(pid=os.getpid(), rate=50))
    try:
        rec.start()          # both tools sample before the work starts, however long they took to start
        assert lib.cthread_start(20, 20, 60) == 0  # about 2.4 s of work
        waiter.start()
        waiter.join()
        cap = rec.stop()
    finally:
        rec.close()
        waiter.join()
    assert rec.eu.tmp.path is None
    p = combined.read(cap, Options(rate=50))
    src = p.meta["thread_sources"]
    t = p.thread_table
    waiter_label = t.loc[t["tid"] == waiter.native_id, "label"].iat[0]
    assert src[waiter_label] == "py-spy"
    assert any(n.endswith("wait_for_c_worker") for n in _names(p, waiter_label))  # py-spy gives qualnames
    c_threads = [t for t in p.threads if "cthread_main" in _names(p, t)]
    assert len(c_threads) == 1 and src[c_threads[0]] == "eu-stack"
    c_names = _names(p, c_threads[0])
    assert {"cthread_busy", "cthread_sleep"} <= c_names and not any("wait_for_c_worker" in n for n in c_names)
    # Wall time for both; CPU known for the C thread only.
    rows = p.stacks[p.stacks["thread"] == c_threads[0]]
    assert rows["wall"].sum() > 0 and rows["cpu"].sum() > 0
    assert p.stacks.loc[p.stacks["thread"] == waiter_label, "cpu"].isna().all()
    assert p.stacks.loc[p.stacks["thread"] == waiter_label, "wall"].sum() > 0

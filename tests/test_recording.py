"""profmagic.profile() and recording.run() outside notebooks: in this very process, real profilers."""
from __future__ import annotations

import os
import threading
import time

import pytest

import profmagic
from profmagic import recording
from profmagic.errors import ProfilerError

pytestmark = pytest.mark.timeout(120)


def busy(t=0.3):
    end = time.perf_counter() + t
    while time.perf_counter() < end:
        pass


def nap(t=0.6):
    time.sleep(t)


def shares(p):
    fn = p.functions().set_index("name")["total"]
    cell = p.stacks["thread"] == p.meta["cell_thread"]
    tot = p.weights()[cell].sum()
    return fn.get("busy", 0) / tot, fn.get("nap", 0) / tot


def my_children():
    me = str(os.getpid())
    out = []
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{d}/stat") as f:
                st = f.read()
        except OSError:
            continue
        if st.rsplit(")", 1)[1].split()[1] == me:
            out.append(d)
    return out


def test_context_manager_pyspy_idle():
    lines = []
    with profmagic.profile("py-spy", idle=True, announce=lines.append) as rec:
        busy()
        nap()
    p = rec.profile
    assert lines == [f"recording with py-spy at 100 Hz (pid {os.getpid()})…"]
    b, n = shares(p)
    assert abs(n - 2 / 3) < 0.1 and abs(b - 1 / 3) < 0.1, (b, n)
    # Kernel-less process: pytest's own threads are dropped all the same; only this thread is left.
    assert p.threads == [p.meta["cell_thread"]]
    cell_seconds = p.weights()[p.stacks["thread"] == p.meta["cell_thread"]].sum()
    assert abs(cell_seconds - p.meta["cell_wall"]) <= 0.05 * p.meta["cell_wall"]
    for key in ("backend", "rate", "requested_rate", "cell_wall", "cell_cpu", "pid", "versions", "sample_count"):
        assert key in p.meta, key
    assert p.meta["cell_cpu"] < p.meta["cell_wall"]
    assert my_children() == []


def test_auto_says_what_it_chose():
    with profmagic.profile(announce=lambda s: None) as rec:
        busy(0.2)
    assert rec.profile.meta["backend"] == "py-spy"
    assert rec.profile.meta["backend_choice"].startswith("auto chose py-spy")


def test_run_returns_partial_profile_and_the_exception():
    err = ValueError("boom")

    def cell():
        busy(0.2)
        raise err

    p, e = recording.run("py-spy", recording.make_options(idle=True), cell)
    assert e is err
    assert "ValueError" in p.meta["partial"]
    assert shares(p)[0] > 0.8
    with pytest.raises(ValueError, match="boom"):
        recording.record("py-spy", recording.make_options(idle=True), cell)
    assert my_children() == []


def test_context_manager_propagates_and_keeps_profile():
    with pytest.raises(KeyError):
        with profmagic.profile("py-spy", idle=True, announce=lambda s: None) as rec:
            busy(0.2)
            raise KeyError("x")
    assert rec.profile is not None and "KeyError" in rec.profile.meta["partial"]


def test_thread_started_inside_is_kept():
    with profmagic.profile("py-spy", idle=True, announce=lambda s: None) as rec:
        t = threading.Thread(target=busy, args=(0.3,), name="inner")
        t.start()
        t.join()
    assert any(th.endswith('"inner"') for th in rec.profile.threads), rec.profile.threads


def test_zero_samples_message():
    code = compile("x = 1", "<zero-cell>", "exec")
    s = recording.Session("py-spy", recording.make_options(idle=True, rate=10, cell_filename="<zero-cell>"))
    s.start()
    exec(code, {})
    p = s.finish()
    assert p.sample_count == 0
    assert "no samples" in s.message and "10 Hz" in s.message and "every 100.0 ms" in s.message
    assert my_children() == []


def test_unknown_backend_is_clear():
    with pytest.raises(ProfilerError, match="unknown backend 'nope'; choose one of: auto, py-spy"):
        with profmagic.profile("nope"):
            pass


def test_unknown_backend_in_resolve():
    with pytest.raises(ProfilerError, match="unknown backend 'perf-missing'"):
        recording.resolve("perf-missing", recording.make_options())

"""The case-study engine: built with the real g++, run in real processes sharing one flock.

Ratios only, with generous margins (the machine is shared and noisy); no absolute times.
"""
import subprocess
import threading

import pytest

from profmagic import casestudy as cs

pytestmark = [pytest.mark.timed, pytest.mark.timeout(180), pytest.mark.requires("g++")]


@pytest.mark.requires("nm")
def test_builds_once_and_exports_clear_names():
    so = cs.build()
    assert so.exists() and cs.build() == so  # cached: same path, no rebuild
    syms = subprocess.run(["nm", "-D", str(so)], capture_output=True, text=True).stdout
    for name in ("get_device_properties", "topk", "run_op", "worker_loop"):
        assert f" T {name}\n" in syms, name


def test_results_and_shapes_are_real():
    with cs.Engine(hold_ms=0.1, n=1000) as e:
        t = e.topk(5)
        assert t.shape == (5,)
        vals = t.result()
        assert len(vals) == 5 and vals == sorted(vals, reverse=True)
        assert e.topk(3).result() == vals[:3]


def test_cache_calls_get_device_properties_once():
    with cs.Engine(hold_ms=0.1, n=1000) as e:
        cs.run(5, e)
        assert e.props_calls == 5 * cs.OPS_PER_STEP
    with cs.Engine(hold_ms=0.1, n=1000, cache=True) as e:
        cs.run(5, e)
        assert e.props_calls == 1


def test_worker_is_a_named_native_thread_without_python_state():
    with cs.Engine(hold_ms=0.1, n=1000) as e:
        tid = e.worker_tid
        with open(f"/proc/self/task/{tid}/comm") as f:
            assert f.read().strip() == "cs-worker"
        assert tid not in {t.native_id for t in threading.enumerate()}


def test_waits_release_the_gil():
    # While the main thread waits in result(), another Python thread must make progress.
    count = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            count[0] += 1

    th = threading.Thread(target=spin)
    with cs.Engine(hold_ms=50, n=1000) as e:
        th.start()
        try:
            before = count[0]
            e.topk(1).result()   # ~50 ms inside C
            assert count[0] - before > 1000
        finally:
            stop.set()
            th.join()


def test_step_time_grows_with_processes_and_cache_fixes_it():
    before = cs.scaling((1, 2, 4), steps=25)
    after = cs.scaling((1, 2, 4), steps=25, cache=True)
    s = before.set_index("processes")["step_ms"]
    # The lock serialises every process's get_device_properties: 4 processes ~3-4x slower.
    assert s[2] > 1.3 * s[1]
    assert s[4] > 1.3 * s[2]
    assert s[4] > 2.0 * s[1]
    a = after.set_index("processes")["step_ms"]
    for k in (1, 2, 4):
        assert a[k] < s[k] / 1.5, (k, a[k], s[k])


def test_lock_file_must_be_openable(tmp_path):
    with pytest.raises(OSError, match="lock file"):
        cs.Engine(lock_path=str(tmp_path / "missing-dir" / "x.lock"))


def test_compile_error_is_reported(tmp_path, monkeypatch):
    # A fake compiler: the only way to produce a compile failure without breaking the real source.
    fake = tmp_path / "fake-g++"
    fake.write_text("#!/bin/sh\n[ \"$1\" = --version ] && { echo fake; exit 0; }\necho 'boom: error' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CXX", str(fake))
    monkeypatch.setenv("PROFMAGIC_CACHE", str(tmp_path / "cache"))
    with pytest.raises(RuntimeError, match="boom: error"):
        cs.build()
    assert not [p for p in (tmp_path / "cache" / "casestudy").iterdir() if p.suffix == ".so"]

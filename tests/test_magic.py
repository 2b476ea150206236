"""%%profile in a real ipykernel, with the real profilers (issue 3)."""
from __future__ import annotations

import json
import re
import os
import tempfile

import procs
import pytest
import retries
import workloads

pytestmark = [pytest.mark.timed, pytest.mark.kernel, pytest.mark.timeout(300)]

SETUP = '''
%load_ext profmagic
import time, threading, asyncio
import profmagic
''' + workloads.SOURCE

# What the tests ask of each profile, computed in the kernel and sent back as a literal.
SUMMARY = '''
def _summary(p):
    import threading
    st, fr = p.stacks, p.frames
    cell = p.meta["cell_thread"]
    mine = st[st["thread"] == cell]
    tot = float(p.weights()[mine.index].sum())
    def share(name):
        ids = set(fr.index[fr["name"] == name])
        w = p.weights()[mine.index]
        return float(w[[any(f in ids for f in s) for s in mine["stack"]]].sum()) / tot if tot else None
    used = {f for s in st["stack"] for f in s}
    files = sorted(set(fr.loc[sorted(used), "file"]))
    return dict(metric=p.metric, backend=p.meta["backend"], busy=share("busy"), nap=share("nap"),
                cell_seconds=tot, cell_wall=p.meta["cell_wall"], cell_cpu=p.meta["cell_cpu"],
                threads=list(p.threads), cell_thread=cell, files=files, samples=p.sample_count,
                names=sorted(set(fr.loc[sorted(used), "name"])), meta_rate=p.meta.get("rate"),
                requested_rate=p.meta.get("requested_rate"), partial=p.meta.get("partial"),
                kernel_threads=sorted(t.name for t in threading.enumerate()))
'''

KERNEL_FILES = ("/IPython/", "/ipykernel/", "/profmagic/", "/tornado/", "/zmq/", "/asyncio/base_events")
KERNEL_THREAD_NAMES = ("IOPub", "Heartbeat", "Control", "Shell channel", "HistorySav", "ParentPoller",
                       "_watch_pipe_fd")


@pytest.fixture(scope="module")
def k():
    from kernel import Kernel
    tmp = tempfile.mkdtemp(prefix="test-magic-")
    kern = Kernel(extra_env={"TMPDIR": tmp})
    kern.tmp = tmp
    r = kern.run(SETUP + SUMMARY)
    assert r.status == "ok", r.text() + str(r.error)
    yield kern
    kern.close()
    import shutil
    shutil.rmtree(tmp, ignore_errors=True)


def assert_clean(k):
    assert procs.children(k.pid) == [], "a profiler child of the kernel was left running"
    left = [n for n in os.listdir(k.tmp) if n.startswith("profmagic-")]
    assert left == [], f"temp dirs left behind: {left}"


def summary(k, expr="_profile"):
    return k.value(f"_summary({expr})")


# busy() then nap(), each timed in the cell: the truth the wall shares are checked against.
TIMED = "w0 = time.perf_counter(); busy(); w1 = time.perf_counter(); nap(); w2 = time.perf_counter()\n"


def measured_shares_miss(k, s):
    """None if busy's and nap's shares of the cell thread's wall time are within 10 points of what
    the cell measured (on a loaded machine nap oversleeps: busy is not exactly a third), else why."""
    busy_s, nap_s = k.value("(w1 - w0, w2 - w1)")
    truth = busy_s / s["cell_wall"], nap_s / s["cell_wall"]
    if abs(s["busy"] - truth[0]) < 0.10 and abs(s["nap"] - truth[1]) < 0.10:
        return None
    return f"busy {s['busy']:.3f} vs {truth[0]:.3f}, nap {s['nap']:.3f} vs {truth[1]:.3f}"


def assert_measured_shares(k, s):
    miss = measured_shares_miss(k, s)
    assert miss is None, (miss, s)


def profile_cell(k, opts, body="busy()\nnap()\n"):
    r = k.run(f"%%profile {opts}\n{body}")
    assert r.status == "ok", r.text() + str(r.error)
    return r, summary(k)


def assert_cell_only(s):
    bad = [f for f in s["files"] if any(x in f for x in KERNEL_FILES)]
    assert bad == [], f"IPython/kernel frames left in the stacks: {bad}"
    for t in s["threads"]:
        assert not any(n in t for n in KERNEL_THREAD_NAMES), f"kernel thread left: {t}"


# Counted tries (tests/retries.py): py-spy's samples carry no time and jitter on a loaded machine; the
# misses under load are busy's share read low (0.21 for 0.33). Noise: `PROFMAGIC_MEASURE_NOISE=40 pytest
# tests/test_magic.py::test_pyspy_idle_shares_trim_threads_calibration`, three runs on 2026-12-01 at load
# 4-11 on 2 cores: 7, 8 and 3 misses of 40 (the cell waited for a core 18-31 % of its time). Rule: at most
# 8 misses in 24 tries (false failure 0.8 %; a regression making 30 % of tries miss still passes 72 %).
KERNEL_IDLE = retries.plan(18, 120, "load 4-11 on 2 cores, 2026-12-01")


@pytest.mark.requires("py-spy", "ptrace")
def test_pyspy_idle_shares_trim_threads_calibration(k):
    """The shares are counted under the rule above; everything else is checked on every try."""
    def once():
        r, s = profile_cell(k, "-b py-spy --idle", TIMED)
        assert "recording with py-spy at 100 Hz (pid" in r.text()
        assert s["metric"] == "wall" and s["backend"] == "py-spy"
        assert_cell_only(s)
        assert s["threads"] == [s["cell_thread"]]
        # Seconds that add up: the cell thread's calibrated seconds equal the measured wall time.
        assert abs(s["cell_seconds"] - s["cell_wall"]) <= 0.05 * s["cell_wall"], s
        assert s["requested_rate"] == 100.0 and s["meta_rate"] == pytest.approx(s["samples"] / s["cell_wall"])
        # What uncertainty.catch_up weighs the count against.
        assert k.value("_profile.meta['calibrated_wall']") == pytest.approx(s["cell_wall"])
        assert any(f.startswith("In[") for f in s["files"])
        assert_clean(k)
        overloaded = retries.waited(k.value("_profile.meta['cell_run_delay']"), s["cell_wall"])
        return overloaded or measured_shares_miss(k, s)
    retries.run(KERNEL_IDLE, once)


@pytest.mark.requires("py-spy", "ptrace")
def test_pyspy_timing_timed_is_not_calibrated(k):
    """--timing timed: py-spy's timestamps, nothing scaled. The cell thread's seconds are the time its
    code ran, measured from its first line to its last (not the magic's cell_wall, which also holds
    the magic's own start-up that the profile trims away); 5%: within 1.5% in four runs of the same
    reader under load 13. A thread the cell started keeps its own seconds, not the cell thread's factor;
    its end is put on py-spy's clock through py-spy's start (bench/bench_pyspy_clock.py: off by up to
    12 ms at load 10), and its first sample comes up to one interval plus py-spy's wait for a core
    after its start, so its bound is 50 ms."""
    body = ("def sleeper(out):\n    s0 = time.perf_counter(); nap(0.3); out.append(time.perf_counter() - s0)\n"
            "c0 = time.perf_counter(); slept = []\n"
            "t = threading.Thread(target=sleeper, args=(slept,), name='sleeper')\n"
            "t.start(); t.join()\n" + TIMED + "c1 = time.perf_counter()\n")
    r, s = profile_cell(k, "-b py-spy --mode wall --timing timed", body)
    assert k.value("(_profile.meta['timing'], bool(_profile.meta.get('calibrated')))") == \
        ("timed (py-spy chrometrace)", False)
    ran = k.value("c1 - c0")
    assert abs(s["cell_seconds"] - ran) <= 0.05 * ran, (ran, s)
    sleeper = k.value("float(_profile.stacks.loc[_profile.stacks.thread.str.endswith('\"sleeper\"'), 'wall'].sum())")
    assert sleeper == pytest.approx(k.value("slept[0]"), abs=0.05)
    assert_measured_shares(k, s)
    assert_cell_only(s)
    assert_clean(k)
    r = k.run("%%profile -b py-spy --mode cpu --timing timed\nnap(0.1)\n")
    assert "timed format needs wall time" in r.text()


@pytest.mark.requires("py-spy", "ptrace")
def test_pyspy_mode_cpu_is_cpu(k):
    _, s = profile_cell(k, "-b py-spy --mode cpu")
    assert s["metric"] == "cpu"
    assert s["nap"] < 0.05, s
    assert s["busy"] > 0.9, s
    assert_cell_only(s)
    assert_clean(k)


@pytest.mark.requires("py-spy", "ptrace")
def test_thread_started_by_cell_is_kept(k):
    body = ("t = threading.Thread(target=busy, args=(0.4,), name='worker')\n"
            "t.start(); nap(0.5); t.join()\n")
    _, s = profile_cell(k, "-b py-spy --idle", body)
    workers = [t for t in s["threads"] if t.endswith('"worker"')]
    assert len(workers) == 1, s["threads"]
    assert_cell_only(s)
    n = k.value(f"int(_profile.stacks.loc[_profile.stacks.thread == {workers[0]!r}, 'samples'].sum())")
    assert n > 0
    assert_clean(k)


@pytest.mark.requires("py-spy", "ptrace")
def test_all_threads_keeps_kernel_threads(k):
    _, s = profile_cell(k, "-b py-spy --idle --all-threads", "busy(0.2)\n")
    assert any("IOPub" in t or "Heartbeat" in t for t in s["threads"]), s["threads"]
    assert_clean(k)


@pytest.mark.requires("py-spy", "ptrace")
def test_cell_raises_partial_profile_then_same_exception(k):
    k.run("_profile = None")
    r = k.run("%%profile -b py-spy --idle\nbusy(0.2)\nraise ValueError('boom 42')\n")
    assert r.status == "error"
    assert r.error["ename"] == "ValueError" and r.error["evalue"] == "boom 42"
    assert len(r.data) >= 1, "the partial profile was not displayed"
    s = summary(k)
    assert "ValueError" in s["partial"] and s["busy"] > 0.8
    assert_cell_only(s)
    assert_clean(k)


@pytest.mark.requires("py-spy", "ptrace")
def test_ctrl_c_partial_profile_and_keyboardinterrupt(k, tmp_path):
    k.run("_profile = None")
    # Interrupted once the cell has written its marker file, after busy() (the cell starts once py-spy
    # samples). A file, not a print: printing runs ipykernel's own code on the cell's thread.
    mark = tmp_path / "busy-done"
    r = k.run(f"%%profile -b py-spy --idle\nbusy(0.3)\nopen({str(mark)!r}, 'w').close()\ntime.sleep(60)\n",
              interrupt_on=mark.exists, timeout=120)
    assert r.status == "error" and r.error["ename"] == "KeyboardInterrupt", r.error
    s = summary(k)
    assert "KeyboardInterrupt" in s["partial"]
    assert s["busy"] > 0.05 and s["cell_wall"] < 30
    assert_cell_only(s)
    assert_clean(k)


@pytest.mark.requires("py-spy", "ptrace")
def test_zero_samples_message(k):
    r = k.run("%%profile -b py-spy --idle --rate 1\nx = 1\n")
    assert r.status == "ok"
    assert "no samples" in r.stderr and "1 Hz" in r.stderr and " ms wall" in r.stderr, r.text()
    assert r.result is None
    assert_clean(k)


def test_unknown_backend(k):
    r = k.run("ran = False\n")
    r = k.run("%%profile -b nope\nran = True\n")
    assert "unknown backend 'nope'" in r.stderr and "py-spy" in r.stderr
    assert k.value("ran") is False


@pytest.mark.requires("py-spy", "ptrace")
def test_profile_in_underscore_profile_and_line_magic_returns_it(k):
    # The cell magic shows the report as a display and leaves Out/_ to the cell's own value.
    r = k.run("%%profile -b py-spy --idle\nbusy(0.2)\n")
    assert r.result is None and any("application/vnd.jupyter.widget-view+json" in d or "text/html" in d
                                    for d in r.data), r.data
    assert k.value("type(_profile).__name__") == "Profile"
    r = k.run("p = %profile -b py-spy --idle busy(0.25)\nprint(type(p).__name__, p.meta['cell'])")
    assert r.stdout.split() == ["Profile", "busy(0.25)"], r.text()
    assert_clean(k)


@pytest.mark.requires("py-spy", "ptrace")
def test_output_writes_speedscope(k, tmp_path):
    out = tmp_path / "cell.speedscope.json"
    r = k.run(f"%%profile -b py-spy --idle -q -o {out}\nbusy(0.2)\n")
    assert r.status == "ok"
    doc = json.loads(out.read_bytes())
    assert doc["$schema"] == "https://www.speedscope.app/file-format-schema.json"
    import profmagic
    p = profmagic.load(str(out))
    assert "busy" in set(p.frames["name"]) and p.meta["backend"] == "py-spy"


@pytest.mark.requires("py-spy", "ptrace")
def test_top_level_await(k):
    r, s = profile_cell(k, "-b py-spy --idle", "await asyncio.sleep(0.4)\nbusy(0.2)\n")
    assert s["busy"] > 0.2
    assert_cell_only(s)
    assert_clean(k)


@pytest.mark.requires("py-spy", "ptrace")
def test_gil_overrides_idle_warns(k):
    r = k.run("%%profile -b py-spy --idle --gil\nbusy(0.2)\nnap(0.3)\n")
    assert r.status == "ok" and "--gil overrides --idle" in r.stderr
    s = summary(k)
    assert s["nap"] < 0.1


INPROCESS = ["sampler", "pyinstrument", "cprofile"]


@pytest.mark.parametrize("backend", INPROCESS)
def test_inprocess_backends_wall(k, backend):
    _, s = profile_cell(k, f"-b {backend} --mode wall", TIMED)
    assert s["backend"] == backend and s["metric"] == "wall"
    assert_measured_shares(k, s)
    assert_cell_only(s)
    assert_clean(k)


@pytest.mark.parametrize("backend", INPROCESS)
def test_inprocess_backends_cpu(k, backend):
    _, s = profile_cell(k, f"-b {backend} --mode cpu")
    assert s["metric"] == "cpu"
    # ≈ 0: a sample or two lands on the call into sleep (0.6 s of sleep would be 2/3).
    assert s["nap"] < 0.1, s
    assert_cell_only(s)
    assert_clean(k)


def test_sampler_keeps_cell_thread(k):
    body = ("t = threading.Thread(target=busy, args=(0.4,), name='worker')\n"
            "t.start(); nap(0.5); t.join()\n")
    _, s = profile_cell(k, "-b sampler --mode wall", body)
    assert [t for t in s["threads"] if t.endswith('"worker"')], s["threads"]
    assert_cell_only(s)


def test_earlier_cells_thread_kept_after_the_kernel_starts_threads():
    """A thread an earlier cell started stays the user's after the kernel starts threads of its own
    on demand: the first large message makes pyzmq start its garbage collector (``Thread-N`` of
    zmq.utils.garbage, with a ZMQ context: two ZMQbg threads), as notebook 04's first report did;
    its C++ worker, started before, was then dropped as the kernel's. A fresh kernel: in the shared
    one an earlier test's message may have started them already."""
    from kernel import Kernel
    k = Kernel()
    try:
        r = k.run(SETUP + SUMMARY + "stop_user = threading.Event()\n"
                  "user = threading.Thread(target=stop_user.wait, name='user-worker'); user.start()\n"
                  "zmq_before = {t for t, n in profmagic.procfs.threads().items() if n.startswith('ZMQbg')}\n"
                  "time.sleep(0.05)\n")   # (start times are clock ticks: the kernel's threads start later)
        assert r.status == "ok", r.text() + str(r.error)
        r = k.run("from IPython.display import display\ndisplay({'text/plain': 'x' * 1_000_000}, raw=True)\n")
        assert r.status == "ok", r.text()
        started = k.value("sorted({t for t, n in profmagic.procfs.threads().items() if n.startswith('ZMQbg')} "
                          "- zmq_before)")
        assert started, "the large message started no ZMQ thread: this test no longer sets the scene"
        _, s = profile_cell(k, "-b sampler --mode wall", "busy(0.2)\n")
        assert [t for t in s["threads"] if t.endswith('"user-worker"')], s["threads"]
        assert_cell_only(s)
        k.run("stop_user.set(); user.join()")
    finally:
        k.close()


def test_cell_value_is_displayed_and_lands_in_out(k):
    """The cell runs as IPython runs it: the last expression is shown (after the report) and stored
    in Out; input transformers (a %line magic inside the cell) apply; the profile covers the cell."""
    r = k.run("%%profile -b sampler\nbusy(0.1)\n%time _t = 1\n40 + 2\n")
    assert r.status == "ok", r.text()
    assert r.result == {"text/plain": "42"}
    n = k.value("len(In) - 2")
    assert k.value(f"Out[{n}]") == 42
    assert "Wall time" in r.stdout                     # %time ran inside the profiled cell
    assert k.value("_profile.meta['cell_thread'] in _profile.threads")
    names = k.value("sorted(set(_profile.frames['name']))")
    assert "busy" in names and "<module>" in names


def test_traceback_points_at_the_cells_own_line(k):
    r = k.run("%%profile -b sampler -q\nx = 1\n\ny = 1 / 0\n")
    assert r.status == "error" and r.error["ename"] == "ZeroDivisionError"
    tb = "\n".join(r.error["traceback"])
    assert "----> 3 y = 1 / 0" in re.sub(r"\x1b\[[0-9;]*m", "", tb)


def test_default_records_wall_and_cpu_of_a_waiting_cell(k):
    """%%profile with no options on a cell that mostly sleeps: wall and CPU from one run, the wall
    total within 5% of the cell's measured wall time, and at least 90% of it off-CPU."""
    r = k.run("%%profile\nspin(0.03)\nnap(1.0)\n")
    assert r.status == "ok" and "no samples" not in r.stderr, r.text()
    s = k.value("dict(metrics=_profile.metrics, wall=_profile.total('wall'), cpu=_profile.total('cpu'), "
                "cell_wall=_profile.meta['cell_wall'], mode=_profile.meta['mode'])")
    assert s["mode"] == "both" and {"wall", "cpu", "off_cpu"} <= set(s["metrics"])
    assert s["wall"] == pytest.approx(s["cell_wall"], rel=0.05)
    assert (s["wall"] - s["cpu"]) / s["wall"] >= 0.9, s

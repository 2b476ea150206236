"""Ctrl-C at any step of %%profile in a real kernel (issue 28, "Interrupts"): while %load_ext imports,
at the first profiled cell's imports, while memray starts, in the cell, while stopping and reading.
Every outcome is a normal report or a one-line KeyboardInterrupt (with at most one documented
``profmagic: interrupted while …`` line on stderr), the cell stops at once, nothing is left behind,
and the kernel profiles the next cell. The interrupts are real SIGINTs at random moments, not a fake
slow import; which step each one hit is read from what the kernel printed.

In this process: a SIGINT inside a helper thread's ``start()`` (``interrupts.start_thread``) leaves
the thread started and held by its owner, whose stop joins it."""
from __future__ import annotations

import os
import random
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from contextlib import contextmanager

import faults.conftest as F
import pytest
import workloads

from profmagic import interrupts
from profmagic.childsampler import STOP, ChildSampler
from profmagic.cluster.assemble import decode
from profmagic.cluster.worker import WorkerSampler, profmagic_threads

HERE = os.path.dirname(os.path.abspath(__file__))


ANSI = re.compile(r"\x1b\[[0-9;]*m")
# The steps' lines (docs/errors.md), by id.
LINES = {"interrupted-before-cell": "nothing was recorded and the cell did not run",
         "interrupted-after-cell": "the cell ran but its profile was not kept",
         "interrupted-report": "the profile is in _profile",
         "interrupted-loading": "it is not loaded: run %load_ext profmagic again",
         "interrupted-attach": "the recording was not kept"}
BUSY = "%%profile -b sampler\nbusy(0.3)\n"
SPIN4 = "t = time.time()\nwhile time.time() - t < 4:\n    x = [str(i) * 3 for i in range(200)]\n"


def shown_report(r) -> bool:
    return any("<Profile" in d.get("text/plain", "") for d in r.data + r.updates)


def outcome(r) -> str:
    """What one interrupted cell gave, checked: "ok" (not interrupted: it finished), "cell" (the cell's
    own interrupt: no profmagic line), "ipython" (landed in IPython before or after the magic: no
    profmagic frame), or the docs/errors.md id of the one line printed."""
    err = r.stderr
    assert "Exception ignored" not in err and "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith("profmagic: interrupted")]
    if r.error is None and r.status == "error":
        # A second SIGINT while IPython showed the first: IPython prints the one line itself.
        assert [ln for ln in err.splitlines() if ln.strip()][-1] == "KeyboardInterrupt", err
        assert len(lines) <= 1, lines
        return "ipython"
    if r.error is None:
        assert r.status == "ok" and not lines, r.text()
        return "ok"
    assert r.error["ename"] == "KeyboardInterrupt", r.error
    tb = ANSI.sub("", "\n".join(r.error["traceback"]))
    if tb != "KeyboardInterrupt" and "/profmagic/" not in tb and not lines:
        return "ipython"   # IPython's own traceback, as for any cell; profmagic had not started
    assert tb == "KeyboardInterrupt", tb                   # one line, no traceback through profmagic
    F.documented("interrupted", r.error["ename"])
    assert len(lines) <= 1, lines
    if not lines:
        return "cell"
    for error_id, tail in LINES.items():
        if lines[0].endswith(tail):
            F.documented(error_id, lines[0])
            return error_id
    raise AssertionError(f"an undocumented interrupt line: {lines[0]!r}")


def run_interrupted(k, code: str, delay: float, after=None, again: float | None = None):
    """Run ``code``, SIGINT ``delay`` s after ``after()`` turns true (default: once submitted), and
    a second one ``again`` s later; (reply, seconds from the last SIGINT to the cell's reply)."""
    sent = []

    def interrupt():
        end = time.monotonic() + 60
        while after is not None and not after() and time.monotonic() < end:
            time.sleep(0.002)
        time.sleep(delay)
        k.km.interrupt_kernel()
        sent.append(time.monotonic())
        if again is not None:
            time.sleep(again)
            k.km.interrupt_kernel()
            sent.append(time.monotonic())

    t = threading.Thread(target=interrupt)
    t.start()
    r = k.run(code, timeout=120)
    done = time.monotonic()
    t.join()
    return r, done - sent[-1] if sent and sent[-1] <= done else 0.0


def baseline(k, option: str) -> float:
    """Seconds a 0.05 s cell takes under ``option`` uninterrupted (start, stop, read, report), the
    slower of two runs: what an interrupted cell's output may take on top of stopping at once (py-spy
    beside memray takes over a second on this loaded 2-core machine)."""
    took = []
    for _ in range(2):
        t0 = time.monotonic()
        r = k.run(f"%%profile {option}\nbusy(0.05)\n")
        took.append(time.monotonic() - t0)
        assert r.status == "ok" and shown_report(r), r.text()
    return max(took)


def assert_profiles_next(k):
    """The kernel runs the next profiled cell: a sampler report with busy() in it."""
    r = k.run(BUSY)
    assert r.status == "ok" and shown_report(r), r.text()
    got = k.value("(_profile.meta['backend'], bool((_profile.frames['name'] == 'busy').any()))")
    assert got == ("sampler", True), got


def in_a_kernel(test):
    """The marks of a test that drives a real kernel."""
    for mark in (pytest.mark.kernel, pytest.mark.timed, pytest.mark.timeout(900)):
        test = mark(test)
    return test


def fresh_kernel():
    from kernel import Kernel
    tmp = tempfile.mkdtemp(prefix="test-interrupts-")
    os.chmod(tmp, 0o1777)
    k = Kernel(extra_env={"TMPDIR": tmp})
    k.tmp = tmp
    return k


@in_a_kernel
def test_ctrl_c_while_loading_and_at_the_first_profiled_cell():
    """A fresh kernel per try: SIGINT at a random moment of %load_ext (pandas, plotly: most of a
    second), then of the first %%profile cell (its backend, reader and report imports). Each is a
    one-line interrupt or a normal result; loading again works and the next cell is profiled."""
    rng = random.Random(2028)
    kinds = {"load": [], "first": []}
    for _ in range(6):
        k = fresh_kernel()
        try:
            assert k.run(workloads.SOURCE).status == "ok"
            before = F.tmp_entries(k)
            r, _ = run_interrupted(k, "%load_ext profmagic", rng.uniform(0.02, 0.7))
            kinds["load"].append(outcome(r))
            assert k.run("%load_ext profmagic").status == "ok"
            r, _ = run_interrupted(k, BUSY, rng.uniform(0.0, 0.6))
            kind = outcome(r)
            kinds["first"].append(kind)
            if kind in ("ok", "cell"):   # the (partial) report, or why there is none (interrupted at once)
                assert shown_report(r) or "profmagic: no samples" in r.stderr, r.text()
            assert not F.profiler_children(k.pid)
            assert F.tmp_entries(k) - before == set()
            assert_profiles_next(k)
        finally:
            k.close()
            shutil.rmtree(k.tmp, ignore_errors=True)
    # Most interrupts landed in a step of profmagic's (not before the kernel ran the cell, nor after).
    assert sum(x == "interrupted-loading" for x in kinds["load"]) >= 4, kinds
    assert sum(x not in ("ok", "ipython") for x in kinds["first"]) >= 3, kinds


@pytest.fixture(scope="module")
def k():
    kern = F.start_kernel()   # profmagic loaded, a private TMPDIR
    assert kern.run(workloads.MEMORY_SOURCE).status == "ok"
    yield kern
    F.stop_kernel(kern)


@pytest.fixture
def clean(k):
    before = F.tmp_entries(k)
    yield k
    F.assert_clean(k, before)
    assert_profiles_next(k)


@in_a_kernel
@pytest.mark.parametrize("option", ["--backend memray", "--memory"])
def test_memray_interrupted_at_once_in_the_cell(clean, option, tmp_path):
    """0.05 s into the cell (a marker it writes): the interrupt is not swallowed: the cell stopped
    there (its measured wall is under a second of its 4), the partial report is shown, one line."""
    k = clean
    base = baseline(k, option)
    for i in range(3):
        mark = tmp_path / f"started-{i}"
        r, late = run_interrupted(k, f"%%profile {option}\nopen({str(mark)!r}, 'w').close()\n" + SPIN4,
                                  0.05, after=mark.exists)
        assert outcome(r) == "cell" and shown_report(r), r.text()
        got = k.value("(_profile.meta['partial'], _profile.meta['cell_wall'], 'bytes' in _profile.metrics)")
        assert got[0].startswith("the code raised KeyboardInterrupt") and got[2], got
        assert got[1] < 0.5, got           # the cell stopped at the interrupt, not after its 4 s
        assert late < base + 1.0, (late, base)   # its output came as soon as a 0.05 s cell's would


@in_a_kernel
@pytest.mark.parametrize("option", ["--backend memray", "--memory"])
def test_memray_interrupted_at_random_steps(clean, option):
    """SIGINTs at random moments from the cell's submission (preparing, starting memray, the cell),
    some followed by a second one (stopping, reading, the report): each gives one line or the partial
    report and stops at once; memray is never left tracking (the next memray cell records)."""
    k = clean
    base = baseline(k, option)
    rng = random.Random(28)
    kinds = []
    for i in range(10):
        again = rng.uniform(0.0, 0.3) if i % 2 else None
        delay = rng.uniform(0.0, 0.3)
        r, late = run_interrupted(k, f"%%profile {option}\n" + SPIN4, delay, again=again)
        kind = outcome(r)
        kinds.append(kind)
        if kind == "ok":   # only a lone SIGINT sent as the cell was submitted: ipykernel ignores it while idle
            assert again is None and delay < 0.05, (delay, r.text())
            continue
        assert late < base + 1.0, (kind, late, base)
        if kind == "cell":
            assert k.value("_profile.meta['cell_wall']") < 1.0
        assert "could not start" not in r.stderr, r.stderr
    assert any(x == "cell" for x in kinds), kinds
    r = k.run(f"%%profile {option}\nx = cell()\n", timeout=120)
    assert r.status == "ok" and shown_report(r) and "could not start" not in r.stderr, r.text()
    assert k.value("'bytes' in _profile.metrics and bool((_profile.frames['name'] == 'alloc').any())")


# -- a Ctrl-C while a helper thread starts, in this process -------------------------------------------
@contextmanager
def sigint_in_start(event: str):
    """A real SIGINT raised in this thread when a ``Thread.start()`` call begins (``"call"``: no thread
    runs yet) or returns (``"return"``: it runs, its owner does not hold it yet). A profile hook picks
    the moment, as a Ctrl-C could not be timed; the signal and Python's handling of it are real.
    Yields the events it fired at."""
    assert threading.current_thread() is threading.main_thread(), "signals reach the main thread only"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler, "deferred() leaves other handlers"
    fired = []

    def hook(frame, ev, arg):
        if ev == event and frame.f_code is threading.Thread.start.__code__ and not fired:
            fired.append(ev)
            signal.raise_signal(signal.SIGINT)

    previous = sys.getprofile()
    sys.setprofile(hook)
    try:
        yield fired
    finally:
        sys.setprofile(previous)


class Owner:
    """Holds a helper thread that waits until ``stop()``."""

    def __init__(self):
        self.done = threading.Event()
        self.thread = None

    def make(self) -> threading.Thread:
        return threading.Thread(target=self.done.wait, name="profmagic-test-owned", daemon=True)

    def stop(self) -> None:
        self.done.set()
        self.thread.join(10)


@pytest.mark.parametrize("event", ["call", "return"])
def test_sigint_while_a_thread_starts_leaves_it_started_and_held(event):
    """Started bare, the SIGINT leaves the owner nothing to join: the thread not started ("call") or
    running unheld ("return"). Through ``start_thread`` the owner holds the started thread, its stop
    joins it, and the KeyboardInterrupt is raised after."""
    bare = Owner()
    t = bare.make()
    with sigint_in_start(event) as fired, pytest.raises(KeyboardInterrupt):
        t.start()
        bare.thread = t
    assert fired == [event] and bare.thread is None
    assert (t.ident is None) if event == "call" else t.is_alive()
    bare.done.set()
    if t.ident is not None:
        t.join(10)

    owner = Owner()
    t = owner.make()
    with sigint_in_start(event) as fired, pytest.raises(KeyboardInterrupt):
        interrupts.start_thread(t, owner, "thread")
    assert fired == [event]
    assert owner.thread is t and t.ident is not None and t.is_alive()
    owner.stop()
    assert not t.is_alive()


@pytest.mark.parametrize("event", ["call", "return"])
def test_sigint_while_the_worker_sampler_starts(event):
    """A real WorkerSampler interrupted as its thread starts: the sampler runs and ``stop()`` joins it
    (a thread held but never started made ``join()`` raise) and returns its payload."""
    s = WorkerSampler(200.0, threads="all")
    with sigint_in_start(event) as fired, pytest.raises(KeyboardInterrupt):
        s.start()
    assert fired == [event] and s.running
    doc = decode(s.stop())
    assert not s.running and profmagic_threads() == []
    assert doc["pid"] == os.getpid() and doc["ended"] == "stopped" and doc["error"] is None


@pytest.mark.parametrize("event", ["call", "return"])
def test_sigint_while_the_child_sampler_starts(event, tmp_path):
    """A real ChildSampler (here in this process) interrupted as its thread starts: the thread runs, so
    the STOP file ends it and it closes its file (a thread never started left the file open)."""
    with sigint_in_start(event) as fired, pytest.raises(KeyboardInterrupt):
        ChildSampler(str(tmp_path), 200.0)
    assert fired == [event]
    running = [t for t in threading.enumerate() if t.name == "profmagic-child-sampler"]
    assert len(running) == 1 and running[0].is_alive()
    (tmp_path / STOP).touch()
    running[0].join(10)
    assert not running[0].is_alive()
    path = tmp_path / f"{os.getpid()}.jsonl"
    open_here = {os.path.realpath(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")}
    assert str(path) not in open_here
    head = path.read_text().splitlines()[0]
    assert f'"pid":{os.getpid()},' in head and '"rate":200.0' in head

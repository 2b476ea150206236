"""The built-in sampler, recorded in this process with real threads and real clocks.

Also home of the busy()/nap() workload the in-process backend tests share.
"""
import inspect
import math
import tempfile
import threading
import time

import pytest

from profmagic.sampling import tid_cpu_clock
from profmagic.threads import thread_label

import profmagic
from profmagic import transforms
from profmagic.backends import sampler
from profmagic.backends.base import Options

pytestmark = [pytest.mark.timed, pytest.mark.timeout(120)]

BUSY_CPU = 0.3
NAP = 0.6


def busy(seconds=BUSY_CPU):
    """Spin for ``seconds`` of this thread's CPU, in few calls (cProfile's overhead stays small)."""
    end = time.thread_time() + seconds
    x = 0
    while time.thread_time() < end:
        for i in range(20000):
            x += i
    return x


def nap(seconds=NAP):
    time.sleep(seconds)


TRUTH = {}


def work():
    """busy() then nap(), measuring what each really took: on a loaded machine busy's wall time
    exceeds its CPU time, so shares are checked against these measurements, not constants."""
    t0, c0 = time.perf_counter(), time.thread_time()
    busy()
    t1, c1 = time.perf_counter(), time.thread_time()
    nap()
    t2, c2 = time.perf_counter(), time.thread_time()
    TRUTH.update(busy_wall=t1 - t0, busy_cpu=c1 - c0, nap_wall=t2 - t1, nap_cpu=c2 - c1,
                 nap_share=(t2 - t1) / (t2 - t0))


def check_wall_shares(wall: dict):
    """nap ≈ 2/3 and busy ≈ 1/3 of work's wall time (as measured this run) within 10 points."""
    total = wall["busy"] + wall["nap"]
    assert wall["nap"] / total == pytest.approx(TRUTH["nap_share"], abs=0.10)
    assert wall["busy"] / total == pytest.approx(1 - TRUTH["nap_share"], abs=0.10)


def by_name(profile, metric, thread=None):
    """{function name: total} in ``metric``, optionally for one thread."""
    p = profile
    if thread is not None:
        p = p.subset(p.stacks["thread"] == thread)
    f = p.functions(metric)
    return dict(zip(f["name"], f["total"]))


@pytest.fixture
def clean_tmp(monkeypatch, tmp_path):
    """A private temp dir, checked empty afterwards: no backend may leave a file behind."""
    d = tmp_path / "tmp"
    d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    threads = set(threading.enumerate())
    yield d
    assert list(d.iterdir()) == []
    assert set(threading.enumerate()) <= threads, "a recorder left a thread running"


def record(module, fn, **opts):
    rec = module.Recorder(Options(**opts))
    try:
        rec.start()
        fn()
        cap = rec.stop()
    finally:
        rec.close()
    return module.read(cap, rec.options), cap


def test_cpu_clock_from_tid_matches_pthread_clock():
    """The fact the sampler rests on: the tid-built clock id reads the same clock as pthread's."""
    done = threading.Event()
    t = threading.Thread(target=lambda: (busy(0.05), done.wait(10)))
    t.start()
    try:
        time.sleep(0.02)
        a = time.clock_gettime(time.pthread_getcpuclockid(t.ident))
        b = time.clock_gettime(tid_cpu_clock(t.native_id))
        c = time.clock_gettime(time.pthread_getcpuclockid(t.ident))
        assert a <= b <= c
    finally:
        done.set()
        t.join()
    # A dead thread's clock is refused, not read from freed memory. join() returns when the Python
    # thread is done; the OS thread exits a moment later, so poll.
    deadline = time.monotonic() + 5
    with pytest.raises(OSError):
        while time.monotonic() < deadline:
            time.clock_gettime(tid_cpu_clock(t.native_id))
            time.sleep(0.001)


def test_wall_and_cpu_from_one_run(clean_tmp):
    p, cap = record(sampler, work, rate=100, mode="both")
    me = thread_label(threading.get_native_id(), threading.current_thread().name)
    assert me in p.threads and p.meta["cell_thread"] == me
    assert set(p.metrics) >= {"wall", "cpu", "off_cpu"}
    wall, cpu = by_name(p, "wall", me), by_name(p, "cpu", me)
    check_wall_shares(wall)
    assert wall["nap"] == pytest.approx(NAP, rel=0.10)
    assert wall["nap"] == pytest.approx(TRUTH["nap_wall"], rel=0.10)
    assert cpu["busy"] == pytest.approx(BUSY_CPU, rel=0.10)
    assert cpu.get("nap", 0.0) < 0.02
    # Frames: qualified names, the line executing (inside busy's body), kind python.
    fr = p.frames.set_index("name")
    lines, first = inspect.getsourcelines(busy)
    busy_lines = set(fr.loc[["busy"], "line"])
    assert busy_lines and all(first < n < first + len(lines) for n in busy_lines), (busy_lines, first)
    assert set(fr.loc[["busy"], "file"]) == {__file__} and set(fr.loc[["busy"], "kind"]) == {"python"}
    assert "test_wall_and_cpu_from_one_run" in fr.index
    # Per-sample weights in time order, and the native id column.
    assert p.samples is not None and p.samples["time"].is_monotonic_increasing
    assert p.thread_table.set_index("label").at[me, "tid"] == threading.get_native_id()
    assert cap.format == "speedscope" and p.raw.format == "speedscope"


def test_achieved_rate_is_reported_not_the_requested_one(clean_tmp):
    p, _ = record(sampler, lambda: busy(0.2), rate=1000, mode="wall")
    m = p.meta
    assert m["requested_rate"] == 1000
    assert m["rate"] == pytest.approx(m["ticks"] / m["duration"])
    me = m["cell_thread"]
    n = int(p.stacks.loc[p.stacks["thread"] == me, "samples"].sum())
    assert n == m["ticks"]  # one sample of the cell's thread per pass
    assert f"{m['rate']:.4g} Hz" in p.describe()


def test_cpu_mode_makes_cpu_primary(clean_tmp):
    p, _ = record(sampler, work, rate=100, mode="cpu")
    assert p.metric == "cpu"
    cpu = by_name(p, None, p.meta["cell_thread"])
    assert cpu["busy"] == pytest.approx(BUSY_CPU, rel=0.10)
    assert cpu.get("nap", 0.0) < 0.02


def ender(ready):
    ready.set()
    time.sleep(0.15)


def starter():
    busy(0.1)


def test_threads_that_start_and_end_while_recording(clean_tmp):
    ready = threading.Event()
    early = threading.Thread(target=ender, args=(ready,), name="ends-during")
    early.start()
    ready.wait()
    late = {}

    def body():
        early.join()  # ended during the recording
        t = threading.Thread(target=starter, name="starts-during")
        t.start()
        t.join()
        late["t"] = t
        nap(0.05)

    p, _ = record(sampler, body, rate=200, mode="both")
    lab_early = thread_label(early.native_id, "ends-during")
    lab_late = thread_label(late["t"].native_id, "starts-during")
    assert lab_early in p.threads and lab_late in p.threads
    assert "ender" in by_name(p, "wall", lab_early)
    cpu_late = by_name(p, "cpu", lab_late)
    assert cpu_late["starter"] == pytest.approx(0.1, rel=0.25)
    assert p.thread_table.set_index("label").at[lab_late, "tid"] == late["t"].native_id


class Boom(Exception):
    pass


def test_close_after_an_exception_leaves_nothing(clean_tmp):
    rec = sampler.Recorder(Options(rate=100))
    with pytest.raises(Boom):
        try:
            rec.start()
            busy(0.02)
            raise Boom()
        finally:
            rec.close()
    rec.close()  # idempotent
    assert not any(t.name == "profmagic-sampler" for t in threading.enumerate())


def test_raw_capture_reads_back_with_both_metrics(clean_tmp):
    p, cap = record(sampler, work, rate=100, mode="both")
    q = profmagic.load(cap.data)
    assert q.meta["backend"] == "sampler"
    for m in ("wall", "cpu"):
        assert q.total(m) == pytest.approx(p.total(m), rel=1e-9)
    assert q.sample_count == p.sample_count
    assert not math.isnan(q.total("cpu"))


def test_available_and_bad_options():
    ok, reason = sampler.available()
    assert ok and "ptrace" in reason
    from profmagic.session import make_options   # options are checked in one place, for every backend
    with pytest.raises(profmagic.ProfilerError, match="rate"):
        make_options(rate=0)
    with pytest.raises(profmagic.ProfilerError, match="mode"):
        make_options(mode="gpu")


def test_cpu_split_where_the_stack_changes():
    """An interval that ends in nap after busy: its CPU belongs to busy's tail. With busy at CPU rate
    1.0 before and nap at 0.0 after, a 0.6 rate means 60% of the interval was still busy: all of its
    6 ms go to the busy sample; the thread's total is unchanged and a stack that never changed keeps its CPU."""
    from profmagic.model import StackBuilder
    b = StackBuilder()
    fb, fn = b.frame("busy", "w.py", 1, "python"), b.frame("nap", "w.py", 5, "python")
    sb, sn = b.stack("T", [fb]), b.stack("T", [fn])
    other = b.stack("U", [fn])
    # V's busy rate before the change was under-measured (0.5 < the change's 0.6): u is clipped to
    # 1, so the interval counts as all busy and its CPU stays with busy.
    vb, vn = b.stack("V", [fb]), b.stack("V", [fn])
    t = 0.0
    for (sid, c), (vid, vc) in zip([(sb, 0.010), (sb, 0.010), (sn, 0.006), (sn, 0.0), (sn, 0.0)],
                                   [(vb, 0.005), (vb, 0.005), (vn, 0.006), (vn, 0.0), (vn, 0.0)]):
        t += 0.01
        b.add(sid, samples=1, time=t, wall=0.01, cpu=c)
        b.add(other, samples=1, time=t, wall=0.01, cpu=0.001)
        b.add(vid, samples=1, time=t, wall=0.01, cpu=vc)
    p = transforms.split_cpu_at_stack_changes(b.build(metric="wall"))
    cpu = dict(zip(p.stacks.index, p.stacks["cpu"]))
    assert cpu[sb] == pytest.approx(0.026) and cpu[sn] == pytest.approx(0.0, abs=1e-12)
    assert cpu[other] == pytest.approx(0.005)
    assert cpu[vb] == pytest.approx(0.016) and cpu[vn] == pytest.approx(0.0, abs=1e-12)
    mine = p.samples[p.samples["thread"] == "T"]["cpu"].tolist()
    assert mine == pytest.approx([0.010, 0.016, 0.0, 0.0, 0.0])
    assert p.samples["cpu"].sum() == pytest.approx(p.stacks["cpu"].sum())


def test_ctrl_c_inside_thread_start_leaves_a_recorder_that_closes(monkeypatch):
    """CI met this once: a SIGINT inside Thread.start() left the sampler's thread unstarted, and close()
    raised "cannot join thread before it is started" in place of the KeyboardInterrupt. The SIGINT here
    is real; the patched start() only places it at the one moment a random Ctrl-C rarely hits."""
    import os
    import signal
    real = threading.Thread.start

    def start(self):
        os.kill(os.getpid(), signal.SIGINT)
        return real(self)

    rec = sampler.Recorder(Options(rate=100, mode="both"))
    monkeypatch.setattr(threading.Thread, "start", start)
    with pytest.raises(KeyboardInterrupt):
        rec.start()
    monkeypatch.undo()
    rec.close()
    assert not [t for t in threading.enumerate() if t.name == "profmagic-sampler"]


def test_a_returned_functions_locals_are_freed_at_once():
    """The sampler once kept the last sampled leaf frame until its next tick, and a frame object held
    past its return keeps its locals: the numpy cell of bench_memray.py, run 32 times back to back
    beside it, peaked 50% over tracemalloc's figure without it (one 2 MB array freed a tick late)."""
    import gc
    import weakref

    class Big:
        pass

    def hold(seconds):
        big = Big()
        ref = weakref.ref(big)
        time.sleep(seconds)   # sampled in here, many times
        return ref

    o = Options(rate=1000, mode="both")
    rec = sampler.Recorder(o)
    gc.disable()   # no collection may free what the sampler keeps
    try:
        rec.start()
        alive = []
        for _ in range(20):
            ref = hold(0.03)
            alive.append(ref() is not None)   # at once, well inside the next tick
        cap = rec.stop()
    finally:
        rec.close()
        gc.enable()
    assert alive == [False] * 20
    p = sampler.read(cap, o)
    me = thread_label(threading.get_native_id(), threading.current_thread().name)
    wall = {k.rsplit(".", 1)[-1]: v for k, v in by_name(p, "wall", me).items()}
    assert wall["hold"] == pytest.approx(0.6, rel=0.2)   # it was sampled there

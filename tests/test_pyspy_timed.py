"""Reading py-spy's timed trace (issue 25 item 4): a real py-spy on this process, its trace read as the
backend reads it. What bench/bench_pyspy_error.py found our reading lost: the time before py-spy's
first sample of each thread (an exponential wait, more under load)."""
from __future__ import annotations

import json
import threading
import time

import pytest

from profmagic.backends import pyspy
from profmagic.backends.base import Options

pytestmark = [pytest.mark.timed, pytest.mark.timeout(120), pytest.mark.requires("py-spy", "ptrace")]


def spin(s):
    end = time.perf_counter() + s
    while time.perf_counter() < end:
        pass


def record(rate):
    rec = pyspy.Recorder(Options(rate=rate, mode="wall", extra={"timing": "timed"}))
    late = {}

    def worker():
        late["start"] = time.monotonic()
        late["tid"] = threading.get_native_id()
        late["ident"] = threading.get_ident()
        spin(0.1)
        time.sleep(0.1)
        late["end"] = time.monotonic()

    try:
        rec.start()
        t0 = time.monotonic()
        spin(0.1)
        t = threading.Thread(target=worker, name="late")
        t.start()
        t.join()
        time.sleep(0.1)
        t1 = time.monotonic()
        rec.bounds(start=t0, end=t1)
        cap = rec.stop()
    finally:
        rec.close()
    return rec, cap, t1 - t0, late


@pytest.mark.parametrize("rate", [100, 500])
def test_each_thread_is_counted_from_its_start_not_from_pyspys_first_sample(rate):
    rec, cap, wall, late = record(rate)
    opts = cap.meta["reader_options"]
    lo, hi = opts["window"]
    # The recorder's clock: started, then its sampling thread, then it said it samples; stopped after.
    assert rec.spawned_at <= rec.began_at <= rec.ready_at < rec.sigint_at
    assert set(opts["starts"]) >= {str(k) for k, v in rec.known.items() if v.get("start") is not None}
    p = pyspy.read(cap, Options(rate=rate, mode="wall", extra={"timing": "timed"}))
    st, table = p.stacks, p.thread_table
    main = table.loc[table["tid"] == threading.get_native_id(), "label"].item()
    worker = table.loc[table["tid"] == late["tid"], "label"].item()
    total = float(st.loc[(st["thread"] == main).to_numpy(), "wall"].sum())
    # The thread alive through the window fills it exactly: its first stretch is drawn back to the
    # window's start, its last one ends at the window's end (bar moments py-spy saw it with no Python
    # frame: 52 µs once).
    assert total == pytest.approx((hi - lo) * 1e-6, abs=0.001)
    assert total == pytest.approx(wall, abs=0.002)
    # The thread started inside the window counts from its own start to its end (both put on py-spy's
    # clock the same way, so their difference is exact bar the clock's branch).
    mine = float(st.loc[(st["thread"] == worker).to_numpy(), "wall"].sum())
    assert mine == pytest.approx(late["end"] - late["start"], abs=0.002)
    # The trace's zero lies between its bounds, and an event never comes before what it shows by more
    # than the zero's uncertainty: the worker's first event follows its start.
    doc = json.loads(cap.data)
    lo_z, hi_z, zero = pyspy.trace_zero(rec.clock(), max(float(e["ts"]) for e in doc))
    assert rec.spawned_at <= lo_z <= zero <= hi_z <= rec.ready_at and hi_z - lo_z < 0.5
    first = min(float(e["ts"]) for e in doc if e.get("ph") == "B" and e["tid"] == late["ident"])
    assert zero + first * 1e-6 >= late["start"] - (hi_z - lo_z) / 2 - 0.001


def test_without_starts_the_head_before_the_first_sample_is_lost():
    """The same trace read without ``starts`` (as before): the thread lacks the time from the window's
    start to py-spy's first event on it, which is never negative."""
    from profmagic.formats import chrome_trace
    rec, cap, wall, late = record(100)
    opts = dict(cap.meta["reader_options"])
    with_starts = chrome_trace.read(cap.data, **opts)
    opts.pop("starts")
    without = chrome_trace.read(cap.data, **opts)
    lo = opts["window"][0]
    tid = str(threading.get_ident())
    firsts = [float(e["ts"]) for e in json.loads(cap.data) if e.get("ph") == "B" and str(e["tid"]) == tid]
    head = max(0.0, min(f for f in firsts if f >= lo) - lo) * 1e-6 if any(f >= lo for f in firsts) else 0.0
    before = [f for f in firsts if f < lo]
    if before:   # py-spy saw the thread before the window: its open stack already covers the start
        head = 0.0

    def thread_total(p):
        t = p.thread_table
        label = t.loc[t["tid"] == threading.get_native_id(), "label"].item()
        return float(p.stacks.loc[(p.stacks["thread"] == label).to_numpy(), "wall"].sum())
    assert thread_total(with_starts) - thread_total(without) == pytest.approx(head, abs=1e-6)

"""What the timeline format tests share: a real two-thread recording and function-total comparison."""
from __future__ import annotations

import threading

import pytest

from profmagic import session
from profmagic.session import make_options
from workloads import busy, nap, spin


def two_thread_recording():
    """The built-in sampler, wall and CPU: the main thread busy then napping, a worker spinning then napping."""
    def work():
        t = threading.Thread(target=lambda: (spin(0.12), nap(0.08)), name="worker")
        t.start()
        busy(0.12)
        nap(0.08)
        t.join()
    return session.record("sampler", make_options(mode="both", rate=200), work)


def totals(p, metric):
    """Function totals by (name, file) in ``metric``."""
    f = p.functions(metric)
    return {(n, fl): float(t) for n, fl, t in zip(f["name"], f["file"], f["total"])}


def assert_same_functions(p, q, metrics=("wall", "cpu", "samples")):
    for m in metrics:
        a, b = totals(p, m), totals(q, m)
        assert a.keys() == b.keys(), m
        for k in a:
            assert b[k] == pytest.approx(a[k], rel=1e-9, abs=1e-12), (m, k)

"""The live view while a cell runs (issue 19): one display, updated in place about once a second
with a status line, then the top functions and a small icicle; the report replaces it at the end;
an interrupt shows what was recorded, then raises."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.timed

SETUP = '''
%load_ext profmagic
import time
def phase_a(t):
    end = time.perf_counter() + t
    while time.perf_counter() < end:
        pass
def phase_b(t):
    end = time.perf_counter() + t
    while time.perf_counter() < end:
        sum(range(50))
'''


@pytest.fixture(scope="module")
def k(kernel):
    r = kernel.run(SETUP)
    assert r.status == "ok", r.text()
    return kernel


def _updates(r) -> list[str]:
    return [u.get("text/plain", "") for u in r.updates]


@pytest.mark.parametrize("backend", ["sampler", pytest.param("py-spy", marks=pytest.mark.requires("py-spy", "ptrace"))])
def test_live_view_updates_in_place_then_the_report(k, backend):
    r = k.run(f"%%profile -b {backend}\nphase_a(2.0)\nphase_b(2.0)\n")
    assert r.status == "ok", r.text()
    live = [t for t in _updates(r) if t.startswith("● recording")]
    assert len(live) >= 3, _updates(r)
    counts = [int(t.split(" samples")[0].rsplit("· ", 1)[1].replace(",", "")) for t in live]
    assert counts == sorted(counts) and counts[-1] > counts[0], counts
    tops = [{line.split("%", 1)[1].strip() for line in t.splitlines() if "by self:" in line} for t in live]
    assert "phase_a" in tops[0] and "phase_b" not in tops[0], tops
    assert any("phase_b" in t for t in tops[1:]), tops
    # One display: the first is the status; the live view only ever updates it (the report's own
    # widget outputs are the other displays), and the report replaces it last.
    assert r.data[0]["text/plain"].startswith("recording with")
    assert not [d for d in r.data[1:] if d.get("text/plain", "").startswith(("● recording", "recording with"))]
    last = r.updates[-1]
    assert "<Profile" in last.get("text/plain", ""), last.get("text/plain")
    if backend == "py-spy":
        assert all("live view from the built-in sampler" in u.get("text/html", "") for u in r.updates[:-1]
                   if u.get("text/plain", "").startswith("● recording"))


def test_no_live_and_quiet(k):
    r = k.run("%%profile -b sampler --no-live\nphase_a(1.5)\n")
    assert not [t for t in _updates(r) if t.startswith("● recording")]
    r = k.run("%%profile -b sampler -q\nphase_a(1.5)\n")
    assert not r.data and not r.updates


@pytest.mark.requires("py-spy", "ptrace")
def test_interrupt_shows_what_was_recorded_then_raises(k, tmp_path):
    """Interrupted 2 s after the cell's code started (a marker the cell writes, not a guess at how
    long py-spy takes to attach): the partial report covers those 2 s."""
    import os
    import threading
    import time
    marker = tmp_path / "started"

    def interrupt():
        end = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < end:
            time.sleep(0.01)
        time.sleep(2.0)
        k.km.interrupt_kernel()

    before = set(os.listdir("/tmp"))
    t = threading.Thread(target=interrupt)
    t.start()
    r = k.run(f"%%profile -b py-spy\nopen({str(marker)!r}, 'w').close()\nphase_a(60)\n", timeout=90)
    t.join()
    assert r.status == "error" and r.error["ename"] == "KeyboardInterrupt", r.error
    s = k.value("dict(partial=_profile.meta['partial'], wall=_profile.meta['cell_wall'], "
                "n=_profile.sample_count, total=_profile.total('wall'))")
    assert "KeyboardInterrupt" in s["partial"]
    assert s["wall"] == pytest.approx(2.0, abs=0.3) and s["n"] > 0
    assert s["total"] == pytest.approx(s["wall"], rel=0.1)
    assert "<Profile" in r.updates[-1].get("text/plain", "")          # the partial report replaced the view
    left = [n for n in set(os.listdir("/tmp")) - before if n.startswith("profmagic-")]
    assert not left, left
    assert k.value("6 * 7") == 42


HUNG = '''
import threading
lk = threading.Lock()
def hold(t):
    with lk:
        time.sleep(t)
def wait_for_lock():
    lk.acquire()
    lk.release()
'''


@pytest.mark.parametrize("backend", ["sampler", pytest.param("perf --mode both",
                                                                marks=pytest.mark.requires("perf", "perf_event"))])
def test_a_hung_cell_shows_what_each_thread_does_now(k, backend):
    """The main thread waits 4.5 s on a lock a second thread holds while it sleeps: past NOW_AFTER
    (3 s) the live view names the waiting thread's current stack and its reason (lock), and the
    holder's stack (in time.sleep, under hold)."""
    from profmagic import live
    assert k.run(HUNG).status == "ok"
    r = k.run(f"%%profile -b {backend}\nh = threading.Thread(target=hold, args=(4.5,), name='holder')\n"
              "h.start()\ntime.sleep(0.2)\nwait_for_lock()\nh.join()\n")
    assert r.status == "ok", r.text()
    live_texts = [t for t in _updates(r) if t.startswith("● recording")]
    now = [t for t in live_texts if "  now: " in t]
    assert now and live.NOW_AFTER < 4.5, live_texts
    rows = [line for line in now[-1].splitlines() if line.startswith("  now: ")]
    main = [line for line in rows if '"MainThread"' in line]
    holder = [line for line in rows if '"holder"' in line]
    assert len(main) == 1 and len(holder) == 1, rows
    # the waiting thread: its leaf is the call it waits in, under the cell's function; its reason a lock
    assert main[0].split(" · ")[1] == "a lock or condition", main
    assert main[0].split(" · ")[2] == "acquire() ← wait_for_lock ← <module>", main
    # the holder: sleeping in time.sleep under hold, the function that holds the lock
    assert holder[0].split(" · ")[1] == "sleep", holder
    assert holder[0].split(" · ")[2].startswith("sleep() ← hold ← "), holder
    wakers = "perf gives them in the report" if backend.startswith("perf") else "they need --backend perf --mode both"
    assert f"wakers: not known live ({wakers})" in now[-1], now[-1]
    # before NOW_AFTER the view does not say it
    assert "  now: " not in live_texts[0], live_texts[0]

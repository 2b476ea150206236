"""Wakers and the wait chain (profmagic/waits.py) with the real perf --mode both on workloads that
measure their own waits (tests/wait_work.py), run as a child at nice 19."""
import json
import os
import subprocess
import sys
import time

import pytest
import wait_work

import profmagic
from profmagic import waits
from profmagic.backends import perf
from profmagic.backends.base import Options
from profmagic.formats import speedscope

SECONDS = 2.0
TOLERANCE = 0.10
PERF = pytest.mark.requires("perf", "perf_event")


def _python():
    """A 3.12+ interpreter with -X perf gives perf the Python functions' names (py:: frames)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    py312 = os.path.join(here, ".venv312", "bin", "python")
    return [py312, "-X", "perf"] if os.path.exists(py312) else [sys.executable]


def _record(scenario: str, system: bool = False):
    p = subprocess.Popen(["nice", "-n", "19", *_python(), wait_work.__file__, scenario, str(SECONDS)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        o = Options(pid=p.pid, rate=100, mode="both", system=system)
        rec = perf.Recorder(o)
        try:
            rec.start()
            p.stdin.write("go\n")
            p.stdin.flush()
            if scenario == "stdin":   # this process wakes the child: another process
                time.sleep(SECONDS / 2)
                p.stdin.write("wake\n")
                p.stdin.flush()
            measured = json.loads(p.stdout.readline())
            cap = rec.stop()
        finally:
            rec.close()
        return perf.read(cap, o), measured, p.pid
    finally:
        p.kill()
        p.wait()


def _label(prof, pid: int, tid: int) -> str:
    t = prof.thread_table
    return t["label"][(t["tid"] == tid) & (t["pid"] == pid)].iloc[0]


@PERF
def test_chain_main_waits_on_a_lock_the_busy_thread_releases():
    p, m, pid = _record("event")
    c = p.chain()
    main = _label(p, pid, pid)
    wall = p.duration
    assert c["thread"].iloc[0] == main and c["doing"].iloc[0] == "wait"
    assert c["reason"].iloc[0] == "lock"
    if _python()[0] != sys.executable:   # Python names: perf sees py:: frames with -X perf
        assert c["function"].iloc[0].endswith(("wait", "acquire")), c
        assert c["waker_function"].iloc[0] != ""
    assert abs(c["share"].iloc[0] - m["waited"] / wall) <= TOLERANCE, (c, m, wall)
    setter = c["waker"].iloc[0]
    assert setter != main and setter in p.threads
    assert c["thread"].iloc[1] == setter and c["doing"].iloc[1] == "cpu"
    if _python()[0] != sys.executable:
        assert c["function"].iloc[1] == "busy_until", c
    assert abs(c["share"].iloc[1] - m["setter_cpu"] / wall) <= TOLERANCE, (c, m, wall)
    assert len(c) == 2
    s = waits.sentence(p)
    assert s.startswith("The cell's thread waited") and setter in s and "a lock or condition" in s
    # profmagic.waits(p): the frame the chain came from; its shares of the cell's wall
    w = profmagic.waits(p)
    mine = w[(w["thread"] == main) & (w["waker"] == setter)]
    assert mine["seconds"].sum() == pytest.approx(c["seconds"].iloc[0], rel=0.05)
    assert (w["share"] * wall - w["seconds"]).abs().max() < 1e-9

    # The reasons and wakers survive save and load (speedscope's extension block).
    back = speedscope.read(speedscope.write(p))
    for col in ("woken_by", "ended"):
        a = back.samples[col].astype(object).where(back.samples[col].notna(), None).tolist()
        b = p.samples[col].astype(object).where(p.samples[col].notna(), None).tolist()
        assert a == b, col
    assert back.samples["waker_stack"].tolist() == p.samples["waker_stack"].tolist()
    again = back.chain()
    assert again[["thread", "doing", "reason", "function", "waker", "waker_function"]].equals(
        c[["thread", "doing", "reason", "function", "waker", "waker_function"]])
    _check_views(p, c)


def _check_views(p, c):
    """The Waits tab (live) and its block in the static twin, with frame names escaped."""
    from profmagic.report.static import static_html
    from profmagic.report.widget import Report
    from profmagic.views import waits as view
    evil = "<img src=x onerror=alert(1)>"
    fn = c["function"].iloc[1]
    frames = p.frames.assign(name=p.frames["name"].where(p.frames["name"] != fn, evil))
    q = p.replace(frames=frames)
    html = static_html(q)
    assert "<b>Waits (why threads were off-CPU, and who ended the waits)</b>" in html
    assert evil not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "<script" not in html
    # the header's sentence and the chain list name the hops
    assert f"on CPU in <code>&lt;img src=x onerror=alert(1)&gt;</code>" in html
    assert "class='profmagic-chain-sentence'>The cell&#x27;s thread waited" in html
    # the icicle: waiting stack, separator, waker stack; one hatching per reason
    ids, labels, parents, values, why = view._tree(p)
    sep = [i for i, l in enumerate(labels) if l == view.SEPARATOR.format(f"woken by {c['waker'].iloc[0]}")]
    assert sep
    pos = {n: k for k, n in enumerate(ids)}
    top = max(sep, key=lambda k: values[k])
    up, k = [], top
    while parents[k]:
        k = pos[parents[k]]
        up.append(labels[k])
    assert c["function"].iloc[0] in up and up[-1] == c["thread"].iloc[0]     # the waiting stack below
    above = [labels[k] for k in range(len(ids)) if parents[k] and pos[parents[k]] >= 0
             and any(ids[top] == a for a in _ancestors(k, parents, pos, ids))]
    assert c["waker_function"].iloc[0] in above                                 # the waker's stack on top
    fig = view.icicle(p)
    shapes = dict(zip(why, fig.data[0].marker.pattern.shape))
    assert shapes["lock"] == "/"
    assert len(set(view.PATTERNS.values())) == len(view.PATTERNS) - 2   # cpu/unknown plain; child/page fault share +
    r = Report(p, hold=False)
    i = r.TABS.index("Waits")
    r._show(i)
    kids = r.panes[i].children
    assert len(kids) == 3 and "The wait chain" in kids[0].value


@PERF
def test_a_wait_that_ends_by_timeout_says_so():
    """With --system perf sees the timer's wakeup whatever ran on the CPU (an idle one too)."""
    p, m, pid = _record("timeout", system=True)
    c = p.chain()
    assert c["thread"].iloc[0] == _label(p, pid, pid) and c["ended"].iloc[0] == "timeout", c
    assert c["waker"].iloc[0] == ""
    assert abs(c["share"].iloc[0] - m["waited"] / p.duration) <= TOLERANCE
    assert "(ended by timeout)" in waits.sentence(p)


@PERF
def test_system_names_another_process_that_woke_the_thread():
    p, m, pid = _record("stdin", system=True)
    c = p.chain()
    with open("/proc/self/comm") as f:
        comm = f.read().strip()
    me = f"{comm} (pid {os.getpid()})"
    assert c["thread"].iloc[0] == _label(p, pid, pid) and c["reason"].iloc[0] == "io", c
    assert c["waker"].iloc[0] == me and c["ended"].iloc[0] == "process"
    assert c["thread"].iloc[1] == me and c["doing"].iloc[1] == "process"
    assert abs(c["share"].iloc[0] - m["waited"] / p.duration) <= TOLERANCE
    sm = p.samples[p.samples["woken_by"] == me]
    assert set(sm["waker_pid"]) == {os.getpid()}
    assert any("pipe_write" in f for s in sm["waker_stack"] for f in s)   # the write that woke it


@PERF
def test_attach_system_names_another_process_that_woke_the_thread():
    """profmagic.attach(pid, backend="perf", mode="both", system=True) (``record --pid``, ``%profile
    --pid``): the attached process's main thread waits on its stdin; a thread of this process (another
    process) writes the line that wakes it."""
    import threading
    p = subprocess.Popen(["nice", "-n", "19", *_python(), wait_work.__file__, "stdin", str(SECONDS)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    waker = {}

    def drive():
        with open(f"/proc/self/task/{threading.get_native_id()}/comm") as f:
            waker["comm"] = f.read().strip()
        p.stdin.write("go\n")
        p.stdin.flush()
        time.sleep(SECONDS / 2)
        p.stdin.write("wake\n")
        p.stdin.flush()
    driver = threading.Thread(target=drive, daemon=True)

    def announced(text):   # every recorder has started
        if text.startswith("recording") and not driver.is_alive() and not waker:
            driver.start()
    try:
        assert p.stdout.readline().strip() == "ready"
        prof = profmagic.attach([p.pid], duration=4 * SECONDS, backend="perf", mode="both", system=True,
                                announce=announced)
        driver.join()
        m = json.loads(p.stdout.readline())
    finally:
        p.kill()
        p.wait()
    me = f"{waker['comm']} (pid {os.getpid()})"
    c = prof.chain()
    assert c["thread"].iloc[0] == _label(prof, p.pid, p.pid) and c["reason"].iloc[0] == "io", c
    assert c["waker"].iloc[0] == me and c["ended"].iloc[0] == "process", c
    assert abs(c["seconds"].iloc[0] - m["waited"]) <= TOLERANCE * m["wall"], (c, m)
    sm = prof.samples[prof.samples["woken_by"] == me]
    assert set(sm["waker_pid"]) == {os.getpid()}
    assert any("pipe_write" in f for s in sm["waker_stack"] for f in s)   # the write that woke it
    assert prof.meta["processes"][next(iter(prof.meta["processes"]))]["pid"] == p.pid


def test_system_is_refused_where_it_cannot_name_wakers(tmp_path):
    """--system needs perf --mode both (or wall): another backend or perf's cpu clock is refused
    before anything is recorded, for attach, record --pid and record -- COMMAND alike."""
    from test_reasons import _documented

    from profmagic.errors import ProfilerError
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        for backend, mode in (("py-spy", "wall"), ("perf", "cpu"), ("perf", None)):
            with pytest.raises(ProfilerError) as e:
                profmagic.attach([p.pid], duration=1, backend=backend, mode=mode, system=True)
            assert str(e.value).startswith(f"--system needs --backend perf --mode both (here --backend {backend} "
                                           f"--mode {mode or 'cpu'})"), str(e.value)
            _documented("system-needs-perf-both", str(e.value))
        for argv in (["--pid", str(p.pid), "-b", "perf", "--mode", "cpu"],
                     ["-b", "sampler", "--", sys.executable, "-c", "0"]):
            out = tmp_path / "p.speedscope.json"
            r = subprocess.run([sys.executable, "-m", "profmagic", "record", "--system", *argv, "-o", str(out)],
                               capture_output=True, text=True, timeout=120)
            assert r.returncode == 2 and "--system needs --backend perf --mode both" in r.stderr, (argv, r.stderr)
            assert not out.exists()
        assert not profmagic.procfs.ended(p.pid)   # attach refused before it touched the process
    finally:
        p.kill()
        p.wait()


def test_without_wakers_the_chain_stops_and_says_what_it_needs():
    """The built-in sampler sees reasons but no wakers."""
    import threading
    from profmagic.backends import sampler
    rec = sampler.Recorder(Options(pid=os.getpid(), rate=100, mode="both"))
    ev = threading.Event()
    rec.start()
    try:
        ev.wait(0.5)
        cap = rec.stop()
    finally:
        rec.close()
    p = sampler.read(cap, Options(rate=100, mode="both"))
    assert not waits.has_wakers(p)
    w = waits.waits(p)
    assert set(w["waker"]) <= {""} and w["seconds"].sum() > 0.3
    assert waits.NO_WAKERS in (waits.sentence(p) or "")


def _ancestors(k, parents, pos, ids):
    while parents[k]:
        k = pos[parents[k]]
        yield ids[k]

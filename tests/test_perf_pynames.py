"""Python names in perf's stacks on CPython 3.11 (no perf trampoline): the recorder's poller reads the
target's Python stacks from its memory (backends/perf_pynames.py) and the reader splices them into
each record (formats/perf_pyframes.py). Real perf, a real 3.11 child (tests/pynames_work.py)."""
from __future__ import annotations

import json
import os
import subprocess
import time

import pytest
import pynames_work
import tools

import profmagic
from profmagic.backends import perf
from profmagic.backends.base import Options
from profmagic.errors import ProfileFormatError
from profmagic.formats import perf_pyframes, perf_script

pytestmark = [pytest.mark.timed, pytest.mark.timeout(240)]
PY311 = tools.find("python3.11")
NEEDS = pytest.mark.requires("python3.11", "perf", "perf_event")
SECONDS = 1.5


def _record(mode: str = "both", seconds: float = SECONDS, **extra):
    p = subprocess.Popen(["nice", "-n", "19", PY311, pynames_work.__file__, str(seconds)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        o = Options(pid=p.pid, rate=100, mode=mode, extra=extra)
        rec = perf.Recorder(o)
        try:
            rec.start()
            assert rec.mode == "native" and (rec.poller is not None) == extra.get("pynames", True)
            p.stdin.write("go\n")
            p.stdin.flush()
            ids = json.loads(p.stdout.readline())
            cap = rec.stop()
        finally:
            rec.close()
        return cap, perf.read(cap, o), ids, p.pid
    finally:
        p.kill()
        p.wait()


def _off_cpu_named(prof, tid: int, function: str) -> tuple[float, float]:
    """(off-CPU seconds of thread ``tid`` whose stack holds Python ``function`` of pynames_work.py, all
    its off-CPU seconds)."""
    sm = prof.samples
    th = prof.thread_table
    label = th["label"][th["tid"] == tid].iloc[0]
    rows = sm[(sm["thread"].astype(str) == label).to_numpy()]
    off = (rows["wall"] - rows["cpu"]).to_numpy()
    fr = prof.frames
    hit = {i for i in fr.index if fr.at[i, "name"] == function and fr.at[i, "kind"] == "python"
           and str(fr.at[i, "file"]).endswith("pynames_work.py")}
    named = [any(f in hit for f in prof.stacks.at[s, "stack"]) for s in rows["stack"]]
    return float(off[named].sum()), float(off.sum())


@NEEDS
def test_off_cpu_time_gets_the_python_functions_it_waited_in():
    cap, prof, ids, pid = _record()
    assert prof.meta["python_mode"] == "native"
    for who, fn in (("main", "blocked_on_lock"), ("holder", "hold_lock"), ("sleeper", "_nap")):
        named, off = _off_cpu_named(prof, ids[who], fn)
        assert off >= 0.9 * SECONDS and named >= 0.9 * off, (who, named, off, prof.meta["python_names"])
    # Each Python frame is under its caller: blocked_on_lock below main() below <module>.
    main = prof.thread_table["label"][prof.thread_table["tid"] == ids["main"]].iloc[0]
    stacks = prof.stacks[prof.stacks["thread"].astype(str) == main]["stack"]
    py = [[prof.frames.at[f, "name"] for f in s if prof.frames.at[f, "kind"] == "python"] for s in stacks]
    assert ["<module>", "main", "blocked_on_lock", "_take"] in py, py
    names = prof.meta["python_names"]
    assert "at 100 Hz" in names["from"] and "within 10 ms" in names["on_cpu"]
    assert names["counts"]["off_named"] >= 3 and "error" not in names
    # The report's header says where the names came from and how far to trust them.
    from profmagic.views.header import notes
    said = [n for n in notes(prof) if n.startswith("Python names: ")]
    assert len(said) == 1 and "at 100 Hz" in said[0] and "exact" in said[0] and "within 10 ms" in said[0], said
    # The snapshots are in the raw capture: the saved text reads back to the same names.
    assert b"\n# profmagic pyframes pid=" in cap.data and b"\n# py " in cap.data
    back = perf_script.read(prof.raw.data, source="saved", thread_labels="threads", native_names=True)
    assert _off_cpu_named(back, ids["main"], "blocked_on_lock") == _off_cpu_named(prof, ids["main"], "blocked_on_lock")
    # The same capture with no snapshot left: every record keeps its native frames, and the splice
    # moved no time between threads or reasons.
    bare = b"\n".join(ln for ln in cap.data.split(b"\n") if not ln.startswith(b"# py"))
    unnamed = perf_script.read(bare, source="no snapshots", thread_labels="threads", native_names=True)
    assert not (unnamed.frames["kind"] == "python").any()
    assert unnamed.meta["python_names"]["counts"]["off_named"] == 0
    for col in ("wall", "cpu"):
        by = [q.samples.groupby([q.samples["thread"].astype(str), q.samples["reason"].astype(str)])[col].sum()
              for q in (prof, unnamed)]
        assert by[0].to_dict() == by[1].to_dict(), col
    # Without the poller, perf alone sees only the interpreter: no Python frame at all.
    _, plain, ids2, _ = _record(pynames=False)
    assert _off_cpu_named(plain, ids2["main"], "blocked_on_lock")[0] == 0.0
    assert "python_names" not in plain.meta
    assert not (plain.frames["kind"] == "python").any()


@NEEDS
def test_the_chain_names_the_python_function_the_main_thread_waited_in():
    _, prof, ids, pid = _record()
    c = prof.chain()
    th = prof.thread_table
    label = {who: th["label"][th["tid"] == tid].iloc[0] for who, tid in ids.items()}
    assert c["thread"].iloc[0] == label["main"] and c["reason"].iloc[0] == "lock"
    # The main thread waited in _take, a private helper blocked_on_lock calls in the same file: the chain
    # names blocked_on_lock, the call its caller made (waits._stack_functions).
    assert c["function"].iloc[0] == "blocked_on_lock" and c["waker"].iloc[0] == label["holder"], c
    assert c["thread"].iloc[1] == label["holder"] and c["reason"].iloc[1] == "sleep"
    assert c["function"].iloc[1] == "hold_lock", c
    assert "in blocked_on_lock" in profmagic.waits.sentence(prof)
    # A private function threading's Thread.run calls (another file) is the user's own: it keeps its name.
    w = profmagic.waits(prof)
    mine = w[w["thread"] == label["sleeper"]]
    assert mine["function"].iloc[0] == "_nap", mine


@NEEDS
def test_cpu_mode_names_on_cpu_samples_near_a_snapshot():
    """--mode cpu: perf stamps with CLOCK_MONOTONIC too, and a busy thread's samples get the names of
    its snapshot within one sampling interval."""
    code = ("import sys, time\nprint('ready', flush=True)\nsys.stdin.readline()\n"
            "def spin(end):\n    while time.monotonic() < end: pass\nspin(time.monotonic() + 1.5)\n")
    p = subprocess.Popen(["nice", "-n", "19", PY311, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        o = Options(pid=p.pid, rate=100, mode="cpu")
        rec = perf.Recorder(o)
        try:
            rec.start()
            p.stdin.write("go\n")
            p.stdin.flush()
            p.wait(30)
            cap = rec.stop()
        finally:
            rec.close()
    finally:
        p.kill()
        p.wait()
    prof = perf.read(cap, o)
    n = named = 0
    for s, w in zip(prof.stacks["stack"], prof.stacks["samples"]):
        n += w
        named += w * any(prof.frames.at[f, "name"] == "spin" and prof.frames.at[f, "kind"] == "python" for f in s)
    counts = prof.meta["python_names"]["counts"]
    assert n >= 20 and named >= 0.8 * n, (named, n, counts)


@NEEDS
def test_the_poller_is_reaped_and_its_files_removed_when_the_recording_fails():
    p = subprocess.Popen([PY311, "-c", "import time\nprint('ready', flush=True)\ntime.sleep(60)"],
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        rec = perf.Recorder(Options(pid=p.pid, rate=100, mode="both"))
        rec.start()
        poller = rec.poller.proc
        folder = rec.tmp.path
        assert os.path.exists(os.path.join(folder, "pyframes.txt")) and poller.poll() is None
        rec.close()   # as on an error or a Ctrl-C between start and stop: no stop() at all
        assert poller.returncode is not None and not os.path.exists(folder)
        assert rec.poller is None
    finally:
        p.kill()
        p.wait()


@NEEDS
def test_the_poller_ends_when_its_recorder_is_gone(tmp_path):
    """A recorder killed outright (no close): the poller's stdin ends with it, and so does the poller."""
    p = subprocess.Popen([PY311, "-c", "import time\nprint('ready', flush=True)\ntime.sleep(60)"],
                         stdout=subprocess.PIPE, text=True)
    script = os.path.join(os.path.dirname(perf.__file__), "perf_pynames.py")
    try:
        assert p.stdout.readline().strip() == "ready"
        launcher = subprocess.Popen(
            [PY311, "-c", "import subprocess, sys\n"
             f"q = subprocess.Popen([sys.executable, {script!r}, '--pid', '{p.pid}', '--rate', '100', '--out', "
             f"{str(tmp_path / 'o.txt')!r}], stdin=subprocess.PIPE, stdout=subprocess.PIPE)\n"
             "assert q.stdout.readline() == b'ready\\n'\nprint(q.pid, flush=True)\nimport os; os._exit(0)"],
            stdout=subprocess.PIPE, text=True)
        poller = int(launcher.stdout.readline())
        launcher.wait()
        deadline = time.monotonic() + 5
        while os.path.exists(f"/proc/{poller}") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not os.path.exists(f"/proc/{poller}")
        text = (tmp_path / "o.txt").read_text()
        assert text.rstrip("\n").rsplit("\n", 1)[-1].startswith("# profmagic pyframes pid=")
    finally:
        p.kill()
        p.wait()


HEAD = "# profmagic perf-sched start=1.0 end=2.0 pid=5 threads=5:x cpu=5:0\n"


def test_a_bad_pyframes_line_is_a_format_error_naming_its_line():
    text = HEAD + "\n# profmagic pyframes pid=5 rate=100 version=3.11 reads=1 read_ms=0.2\n# py 1.5 5:7:0:10\n"
    with pytest.raises(ProfileFormatError) as e:
        perf_pyframes.parse(perf_pyframes.split(text)[1], 3, "cap")
    assert e.value.line == 4 and "with IDs defined before use" in str(e.value)
    text = HEAD + "\n# profmagic pyframes pid=5 rate=0 version=3.11\n"
    with pytest.raises(ProfileFormatError) as e:
        perf_pyframes.parse(perf_pyframes.split(text)[1], 3, "cap")
    assert "rate='0'" in str(e.value) and "above 0 and at most 1e6" in str(e.value)


@NEEDS
def test_a_poller_killed_mid_recording_leaves_its_snapshots_and_says_so():
    p = subprocess.Popen(["nice", "-n", "19", PY311, pynames_work.__file__, "1.5"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        o = Options(pid=p.pid, rate=100, mode="both")
        rec = perf.Recorder(o)
        try:
            rec.start()
            p.stdin.write("go\n")
            p.stdin.flush()
            time.sleep(1.0)
            rec.poller.proc.kill()   # a real SIGKILL: no summary line, maybe a line cut short
            ids = json.loads(p.stdout.readline())
            cap = rec.stop()
        finally:
            rec.close()
    finally:
        p.kill()
        p.wait()
    prof = perf.read(cap, o)
    names = prof.meta["python_names"]
    assert names["error"] == "the poller ended without its summary (exit -9)", names
    from profmagic.views.header import notes
    assert any(n.startswith("Python names: ") and n.endswith("(the poller ended without its summary (exit -9))")
               for n in notes(prof))
    # The main thread blocked before the kill: its one long wait still has a snapshot inside it.
    named, off = _off_cpu_named(prof, ids["main"], "blocked_on_lock")
    assert off >= 1.0 and named >= 0.9 * off, (named, off, names)


@pytest.mark.kernel
@pytest.mark.requires("perf", "perf_event")
def test_ctrl_c_in_a_311_kernel_reaps_the_poller_and_removes_its_files(kernel, tmp_path):
    """A real Ctrl-C (SIGINT to the kernel) in a perf cell: the poller is gone and its folder with it."""
    import glob
    if kernel.value("__import__('sys').version_info[:2] == (3, 11)") is not True:
        pytest.fail("this test needs the kernel on CPython 3.11 (the default .venv)")
    kpid = kernel.value("__import__('os').getpid()")
    assert kernel.run("%load_ext profmagic").error is None
    seen = []

    def polling():   # interrupt once the cell runs under perf with its poller
        seen[:] = [p for p in os.listdir("/proc") if p.isdigit() and _is_poller_of(p, kpid)]
        return bool(seen) and os.path.exists(marker)
    tmp = kernel.value("__import__('tempfile').gettempdir()")
    marker = str(tmp_path / "in-cell")
    r = kernel.run("%%profile --backend perf --mode both -q\nimport time\n"
                   f"open({marker!r}, 'w').close()\ntime.sleep(30)\n", timeout=120, interrupt_on=polling)
    assert seen, "no poller while the cell ran"
    assert r.error is not None and r.error["ename"] == "KeyboardInterrupt", r.error
    assert [p for p in seen if os.path.exists(f"/proc/{p}")] == []
    assert glob.glob(os.path.join(tmp, f"profmagic-perf-{kpid}-*")) == []
    # And a cell recorded after it still gets its names: nothing was left half-stopped.
    r = kernel.run("%%profile --backend perf --mode both -q\ndef napping():\n    time.sleep(0.5)\nnapping()\n",
                   timeout=120)
    assert r.error is None, r.error
    assert kernel.value("_profile.chain()['function'].iloc[0]") == "napping"


def _is_poller_of(pid: str, target: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    return any(a.endswith(b"perf_pynames.py") for a in argv) and str(target).encode() in argv

"""eu-stack: the reader (plain eu-stack text, stackcollapse-elfutils semantics, our sampled form)
and the recorder on a real pthread without Python state."""
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time

import procs
import pytest
import tools
from procs import wait_for

from native.cbuild import build_cthread, load_cthread
from profmagic.backends import eustack
from profmagic.backends.base import Options
from profmagic.errors import ProfileFormatError
from profmagic.formats import eu_stack, folded, sniff

pytestmark = pytest.mark.timeout(120)

# Small eu-stack outputs written by hand in eu-stack's layout (the corpus has none).
PLAIN = textwrap.dedent("""\
    PID 4242 - process
    TID 4242:
    #0  0x00007f32714e3503 __GI___clock_nanosleep
    #1  0x00007f3271915ada fu(int)
    #2  0x00005635c6310081 main
    TID 4243:
    #0  0x00007f32714e3503
    #1  0x00007f3271915ada worker
    #2  0x00007f3271915b00 start_thread
    TID 4242:
    #0  0x00007f32714e3503 __GI___clock_nanosleep
    #1  0x00007f3271915ada fu(int)
    #2  0x00005635c6310081 main
    """)

# stackcollapse-elfutils.pl's output for PLAIN (PARSING-RULES.md): root first, count 1 per TID
# block, a frame without a name is [unknown], names kept unchanged, lines sorted by cmp.
PLAIN_FOLDED = {
    (): "main;fu(int);__GI___clock_nanosleep 2\nstart_thread;worker;[unknown] 1\n",
    ("pid",): "PID=4242;main;fu(int);__GI___clock_nanosleep 2\nPID=4242;start_thread;worker;[unknown] 1\n",
    ("tid",): "TID=4242;main;fu(int);__GI___clock_nanosleep 2\nTID=4243;start_thread;worker;[unknown] 1\n",
    ("pid", "tid"): ("PID=4242;TID=4242;main;fu(int);__GI___clock_nanosleep 2\n"
                     "PID=4242;TID=4243;start_thread;worker;[unknown] 1\n"),
}

VARIANTS = textwrap.dedent("""\
    PID 77 - process
    TID 77:
    #0  0x00007fb21e0ed503 __GI___clock_nanosleep - /usr/lib/x86_64-linux-gnu/libc.so.6
        ../sysdeps/unix/sysv/linux/clock_nanosleep.c:71:10
    #1  0x00007fb21e515ada pysleep - /usr/lib/libpython3.11.so.1.0
        ./Modules/timemodule.c:2159:15
    #2  0x00007fb21e515ada time_sleep - /usr/lib/libpython3.11.so.1.0
        ./Modules/timemodule.c:383:9
    #3  0x00007fb21e3a6ee2 cfunction_vectorcall_O - /usr/lib/libpython3.11.so.1.0
    #4  0x00007fb21e2fd9c3 _PyEval_EvalFrameDefault - /usr/lib/libpython3.11.so.1.0
    #5  0x00007fb21e4508e4 PyEval_EvalCode - /usr/lib/libpython3.11.so.1.0
    #6  0x000055c6ea86e081 main - /usr/bin/python3.11
    """)


@pytest.mark.parametrize("opts", list(PLAIN_FOLDED))
def test_plain_matches_stackcollapse_elfutils(opts):
    p = eu_stack.read(PLAIN.encode(), raw_names=True, **{o: True for o in opts})
    assert folded.write_text(p, thread_roots=False) == PLAIN_FOLDED[opts]
    assert p.metric == "samples" and p.sample_count == 3
    assert sorted(p.threads) == ["Thread 4242", "Thread 4243"]


def test_module_source_and_inline_variants():
    p = eu_stack.read(VARIANTS.encode())
    (stack,) = p.stacks["stack"]
    names = [p.frames.at[f, "name"] for f in stack]
    # Interpreter frames fold into [python]; modules go to the file; inlined frames stay frames.
    assert names == ["main", "[python]", "time_sleep", "pysleep", "__GI___clock_nanosleep"]
    leaf = p.frames.loc[stack[-1]]
    assert (leaf["file"], leaf["line"]) == ("../sysdeps/unix/sysv/linux/clock_nanosleep.c", 71)
    assert p.frames.loc[stack[0], "file"] == "/usr/bin/python3.11"
    kept = eu_stack.read(VARIANTS.encode(), fold=False)
    kept_names = [kept.frames.at[f, "name"] for f in kept.stacks["stack"][0]]
    assert kept_names == ["main", "PyEval_EvalCode", "_PyEval_EvalFrameDefault", "cfunction_vectorcall_O",
                          "time_sleep", "pysleep", "__GI___clock_nanosleep"]
    # stackcollapse-elfutils keeps the " - module" suffix and ignores source lines.
    raw = eu_stack.read(VARIANTS.encode(), raw_names=True)
    assert folded.write_text(raw, thread_roots=False).split(";")[0] == "main - /usr/bin/python3.11"


def test_sniff():
    assert sniff(PLAIN.encode()) == "eu-stack"
    assert sniff(b"# profmagic eu-stack sampler pid=1 interval=0.01\n") == "eu-stack"
    assert not eu_stack.sniff(b"main;foo 3\n")


@pytest.mark.parametrize("text,where", [
    ("#0  0x1 main\n", "line 1"),
    ("PID 1 - process\nTID 1:\n#0  0x1 main\nthis is not eu-stack\n", "line 4"),
    ("\n\n", "byte offset 0"),
    ("# profmagic eu-stack sampler pid=1 interval=0.01 duration=1\nPID 1 - process\nTID 1: state=R cpu_ns=x\n"
     "#0  0x1 f\n", "line 3"),
])
def test_errors_name_the_place(text, where):
    with pytest.raises(ProfileFormatError) as e:
        eu_stack.read(text.encode(), source="bad.txt")
    assert "bad.txt" in str(e.value) and where in str(e.value)


@pytest.mark.requires("eu-stack", "ptrace")
def test_real_eu_stack_capture_of_a_live_process():
    child = subprocess.Popen([sys.executable, "-c", "import time\ndef snooze():\n print('ready', flush=True)\n"
                              " time.sleep(60)\nsnooze()"], stdout=subprocess.PIPE)
    try:
        # Ready: it said so, then went to sleep (S: nothing but the sleep blocks after the print).
        assert child.stdout.readline() == b"ready\n"
        assert wait_for(lambda: procs.state(child.pid) == "S", timeout=30)
        out = subprocess.run(["eu-stack", "-p", str(child.pid)], capture_output=True, check=True).stdout
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
    p = eu_stack.read(out, source="live")
    assert sniff(out) == "eu-stack"
    assert p.threads == [f"Thread {child.pid}"]
    names = [p.frames.at[f, "name"] for f in p.stacks["stack"][0]]
    assert "[python]" in names and "time_sleep" in names
    assert "clock_nanosleep" in names[-1]  # eu-stack may add a symbol version: @GLIBC_2.2.5


@pytest.fixture(scope="module")
def cthread_path(tmp_path_factory):
    return build_cthread(tmp_path_factory.mktemp("native"))


@pytest.fixture(scope="module")
def cthread(cthread_path):
    return load_cthread(cthread_path)


def _leaf_names(p, rows):
    return [p.frames.at[p.stacks.at[r, "stack"][-1], "name"] for r in rows]


# The recorder on its own process (a C thread 80 ms busy / 80 ms asleep, 4 s), in a fresh interpreter:
# each eu-stack snapshot unwinds every thread, and threads earlier tests leave in pytest's slow it. After
# test_cluster_ray, the ~8 native threads Ray keeps after ray.shutdown() took a snapshot from ~10 to ~43 ms
# (each eu-stack indexes _raylet.so's unwind tables anew): 19 Hz of the 50 asked. Fresh: 46.8-50.1 Hz
# in 8 runs at load 4-5 on 2 cores (the helper runs at realtime priority), well inside 20-60.
RECORD_CTHREAD = textwrap.dedent("""
    import os, pickle, sys, time
    tests, lib_path, out = sys.argv[1:]
    sys.path.insert(0, tests)
    import procs
    from native.cbuild import load_cthread
    from profmagic.backends import eustack
    from profmagic.backends.base import Options
    lib = load_cthread(lib_path)
    before = {pid for pid, _ in procs.children()}
    assert lib.cthread_start(80, 80, 0) == 0
    rec = eustack.Recorder(Options(pid=os.getpid(), rate=50))
    try:
        rec.start()
        tmp = rec.tmp.path
        time.sleep(4)
        cap = rec.stop()
    finally:
        rec.close()
        lib.cthread_stop()
    left = {pid for pid, _ in procs.children()} - before
    with open(out, "wb") as f:
        pickle.dump(dict(cap=cap, busy_ms=lib.cthread_busy_total_ms(), sleep_ms=lib.cthread_sleep_total_ms(),
                         tmp_left=os.path.exists(tmp), children_left=sorted(left)), f)
""")


@pytest.mark.requires("eu-stack", "gcc", "ptrace")
@pytest.mark.timed
def test_recorder_native_thread_own_root_shares_and_labels(cthread_path, tmp_path):
    out = tmp_path / "run.pickle"
    res = subprocess.run([sys.executable, "-c", RECORD_CTHREAD, os.path.dirname(os.path.abspath(__file__)),
                          cthread_path, str(out)], capture_output=True, text=True, timeout=90)
    assert res.returncode == 0, res.stderr[-3000:]
    with open(out, "rb") as f:
        run = pickle.load(f)
    cap, busy_ms, sleep_ms = run["cap"], run["busy_ms"], run["sleep_ms"]
    assert not run["tmp_left"] and run["children_left"] == []
    p = eustack.read(cap, Options())
    assert p.meta["backend"] == "eu-stack" and 20 <= p.meta["rate"] <= 60
    assert set(p.metrics) >= {"wall", "cpu", "off_cpu"}
    # The C thread is its own root: its stacks start at the thread entry, with no Python frame.
    rows = [i for i, st in enumerate(p.stacks["stack"])
            if any(p.frames.at[f, "name"] == "cthread_main" for f in st)]
    assert rows
    threads = set(p.stacks.loc[rows, "thread"])
    assert len(threads) == 1
    (thread,) = threads
    assert thread in p.meta["native_threads"] and thread not in p.meta["python_threads"]
    for r in rows:
        names = [p.frames.at[f, "name"] for f in p.stacks.at[r, "stack"]]
        assert "[python]" not in names and names.index("cthread_main") <= 2  # __clone3;start_thread
    w = p.stacks.loc[rows]
    in_busy = w["stack"].map(lambda st: any(p.frames.at[f, "name"] == "cthread_busy" for f in st))
    in_sleep = w["stack"].map(lambda st: any(p.frames.at[f, "name"] == "cthread_sleep" for f in st))
    total = w["wall"].sum()
    truth = busy_ms / (busy_ms + sleep_ms)
    assert abs(w.loc[in_busy, "wall"].sum() / total - truth) < 0.10
    assert abs(w.loc[in_sleep, "wall"].sum() / total - (1 - truth)) < 0.10
    # On/off-CPU labels match what the thread was doing.
    s = p.samples[p.samples["thread"] == thread]
    busy_s = s["stack"].isin(w.index[in_busy])
    sleep_s = s["stack"].isin(w.index[in_sleep])
    assert s.loc[busy_s, "on_cpu"].mean() >= 0.8
    assert (~s.loc[sleep_s, "on_cpu"]).mean() >= 0.8
    # The label comes from where eu-stack stopped the thread (leaf pc just after `syscall`), not
    # from the state read after it detached: every C-thread sample carries that evidence.
    c_tid = thread.split("(")[-1].split(",")[0].split(")")[0] if "(" in thread else thread.split()[1]
    tid_lines = [ln for ln in cap.data.decode().split("\n") if ln.startswith(f"TID {c_tid}:")]
    assert tid_lines and all(" insys=" in ln for ln in tid_lines)
    # Root here: the helper and its eu-stack children ran at realtime priority 1, and said so.
    if os.geteuid() == 0:
        assert p.meta["sched"] == "SCHED_RR:1"
    # CPU time goes to the busy function; the sleep carries wall time only.
    assert w.loc[in_busy, "cpu"].sum() > 0.7 * w["cpu"].sum()
    # The main thread (sleeping here) is a Python thread with a [python] frame.
    main = [t for t in p.threads if t.endswith('"MainThread"')]
    assert main and main[0] in p.meta["python_threads"]


@pytest.mark.requires("eu-stack", "gcc", "ptrace")
def test_keep_interpreter_frames_option(cthread):
    cap = tools.record_for(eustack.Recorder(Options(pid=os.getpid(), rate=50)), 0.3)
    kept = eustack.read(cap, Options(extra={"keep_interpreter_frames": True}))
    names = set(kept.frames["name"])
    assert "_PyEval_EvalFrameDefault" in names and "[python]" not in names
    # By default the interpreter's runs fold away: into the Python frames they ran (read from this
    # process's memory around each unwind), here this very test function.
    p = eustack.read(cap, Options())
    folded = p.frames
    assert "_PyEval_EvalFrameDefault" not in set(folded["name"])
    # (A loaded parallel run once read only [python] here: the message says what the helper read.)
    assert "test_keep_interpreter_frames_option" in set(folded.loc[folded["kind"] == "python", "name"]), \
        (p.meta.get("python_stacks"), p.meta.get("python_names"), p.sample_count)


@pytest.mark.requires("eu-stack")
def test_start_fails_loudly_for_a_missing_pid():
    from profmagic.errors import ProfilerError
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    rec = eustack.Recorder(Options(pid=child.pid, rate=50))
    try:
        with pytest.raises(ProfilerError, match="eu-stack could not sample"):
            rec.start()
    finally:
        rec.close()
    assert rec.tmp.path is None


# A C++ program with a second thread, an inlined function and a demangled method, that aborts
# (dumping core) or, given an argument, waits to be dumped by gcore.
CRASH_CPP = r"""
#include <cstdlib>
#include <pthread.h>
#include <unistd.h>
namespace app {
struct Worker { static void crash(int depth); };
static inline __attribute__((always_inline)) void inlined_step(int d) { if (d > 0) abort(); }
void Worker::crash(int depth) { inlined_step(depth); }
}
static void *waiter(void *) { pause(); return 0; }
int main(int argc, char **) {
    pthread_t t;
    pthread_create(&t, 0, waiter, 0);
    usleep(100000);
    if (argc > 1) {
        write(1, "ready\n", 6);
        pause();
    }
    app::Worker::crash(1);
}
"""


def _build_crash(d) -> str:
    (d / "crash.cpp").write_text(CRASH_CPP)
    exe = str(d / "crash")
    subprocess.run(["g++", "-O1", "-g", "-o", exe, str(d / "crash.cpp"), "-lpthread"], check=True)
    return exe


def _gcore(exe, d) -> str:
    """A core of the program while it waits, dumped by gdb's gcore."""
    import glob
    child = subprocess.Popen([exe, "wait"], cwd=d, stdout=subprocess.PIPE)
    try:
        # main says it is about to pause(); then both threads asleep (S) means both are in pause(),
        # their only wait: read from /proc with a deadline, not hoped for after a sleep.
        assert child.stdout.readline() == b"ready\n"
        tasks = f"/proc/{child.pid}/task"
        assert wait_for(lambda: len(os.listdir(tasks)) == 2
                        and all(procs.state(int(t)) == "S" for t in os.listdir(tasks)), timeout=30, step=0.01)
        subprocess.run(["gcore", "-o", str(d / "core"), str(child.pid)], check=True, capture_output=True)
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
    return glob.glob(str(d / "core.*"))[0]


@pytest.fixture(scope="module")
def core(tmp_path_factory):
    """(executable, core file) made here: the program aborts with core dumps on, or, where the
    kernel sends cores elsewhere (core_pattern |... or a directory), gcore dumps it while it waits."""
    import glob
    import resource
    d = tmp_path_factory.mktemp("core")
    exe = _build_crash(d)
    with open("/proc/sys/kernel/core_pattern") as f:
        pattern = f.read().strip()
    if not pattern.startswith("|") and "/" not in pattern:
        subprocess.run([exe], cwd=d, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_CORE, (-1, -1)))
        cores = glob.glob(str(d / "core*"))
        if cores:
            return exe, cores[0]
    return exe, _gcore(exe, d)


@pytest.mark.requires("eu-stack", "g++", "gcore")
def test_eu_stack_of_a_gcore_core_file(tmp_path):
    exe = _build_crash(tmp_path)
    out, p = _core_profile((exe, _gcore(exe, tmp_path)), "-m", "-s")
    assert p.meta["target"] == "core" and p.sample_count == 2
    stacks = _thread_names_of(p)
    assert all(any("pause" in n for n in st) for st in stacks)
    assert sum("main" in st for st in stacks) == 1 and sum("start_thread" in st for st in stacks) == 1


def _core_profile(core, *flags):
    exe, path = core
    out = subprocess.run(["eu-stack", *flags, f"--core={path}", "-e", exe], capture_output=True).stdout
    assert out.startswith(b"PID "), out[:200]
    assert sniff(out) == "eu-stack"
    return out, eu_stack.read(out, source="core")


def _thread_names_of(p):
    return [[p.frames.at[f, "name"] for f in st] for st in p.stacks["stack"]]


@pytest.mark.parametrize("flags", [(), ("-m",), ("-s",), ("-i",), ("-d",), ("-r",), ("-a",), ("-b",), ("-v",),
                                   ("-l", "-m"), ("-q",)])
@pytest.mark.requires("eu-stack", "g++", "gcore")
def test_eu_stack_of_a_real_core_file(core, flags):
    out, p = _core_profile(core, *flags)
    assert b" - core" in out.split(b"\n")[0]
    assert p.meta["target"] == "core" and p.metric == "samples" and p.sample_count == 2
    assert len(p.threads) == 2
    stacks = _thread_names_of(p)
    if "-q" in flags:  # addresses only
        assert all(n == "[unknown]" for st in stacks for n in st)
        return
    aborting = next(st for st in stacks if any("abort" in n for n in st))
    waiting = next(st for st in stacks if st is not aborting)
    # -d alone names main's frame by the DWARF function at its address: the inlined one.
    assert ("inlined_step" if flags == ("-d",) else "main") in aborting and aborting[0] == "_start"
    assert any("pause" in n for n in waiting) and "start_thread" in waiting
    # No activation marks, module suffixes or build ids left in the names.
    assert not any(n.startswith("- ") or " - " in n or "@0x" in n for st in stacks for n in st), stacks
    waiter = next(n for n in waiting if "waiter" in n or "waiterPv" in n)
    assert waiter == {"-r": "_ZL6waiterPv", "-d": "waiter", "-i": "waiter", "-v": "waiter"}.get(
        next((f for f in flags if f in ("-r", "-d", "-i", "-v")), ""), "waiter")   # native_names.py: no parameters
    if {"-i", "-v"} & set(flags):  # inlined callers are frames of their own, at main's address
        i = aborting.index("main")
        assert aborting[i + 1:i + 3] == ["app::Worker::crash", "inlined_step"]
    files = {p.frames.at[f, "name"]: (p.frames.at[f, "file"], p.frames.at[f, "line"]) for f in p.frames.index}
    if {"-s", "-v"} & set(flags):  # source lines go to the frame above them
        assert files["main"][0].endswith("crash.cpp") and files["main"][1] > 0
        if "-v" in flags:
            assert files["inlined_step"][0].endswith("crash.cpp") and files["inlined_step"][1] == 7
    elif "-m" in flags:  # the module: a core prints bare file names, -l's map gives their paths
        libc = next(f for n, (f, _) in files.items() if "pause" in n)
        assert libc.endswith("libc.so.6") and (libc.startswith("/") == ("-l" in flags))
        assert os.path.basename(files["main"][0]) == "crash"


def test_no_snapshot_until_the_launchers_exec_has_returned(monkeypatch):
    """An eu-stack attach at any moment of execve gets the exec's SIGTRAP, which killed a recorded
    `sleep` (status 133) in a fresh clone's run. After the first snapshot of the stopped launcher,
    ``_exec_done`` holds the next until the command runs. A real launcher (launch._STOP_EXEC) gives
    the stopped state and the one after exec; the moment inside execve, when /proc already names
    the new exe, cannot be held for real, so that state is injected (its facts replaced)."""
    from profmagic.backends import eustack_helper as H
    from profmagic.launch import _STOP_EXEC
    proc = subprocess.Popen([sys.executable, "-S", "-c", _STOP_EXEC, "sleep", "5"])
    try:
        assert wait_for(lambda: H._state(proc.pid) == b"T", 10)
        launcher, waits = H._exe(proc.pid), {}
        assert not H._exec_done(proc.pid, launcher, waits) and "resumed" not in waits   # stopped: wait
        os.kill(proc.pid, signal.SIGCONT)
        assert wait_for(lambda: H._exe(proc.pid) != launcher and H._state(proc.pid) == b"S", 10)
        assert H._exec_done(proc.pid, launcher, {})   # asleep in clock_nanosleep: past execve
        # Inside execve (injected): the new exe shows, the task reads "59" (execve) or "running".
        for syscall in ("59", "running"):
            real = H.thread_facts(proc.pid, str(proc.pid))
            monkeypatch.setattr(H, "thread_facts", lambda pid, tid, s=syscall, r=real: dict(r, syscall=s))
            waits = {}
            assert not H._exec_done(proc.pid, launcher, waits), syscall
            monkeypatch.setattr(H, "thread_facts", lambda pid, tid, s=syscall, r=real:
                                dict(r, syscall=s, run_ns=r["run_ns"] + H.EXEC_CPU_NS))
            assert H._exec_done(proc.pid, launcher, waits), syscall   # 2 ms of CPU since: past it
            waits["resumed"] -= H.EXEC_WAIT
            monkeypatch.setattr(H, "thread_facts", lambda pid, tid, s=syscall, r=real: dict(r, syscall=s))
            assert H._exec_done(proc.pid, launcher, waits), syscall   # the last-resort bound
    finally:
        proc.kill()
        proc.wait()
    assert H._exec_done(proc.pid, launcher, {})   # it ended

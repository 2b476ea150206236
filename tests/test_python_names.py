"""Python function names in native stacks: CPython's frame chain read from memory (eu-stack's
helper, backends/pyframes.py) and perf's trampoline names, on real interpreters of each version."""
from __future__ import annotations

import os
import subprocess
import textwrap
import threading
import time

import pytest
import tools

from native.cbuild import build_cthread
from native.pynames import PYTHONS, share_above
from profmagic.backends import eustack, perf
from profmagic.backends.base import Options
from profmagic.backends.pyframes import OFFSETS, PyFrames

pytestmark = [pytest.mark.timed, pytest.mark.timeout(240)]

# Three threads in known places: a plain call chain, a method that calls back through C (map), and a
# C busy loop called from Python (ctypes).
CHILD = textwrap.dedent("""\
    import ctypes, sys, threading, time
    lib = ctypes.CDLL(sys.argv[1])
    lib.cthread_busy.argtypes = [ctypes.c_double]
    def leaf_sleep():
        time.sleep(60)
    def chain():
        leaf_sleep()
    class K:
        def meth(self):
            list(map(lambda x: time.sleep(60), [1]))
    def outer():
        while True:
            lib.cthread_busy(20.0)
    threading.Thread(target=lambda: K().meth(), name="mapper").start()
    threading.Thread(target=outer, name="busy").start()
    print("ready", flush=True)
    chain()
    """)


def _child(python: str, so: str, *flags: str) -> subprocess.Popen:
    c = subprocess.Popen([python, *flags, "-c", CHILD, so], stdout=subprocess.PIPE, text=True)
    assert c.stdout.readline().strip() == "ready"
    time.sleep(0.3)
    return c


def _stop(c: subprocess.Popen) -> None:
    c.kill()
    c.wait()
    c.stdout.close()


@pytest.fixture(scope="module")
def so(tmp_path_factory):
    return build_cthread(tmp_path_factory.mktemp("pynames"))


@pytest.mark.parametrize("version", [pytest.param(v, marks=pytest.mark.requires(f"python{v}"))
                                     for v in sorted(PYTHONS) if tuple(map(int, v.split("."))) in OFFSETS])
def test_frame_chain_read_from_memory(version, so):
    c = _child(PYTHONS[version][-1], so)
    try:
        pf = PyFrames(c.pid)
        assert pf.error is None and pf.version == tuple(int(x) for x in version.split("."))
        stacks = pf.read()
    finally:
        _stop(c)
    names = {tid: [[q for q, _, _ in g] for g in groups] for tid, groups in stacks.items()}
    assert len(names) == 3
    main = names[c.pid]
    assert main == [["leaf_sleep", "chain", "<module>"]]
    # The lambda runs in an eval-loop call of its own (map calls it from C): its own group.
    mapper = next(g for g in names.values() if g and g[0][0].endswith("<lambda>"))
    assert mapper[0] == ["K.meth.<locals>.<lambda>"] and mapper[1][0] == "K.meth"
    busy = next(g for g in names.values() if g and g[0][0] == "outer")
    assert busy[0][0] == "outer"
    files = {f for groups in stacks.values() for g in groups for _, f, _ in g}
    assert "<string>" in files  # the -c code's file name
    lines = {q: ln for groups in stacks.values() for g in groups for q, _, ln in g}
    assert lines["chain"] == 6 and lines["outer"] == 11


@pytest.mark.requires("python3.12", "eu-stack")
def test_eu_stack_names_the_python_caller_of_a_c_busy_loop(so):
    c = _child(PYTHONS["3.12"][-1], so)
    try:
        cap = tools.record_for(eustack.Recorder(Options(pid=c.pid, rate=50)), 3)
    finally:
        _stop(c)
    p = eustack.read(cap, Options())
    share, n = share_above(p)
    assert n >= 20 and share >= 0.9, (share, n, p.meta["python_stacks"])
    # Every [python] run of the main thread is replaced: its stack names chain and leaf_sleep.
    main = p.stacks[p.stacks["thread"].str.startswith(f"Thread {c.pid} ")]
    names = {p.frames.at[f, "name"] for st in main["stack"] for f in st}
    assert {"<module>", "chain", "leaf_sleep"} <= names and "[python]" not in names


@pytest.mark.requires("python3.12", "perf", "perf_event")
def test_perf_trampoline_names_the_python_caller_of_a_c_busy_loop(so):
    # A child can only get the trampoline from its own start (-X perf); the kernel's own process has it
    # activated by the recorder (backends/perf.py).
    c = _child(PYTHONS["3.12"][-1], so, "-X", "perf")
    rec = perf.Recorder(Options(pid=c.pid, rate=100, mode="cpu"))
    try:
        rec.start()
        assert rec.mode == "trampoline"
        time.sleep(3)
        cap = rec.stop()
    finally:
        rec.close()
        _stop(c)
    p = perf.read(cap, Options(rate=100))
    share, n = share_above(p)
    # (n counts cpu-clock samples: on a machine loaded to 20, the loop got 0.33 s of CPU in 3 s.)
    assert n >= 10 and share >= 0.9, (share, n)


PY312_KERNEL = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".venv312", "bin", "python")


@pytest.fixture(scope="module")
def kernel312(so):
    from kernel import Kernel
    k = Kernel(python=PY312_KERNEL)
    try:
        r = k.run("%load_ext profmagic\nimport ctypes, sys\n"
                  f"lib = ctypes.CDLL({so!r})\nlib.cthread_busy.argtypes = [ctypes.c_double]\n"
                  "def middle():\n    lib.cthread_busy(20.0)\n"
                  "def outer():\n    for _ in range(60):\n        middle()\n")
        assert r.error is None, r.error
        yield k
    finally:
        k.close()


@pytest.mark.kernel
@pytest.mark.requires("kernel312", "perf", "perf_event")
def test_perf_on_a_python_312_kernel_names_the_cells_functions(kernel312):
    """The live kernel: the recorder activates the trampoline for the recording and writes a jitdump
    of it, so perf's stacks name the cell's functions, whole, and trim to the cell by name."""
    r = kernel312.run("%%profile --backend perf --mode both -q\nouter()\n", timeout=180)
    assert r.error is None, r.error
    f = kernel312.value("""(lambda p: {
        'version': sys.version_info[:2], 'mode': p.meta['python_mode'], 'unwind': p.meta['trampoline_unwind'],
        'cell_wall': p.meta['cell_wall'],
        'cell': [[(p.frames.at[f, 'name'], str(p.frames.at[f, 'kind']), p.frames.at[f, 'file']) for f in s]
                 for s in p.stacks.loc[p.stacks.thread == p.meta['cell_thread'], 'stack']],
        'wall': float(p.stacks.loc[p.stacks.thread == p.meta['cell_thread'], 'wall'].sum())})(_profile)""")
    assert tuple(f["version"]) == (3, 12) and f["mode"] == "trampoline" and "jitdump" in f["unwind"]
    busy = [s for s in f["cell"] if any(n == "cthread_busy" and k == "native" for n, k, _ in s)]
    assert busy
    # Every stack of the cell's thread starts at the cell (its <module>, renamed In[N]) and names
    # outer and middle above the C loop.
    for s in f["cell"]:
        assert s[0][0] == "<module>" and s[0][2].startswith("In[")
    names = [[n for n, k, _ in s if k == "python"] for s in busy]
    assert sum(n[:3] == ["<module>", "outer", "middle"] for n in names) >= 0.9 * len(busy), names
    assert f["wall"] == pytest.approx(f["cell_wall"], rel=0.05)


def test_a_torn_thread_list_is_retried_not_the_end_of_the_reads(monkeypatch):
    """A walk of the thread list can meet a thread that ended as it was read. Once, that stopped the
    reads for the rest of a recording. The torn walk is injected here (a fake: the race cannot be
    timed for real); the next read names the threads again, and only walks that fail time after time
    stop the reads."""
    from profmagic.backends import pyframes
    pf = PyFrames(os.getpid())
    assert pf.error is None
    real = PyFrames.threads
    torn = [1]

    def threads(self):
        if torn[0]:
            torn[0] -= 1
            raise OSError(5, "Input/output error")
        return real(self)

    monkeypatch.setattr(PyFrames, "threads", threads)
    assert pf.read() == {} and pf.error is None
    again = pf.read()
    assert threading.get_native_id() in again and pf.error is None
    assert any(q == "test_a_torn_thread_list_is_retried_not_the_end_of_the_reads"
               for g in again[threading.get_native_id()] for q, _, _ in g)
    torn[0] = pyframes.MAX_FAILED_WALKS
    for _ in range(pyframes.MAX_FAILED_WALKS):
        assert pf.read() == {}
    assert pf.error and "failed 20 times in a row" in pf.error
    pf.close()

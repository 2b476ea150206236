"""%%profile with the native backends in a real kernel: a cell whose Python thread joins a pure C thread."""
from __future__ import annotations

import sys

import pytest

sys.path.insert(0, __import__("os").path.join(__import__("os").path.dirname(__file__), "native"))
from cbuild import build_cthread  # noqa: E402

pytestmark = [pytest.mark.timed, pytest.mark.kernel, pytest.mark.timeout(300), pytest.mark.requires("gcc")]

CELL = """%%profile --backend {backend} -q{options}
lib.cthread_start(80.0, 80.0, 10)
lib.cthread_join()
"""


@pytest.fixture(scope="module")
def knl(kernel, tmp_path_factory):
    so = build_cthread(tmp_path_factory.mktemp("cthread"))
    r = kernel.run("%load_ext profmagic\nimport sys\nsys.path.insert(0, 'tests/native')\n"
                   f"from cbuild import load_cthread\nlib = load_cthread({so!r})")
    assert r.error is None, r.error
    return kernel


def profile_of(k, backend, options=""):
    r = k.run(CELL.format(backend=backend, options=options), timeout=180)
    assert r.error is None, r.error
    # NaN (a metric a backend cannot measure, e.g. py-spy's CPU) is None: the value crosses as a literal.
    facts = k.value("""(lambda p, num=(lambda x: float(x) if x == x else None): {
        'threads': p.threads,
        'metric': p.metric,
        'metrics': p.metrics,
        'cell_thread': p.meta['cell_thread'],
        'cell_wall': p.meta['cell_wall'],
        'busy_ms': lib.cthread_busy_total_ms(), 'sleep_ms': lib.cthread_sleep_total_ms(),
        'by_thread': {t: {'names': sorted({p.frames.at[f, 'name'] for s in p.stacks.loc[p.stacks.thread == t, 'stack'] for f in s}),
                          'kinds': sorted({str(p.frames.at[f, 'kind']) for s in p.stacks.loc[p.stacks.thread == t, 'stack'] for f in s}),
                          'total': num(p.weights().loc[p.stacks.thread == t].sum())} for t in p.threads},
        'fn': {r['name']: (num(r['self']), num(r['total'])) for _, r in p.functions().iterrows()},
        'fn_cpu': {r['name']: num(r['total']) for _, r in p.functions('cpu').iterrows()} if 'cpu' in p.metrics else None,
    })(_profile)""")
    return facts


@pytest.mark.requires("eu-stack", "ptrace")
def test_eu_stack_sees_the_pure_c_thread_as_its_own_root(knl):
    f = profile_of(knl, "eu-stack")
    # Only the cell's thread and the C thread it started: the kernel's ZMQ/BLAS threads are dropped.
    assert len(f["threads"]) == 2, f["threads"]
    c = [t for t in f["threads"] if t != f["cell_thread"]][0]
    names = f["by_thread"][c]["names"]
    assert {"cthread_main", "cthread_busy", "cthread_sleep"} <= set(names)
    assert "[python]" not in names and "_PyEval_EvalFrameDefault" not in names
    busy_true = f["busy_ms"] / (f["busy_ms"] + f["sleep_ms"])
    busy_est = f["fn"]["cthread_busy"][1] / (f["fn"]["cthread_busy"][1] + f["fn"]["cthread_sleep"][1])
    assert abs(busy_est - busy_true) < 0.10, (busy_est, busy_true)
    # CPU time goes to the busy function, not to the sleep.
    assert f["fn_cpu"]["cthread_busy"] > 4 * f["fn_cpu"].get("cthread_sleep", 0.0)


@pytest.mark.requires("perf", "perf_event")
def test_perf_sees_the_busy_c_function_not_the_sleep(knl):
    f = profile_of(knl, "perf")
    assert f["metric"] == "cpu"
    busy = f["fn"]["cthread_busy"][1]
    total = sum(v["total"] for v in f["by_thread"].values())
    assert busy / total > 0.8
    # cpu-clock does not sample a sleeping thread: the off-CPU half of the C thread is invisible here.
    assert f["fn"].get("cthread_sleep", (0, 0))[1] < 0.05 * total
    # perf counts CPU time: at most the busy phases' wall time (less when the machine is contended).
    assert 0 < busy <= f["busy_ms"] / 1e3 * 1.1


@pytest.mark.requires("py-spy", "eu-stack", "ptrace")
def test_pyspy_plus_eu_stack_python_names_and_c_names(knl):
    f = profile_of(knl, "py-spy+eu-stack")
    assert len(f["threads"]) == 2, f["threads"]
    py = f["by_thread"][f["cell_thread"]]
    c = f["by_thread"][[t for t in f["threads"] if t != f["cell_thread"]][0]]
    assert "python" in py["kinds"] and "<module>" in py["names"]
    assert {"cthread_main", "cthread_busy"} <= set(c["names"]) and "python" not in c["kinds"]
    # The Python thread waits the whole cell: its wall time is about the C thread's.
    assert py["total"] == pytest.approx(c["total"], rel=0.25)


@pytest.mark.requires("perf", "perf_event")
def test_perf_mode_both_sees_the_sleep_off_cpu(knl):
    f = profile_of(knl, "perf", " --mode both")
    assert f["metric"] == "wall" and {"wall", "cpu", "off_cpu"} <= set(f["metrics"]), f["metrics"]
    busy_true = f["busy_ms"] / (f["busy_ms"] + f["sleep_ms"])
    busy, sleep = f["fn"]["cthread_busy"][1], f["fn"]["cthread_sleep"][1]
    assert abs(busy / (busy + sleep) - busy_true) < 0.05, (busy, sleep, busy_true)
    # The sleep is off-CPU time: wall, and at most one cpu-clock period (10 ms) of CPU.
    assert f["fn_cpu"].get("cthread_sleep", 0.0) <= 0.0101
    assert f["fn_cpu"]["cthread_busy"] > 0
    # The cell's thread waits in pthread_join the whole cell: its wall is the cell's, its stacks start
    # at the cell (trimmed at the cell's PyEval_EvalCode: no kernel, asyncio or IPython frames above).
    cell = f["by_thread"][f["cell_thread"]]
    assert cell["total"] == pytest.approx(f["cell_wall"], rel=0.03), (cell, f["cell_wall"])
    assert "cthread_join" in cell["names"]
    assert not {"_start", "Py_BytesMain", "task_step_impl", "PyEval_EvalCode"} & set(cell["names"]), cell["names"]

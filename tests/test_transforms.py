"""Stack transforms on hand-built profiles: exact totals, frames and threads."""
from __future__ import annotations

import pytest

from profmagic import transforms as T
from profmagic.threads import thread_label
from profmagic.model import StackBuilder

CELL = "/tmp/ipykernel_1/123.py"
MAIN = thread_label(100, "MainThread")
IOPUB = thread_label(101, "IOPub")
WORKER = thread_label(200, "worker")      # started by the cell
GONE = thread_label(201, "short")         # started by the cell, already finished


def build():
    b = StackBuilder()
    for label, tid in ((MAIN, 100), (IOPUB, 101), (WORKER, 200), (GONE, 201)):
        b.thread(label, tid=tid)
    boot = b.frame("_run_module_as_main", "<frozen runpy>", 1, "python")
    run_cell = b.frame("run_cell", "/x/IPython/core/interactiveshell.py", 3000, "python")
    mod = b.frame("<module>", CELL, 1, "python")
    busy = b.frame("busy", "/tmp/ipykernel_1/99.py", 5, "python")
    nap = b.frame("nap", "/tmp/ipykernel_1/99.py", 8, "python")
    sel = b.frame("select", "/usr/lib/python3/selectors.py", 468, "python")
    boot_t = b.frame("_bootstrap", "/usr/lib/python3/threading.py", 1002, "python")
    for i in range(30):
        b.add(b.stack(MAIN, (boot, run_cell, mod, busy)), wall=0.01, time=i * 0.01)
    for i in range(60):
        b.add(b.stack(MAIN, (boot, run_cell, mod, nap)), wall=0.01, time=0.3 + i * 0.01)
    for i in range(5):  # the magic itself, outside the cell
        b.add(b.stack(MAIN, (boot, run_cell)), wall=0.01, time=0.9 + i * 0.01)
    for i in range(90):
        b.add(b.stack(IOPUB, (boot_t, sel)), wall=0.01, time=i * 0.01)
    for i in range(20):
        b.add(b.stack(WORKER, (boot_t, busy)), wall=0.01, time=i * 0.01)
    b.add(b.stack(GONE, (boot_t, nap)), wall=0.01, time=0.0)
    return b.build(metric="wall", meta={"backend": "test", "rate": 100.0})


def test_thread_ids_come_from_the_table_never_from_labels():
    t = build().thread_table.set_index("label")
    assert t.at[MAIN, "tid"] == 100 and t.at[GONE, "tid"] == 201
    b = StackBuilder()
    b.add(b.stack(thread_label(42, 'a "b"'), (b.frame("f"),)))
    assert b.build().thread_table["tid"].isna().all()


def test_cell_threads_keeps_cell_and_new_threads():
    p = build()
    keep = T.cell_threads(p, 100, before={100, 101})
    assert keep == [MAIN, WORKER, GONE]
    q = T.drop_kernel_threads(p, 100, before={100, 101})
    assert q.threads == [MAIN, WORKER, GONE]
    assert q.sample_count == p.sample_count - 90
    assert set(q.samples["thread"]) == {MAIN, WORKER, GONE}
    assert q.meta["dropped_threads"] == [IOPUB]


def test_trim_to_cell_cuts_above_cell_and_drops_outside_samples():
    p = T.drop_kernel_threads(build(), 100, {100, 101})
    q = T.trim_to_cell(p, CELL, threads=[MAIN])
    names = lambda s: [q.frames.at[f, "name"] for f in s]
    main = q.stacks[q.stacks.thread == MAIN]
    assert sorted(map(tuple, map(names, main["stack"]))) == [("<module>", "busy"), ("<module>", "nap")]
    assert q.meta["samples_outside_cell"] == 5
    # Other threads are kept whole.
    w = q.stacks[q.stacks.thread == WORKER]
    assert [names(s) for s in w["stack"]] == [["_bootstrap", "busy"]]
    assert q.total() == pytest.approx(0.9 + 0.2 + 0.01)
    assert len(q.samples) == q.sample_count
    assert (q.samples["stack"] < len(q.stacks)).all()


def test_calibrate_makes_thread_seconds_equal_wall():
    p = T.trim_to_cell(T.drop_kernel_threads(build(), 100, {100, 101}), CELL, threads=[MAIN])
    q = T.calibrate(p, MAIN, 1.2)   # 90 samples over 1.2 s: 75 Hz effective
    main = q.stacks.thread == MAIN
    assert q.weights()[main].sum() == pytest.approx(1.2)
    assert q.meta["rate"] == pytest.approx(75.0) and q.meta["requested_rate"] == 100.0
    assert list(q.stacks["samples"]) == list(p.stacks["samples"])
    assert q.weights()[q.stacks.thread == WORKER].sum() == pytest.approx(20 / 75)
    assert q.samples["wall"].sum() == pytest.approx(q.total())


def test_calibrate_without_samples_is_marked():
    p = build()
    q = T.calibrate(p, thread_label(999, "none"), 1.0)
    assert q.meta["calibrated"] is False and q.total() == p.total()


def test_focus_and_prune_keep_totals():
    p = build()
    f = T.focus(p, "busy")
    assert f.total() == pytest.approx(0.5)
    assert all(f.frames.at[s[0], "name"] == "busy" for s in f.stacks["stack"])
    with pytest.raises(KeyError):
        T.focus(p, "nothing")
    q = T.prune(p, min_share=0.05)
    assert q.total() == pytest.approx(p.total())
    # The 5-sample magic stack and the 1-sample thread fall under 5%: they merge into their parents.
    assert q.functions().set_index("name").at["nap", "total"] == pytest.approx(0.6)


def test_drop_idle_threads():
    b = StackBuilder()
    f = b.frame("f", "a.py", 1, "python")
    b.add(b.stack("busy", (f,)), wall=0.1, cpu=0.1)
    b.add(b.stack("idle", (f,)), wall=0.1, cpu=0.0)
    p = b.build(metric="wall")
    assert T.drop_idle_threads(p).threads == ["busy"]


def test_rename_files_to_cells():
    p = build()
    q = T.rename_files(p, T.cell_names({CELL: 7, "/tmp/ipykernel_1/99.py": 3}))
    assert set(q.frames["file"]) >= {"In[7]", "In[3]"}
    assert CELL not in set(q.frames["file"]) and CELL in set(p.frames["file"])


def test_trim_native_to_cell_cuts_at_the_cells_exec():
    """Native stacks without Python names (perf on 3.11): the cell starts after the (k+1)-th
    PyEval_EvalCode from the root, k being the <module> frames above where the cell was started."""
    b = StackBuilder()
    f = {n: b.frame(n, kind="native") for n in ("_start", "Py_BytesMain", "PyEval_EvalCode", "_PyEval_EvalFrameDefault",
                                                 "builtin_exec", "cthread_join", "pthread_join", "task_step_impl",
                                                 "start_thread", "cthread_busy")}
    root = [f["_start"], f["Py_BytesMain"], f["PyEval_EvalCode"], f["_PyEval_EvalFrameDefault"],  # runpy
            f["builtin_exec"], f["PyEval_EvalCode"], f["_PyEval_EvalFrameDefault"]]             # IPython's exec
    cell = [f["builtin_exec"], f["PyEval_EvalCode"], f["_PyEval_EvalFrameDefault"], f["cthread_join"]]
    b.add(b.stack(MAIN, root + cell + [f["pthread_join"]]), wall=1.0, time=0.0)
    b.add(b.stack(MAIN, root + [f["task_step_impl"]]), wall=0.25, time=1.0)           # the magic, outside
    b.add(b.stack(MAIN, [f["task_step_impl"], f["_PyEval_EvalFrameDefault"]]), wall=0.5, time=1.5)  # truncated
    b.add(b.stack(WORKER, [f["start_thread"], f["cthread_busy"]]), wall=2.0, time=0.0)
    p = b.build(metric="wall")
    q = T.trim_native_to_cell(p, MAIN, entries_above=2)
    names = {tuple(q.frames.at[i, "name"] for i in s): w for s, w, t in zip(q.stacks["stack"], q.stacks["wall"],
                                                                          q.stacks["thread"])}
    assert names == {("_PyEval_EvalFrameDefault", "cthread_join", "pthread_join"): 1.0,
                     ("task_step_impl", "_PyEval_EvalFrameDefault"): 0.5,  # cannot be placed: kept
                     ("start_thread", "cthread_busy"): 2.0}
    assert q.meta["samples_outside_cell"] == 1 and q.meta["trimmed_native_to_cell"] == MAIN
    # No stack reaching the cell (the unwinding stopped short everywhere): nothing changes, and it says so.
    r = T.trim_native_to_cell(p, MAIN, entries_above=5)
    assert r.stacks.equals(p.stacks) and "not trimmed" in r.meta["trim_note"]

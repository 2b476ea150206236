"""Boilerplate above the first frame of user code folds into one labelled box, by a rule list a
user can extend; tables leave the folded frames out; boilerplate=False shows everything."""
from __future__ import annotations

import pytest

import profmagic
from profmagic import boilerplate as B
from profmagic.model import StackBuilder
from profmagic.views import cpuwall, sandwich

pytestmark = pytest.mark.timeout(120)

THREAD_START = ["__clone3", "start_thread", "execute_native_thread_routine",
                "std::thread::_State_impl<std::thread::_Invoker<std::tuple<void (*)(int), int> > >::_M_run()",
                "std::thread::_Invoker<std::tuple<void (*)(int), int> >::operator()()",
                "std::thread::_Invoker<std::tuple<void (*)(int), int> >::_M_invoke<0ul, 1ul>()",
                "void std::__invoke<void (*)(int), int>(void (*&&)(int), int&&)",
                "void std::__invoke_impl<void, void (*)(int), int>(std::__invoke_other, void (*&&)(int), int&&)"]
START_UP = [("_start", "/usr/bin/python3.11"), ("__libc_start_main", "/usr/lib/x86_64-linux-gnu/libc.so.6"),
            ("main", "/usr/bin/python3.11"), ("Py_BytesMain", "/usr/lib/libpython3.11.so.1.0"),
            ("Py_RunMain", "/usr/lib/libpython3.11.so.1.0"), ("[python]", ""),
            ("task_step", "/usr/lib/python3.11/lib-dynload/_asyncio.cpython-311-x86_64-linux-gnu.so"),
            ("gen_send_ex2", "/usr/lib/libpython3.11.so.1.0")]


def case_study_like():
    """A C++ worker thread under std::thread, and the kernel's main thread under start-up frames."""
    b = StackBuilder()
    lib = "/usr/lib/x86_64-linux-gnu/libstdc++.so.6"
    start = [b.frame(n, lib if "std" in n or "execute" in n else "/usr/lib/libc.so.6", None, "native")
             for n in THREAD_START]
    worker = b.frame("worker_main(int)", "/src/worker.cpp", 40, "native")
    props = b.frame("get_device_properties", "/src/worker.cpp", 12, "native")
    wait = b.frame("clock_nanosleep", "/usr/lib/libc.so.6", None, "native")
    b.add(b.stack("worker", start + [worker, props, wait]), samples=90, wall=0.9, cpu=0.0)
    b.add(b.stack("worker", start + [worker]), samples=10, wall=0.1, cpu=0.1)
    boot = [b.frame(n, f, None, "native") for n, f in START_UP]
    cell = b.frame("run_cell_code", "/src/ext.cpp", 7, "native")
    b.add(b.stack("MainThread", boot + [cell]), samples=30, wall=0.3, cpu=0.3)
    b.add(b.stack("MainThread", boot[:5]), samples=5, wall=0.05, cpu=0.0)   # nothing but start-up
    return b.build(metric="wall", meta={"backend": "eu-stack", "rate": 100.0})


def test_start_up_and_std_thread_chains_fold_into_one_labelled_frame():
    p = case_study_like()
    q = B.fold(p)
    names = q.frames["name"]
    stacks = {th: [[names[f] for f in st] for st in q.stacks.loc[q.stacks["thread"] == th, "stack"]]
              for th in ("worker", "MainThread")}
    assert stacks["worker"] == [["⋯ thread start · std::thread (folded)", "worker_main(int)", "get_device_properties",
                                 "clock_nanosleep"], ["⋯ thread start · std::thread (folded)", "worker_main(int)"]]
    assert stacks["MainThread"][0] == ["⋯ interpreter start-up · interpreter · asyncio (folded)", "run_cell_code"]
    assert stacks["MainThread"][1] == ["⋯ interpreter start-up (folded)", "Py_RunMain"]   # the leaf stays
    assert q.meta["boilerplate_folded"] == 2 * 8 + 8 + 4
    # Every total is kept; only the frames changed.
    assert q.total("wall") == p.total("wall") and list(q.stacks["wall"]) == list(p.stacks["wall"])
    assert B.fold(p) is q                      # cached per profile


def test_tables_lead_with_user_code_and_the_toggle_shows_everything():
    p = case_study_like()
    v = cpuwall.cpu_wall(p, thread="worker")
    assert list(v.table["function"][:1]) == ["worker_main(int)"]     # 0.9 s off-CPU of 1.0 s wall
    assert set(v.table["function"][1:3]) == {"get_device_properties", "clock_nanosleep"}
    assert not any(n in THREAD_START for n in v.table["function"])
    shown = cpuwall.cpu_wall(p, thread="worker", boilerplate=False).table
    assert set(THREAD_START) <= set(shown["function"])
    t = sandwich.table(p, "wall")
    assert "⋯" not in " ".join(t["name"]) and "__clone3" not in set(t["name"])
    assert "__clone3" in set(sandwich.table(p, "wall", boilerplate=False)["name"])
    fig = profmagic.icicle(p, thread="worker")
    labels = list(fig.data[0].labels)
    assert labels[:3] == ["worker", "⋯ thread start · std::thread (folded)", "worker_main(int)"]
    assert "boilerplate frames folded" in fig.layout.title.text
    assert "__clone3" in profmagic.icicle(p, thread="worker", boilerplate=False).data[0].labels


def test_a_user_rule_folds_a_framework(monkeypatch):
    p = profmagic.load("sched_loop;sched_dispatch;handler;work 5\nsched_loop;sched_idle 1\n")
    assert B.fold(p) is p                                              # nothing matches the default rules
    monkeypatch.setattr(B, "RULES", B.RULES + [B.Rule("my scheduler", name=r"sched_\w+")])
    q = B.fold(p)
    assert [q.frames["name"][f] for f in q.stacks["stack"][0]] == ["⋯ my scheduler (folded)", "handler", "work"]
    assert [q.frames["name"][f] for f in q.stacks["stack"][1]] == ["⋯ my scheduler (folded)", "sched_idle"]


def test_user_code_named_like_boilerplate_is_not_folded():
    # "main" and "run" are boilerplate only in the interpreter's binary and in threading.py.
    p = profmagic.load("main;run;work 3\n")
    assert B.fold(p) is p


def test_a_perf_stack_keeps_its_thread_root_and_folds_unresolved_runtime_frames():
    """perf stacks begin with FlameGraph's comm root: it stays; the thread start under it folds,
    with the library perf could not symbolise ([libstdc++...]) and raw addresses."""
    b = StackBuilder()
    names = ["cs-worker", "clone3", "start_thread", "[libstdc++.so.6.0.30]", "0x7f58b34d44a3",
             "std::thread::_State_impl<std::thread::_Invoker<std::tuple<void (*)(Engine*), Engine*> > >::_M_run",
             "worker_loop", "topk"]
    fids = [b.frame(n, None, None, "other" if i == 0 else "native") for i, n in enumerate(names)]
    b.add(b.stack("cs-worker-1/2", fids), samples=5)
    p = b.build(metric="samples", meta={"backend": "perf", "folded_thread_roots": False})
    q = B.fold(p)
    assert [q.frames["name"][f] for f in q.stacks["stack"][0]] == [
        "cs-worker", "⋯ thread start · unresolved · std::thread (folded)", "worker_loop", "topk"]

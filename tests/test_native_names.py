"""One name per C/C++ function across perf, eu-stack and py-spy --native (formats/native_names.py,
issue 24 item 7): the forms each tool prints, the readers that apply it, and the case study's
worker recorded by the real perf and eu-stack, joined by function name."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import pytest
import tools

from profmagic import boilerplate
from profmagic.backends import eustack, perf
from profmagic.backends.base import Options
from profmagic.formats import eu_stack, native_names, perf_script, speedscope

# (what eu-addr2line -C prints, what perf script prints): the same function.
SAME = [
    ("void std::__invoke_impl<void, void (*)(Engine*), Engine*>(std::__invoke_other, void (*&&)(Engine*), Engine*&&)",
     "std::__invoke_impl<void, void (*)(Engine*), Engine*>"),
    ("std::__invoke_result<void (*)(Engine*), Engine*>::type std::__invoke<void (*)(Engine*), Engine*>"
     "(void (*&&)(Engine*), Engine*&&)", "std::__invoke<void (*)(Engine*), Engine*>"),
    ("std::thread::_State_impl<std::thread::_Invoker<std::tuple<void (*)(Engine*), Engine*> > >::_M_run()",
     "std::thread::_State_impl<std::thread::_Invoker<std::tuple<void (*)(Engine*), Engine*> > >::_M_run"),
    ("std::thread::_Invoker<std::tuple<void (*)(Engine*), Engine*> >::operator()()",
     "std::thread::_Invoker<std::tuple<void (*)(Engine*), Engine*> >::operator()"),
    ("std::basic_ostream<char, std::char_traits<char> >& std::operator<< <std::char_traits<char> >"
     "(std::basic_ostream<char, std::char_traits<char> >&, char const*)", "std::operator<< <std::char_traits<char> >"),
    ("Foo::operator unsigned long() const", "Foo::operator unsigned long"),
    ("void* operator new[](unsigned long)", "operator new[]"),
    ("foo()::{lambda(int)#1}::operator()(int) const", "foo()::{lambda(int)#1}::operator()"),
    ("(anonymous namespace)::scan(int) [clone .cold]", "(anonymous namespace)::scan"),
    ("unsigned long count<int>(int)", "count<int>"),
    ("__clone3", "clone3"),
    ("pthread_cond_wait@@GLIBC_2.3.2", "pthread_cond_wait"),
]


@pytest.mark.parametrize("eu, perf_form", SAME)
def test_one_name_for_each_form(eu, perf_form):
    # perf's form is the one name (its own aliases aside), and eu-addr2line's full signature maps to it.
    assert native_names.name(eu) == native_names.name(perf_form) == perf_form


def test_names_left_alone():
    for n in ("worker_loop", "__GI___clock_nanosleep", "[unknown]", "memcpy@plt", "_PyEval_EvalFrameDefault"):
        assert native_names.name(n) == n
    assert native_names.unresolved("/usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30", 0xd44a2) == \
        "libstdc++.so.6.0.30+0xd44a2"


# The worker's stack as perf script printed it (perf 6.1, --call-graph dwarf) and as eu-stack's
# recorder wrote it, from one run of the case study.
PERF = textwrap.dedent("""\
    cs-worker 22024/22035 13922.863609: 1 cpu-clock:
    \t           cf545 __GI___clock_nanosleep (inlined)
    \t            25d8 get_device_properties (/c/libworker.so)
    \t            309e worker_loop (/c/libworker.so)
    \t            353d std::__invoke_impl<void, void (*)(Engine*), Engine*> (inlined)
    \t            353d std::__invoke<void (*)(Engine*), Engine*> (inlined)
    \t            353d std::thread::_Invoker<std::tuple<void (*)(Engine*), Engine*> >::operator() (inlined)
    \t            353d std::thread::_State_impl<std::thread::_Invoker<std::tuple<void (*)(Engine*), Engine*> > >::_M_run (/c/libworker.so)
    \t           d44a2 [unknown] (/usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30)
    \t           891f4 start_thread (/usr/lib/x86_64-linux-gnu/libc.so.6)
    \t          1098eb clone3 (/usr/lib/x86_64-linux-gnu/libc.so.6)

    """)
EU = textwrap.dedent("""\
    PID 22024 - process
    TID 22035:
    #0  0x00007fe6f22cf545 __GI___clock_nanosleep - /usr/lib/x86_64-linux-gnu/libc.so.6
    #1  0x00007fe6f27025d9 get_device_properties - /c/libworker.so
    #2  0x00007fe6f270309f worker_loop - /c/libworker.so
    #3  0x00007fe6f270353e void std::__invoke_impl<void, void (*)(Engine*), Engine*>(std::__invoke_other, void (*&&)(Engine*), Engine*&&) - /c/libworker.so
    #4  0x00007fe6f270353e std::__invoke_result<void (*)(Engine*), Engine*>::type std::__invoke<void (*)(Engine*), Engine*>(void (*&&)(Engine*), Engine*&&) - /c/libworker.so
    #5  0x00007fe6f270353e std::thread::_Invoker<std::tuple<void (*)(Engine*), Engine*> >::operator()() - /c/libworker.so
    #6  0x00007fe6f270353e std::thread::_State_impl<std::thread::_Invoker<std::tuple<void (*)(Engine*), Engine*> > >::_M_run() - /c/libworker.so
    #7  0x00007fe6f26d44a3 libstdc++.so.6.0.30+0xd44a2 - /usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30
    #8  0x00007fe6f22891f5 start_thread - /usr/lib/x86_64-linux-gnu/libc.so.6
    #9  0x00007fe6f23098ec __clone3 - /usr/lib/x86_64-linux-gnu/libc.so.6
    """)


def _names(p):
    return [p.frames.at[f, "name"] for f in p.stacks["stack"].iloc[0]]


def test_perf_and_eu_stack_readers_agree():
    pp = perf_script.read(PERF.encode(), native_names=True, thread_labels="threads")
    pe = eu_stack.read(EU.encode())
    assert _names(pp)[1:] == _names(pe)      # perf's stacks start with the thread's comm
    assert _names(pe)[:3] == ["clone3", "start_thread", "libstdc++.so.6.0.30+0xd44a2"]
    assert _names(pe)[5:7] == ["std::__invoke<void (*)(Engine*), Engine*>",
                               "std::__invoke_impl<void, void (*)(Engine*), Engine*>"]
    # Read back from its raw capture, perf's profile keeps the option.
    assert perf_script.read(PERF.encode(), native_names=True).raw.options["native_names"] is True
    # Without it, perf_script reads as stackcollapse-perf.pl does (FlameGraph's corpus).
    assert "std::__invoke_impl<void, void " in _names(perf_script.read(PERF.encode()))
    # eu-stack's raw_names keeps what eu-stack printed.
    assert "__clone3 - /usr/lib/x86_64-linux-gnu/libc.so.6" in _names(eu_stack.read(EU.encode(), raw_names=True))


def test_py_spy_native_frames_renamed():
    # py-spy's speedscope as it writes it for --native: a glibc alias and a signature.
    doc = {"$schema": "https://www.speedscope.app/file-format-schema.json", "shared": {"frames": [
        {"name": "__clone3", "file": "libc.so.6"}, {"name": "void run<int>(int)", "file": "/c/w.cpp", "line": 3},
        {"name": "Tensor.shape", "file": "/c/x.py", "line": 9}]},
        "profiles": [{"type": "sampled", "name": "Thread 1 \"MainThread\"", "unit": "none", "startValue": 0,
                      "endValue": 1, "samples": [[0, 1, 2]], "weights": [1]}]}
    p = native_names.rename(speedscope.read(json.dumps(doc).encode()), ("native", "other"))
    assert _names(p) == ["clone3", "run<int>", "Tensor.shape"]


def test_functions_fold_boilerplate_as_the_views_do():
    pe = eu_stack.read(EU.encode())
    every = pe.functions()
    folded = boilerplate.functions(pe)
    assert every.equals(boilerplate.functions(pe, boilerplate=False))
    assert {"clone3", "start_thread", "libstdc++.so.6.0.30+0xd44a2"} <= set(every["name"])
    # Thread start, std::thread's invoke chain and the unnamed libstdc++ frame above it fold away;
    # the worker's own functions stay, with the same totals.
    own = ["__GI___clock_nanosleep", "get_device_properties", "worker_loop"]
    assert sorted(folded["name"]) == own
    assert folded.set_index("name")["total"][own].tolist() == every.set_index("name")["total"][own].tolist()


CHILD = ("from profmagic import casestudy as cs\ne = cs.Engine()\nprint('ready', flush=True)\n"
         "while True:\n    cs.run(5, e)\n")


def _worker_top(p, n=10) -> list[str]:
    """The worker thread's n heaviest user-space functions (eu-stack sees no kernel frames; perf's
    stacks start with a root frame named after the thread, of kind other)."""
    w = p.subset(p.stacks["thread"].astype(str).str.contains("cs-worker").to_numpy())
    f = w.functions()
    kinds = dict(zip(w.frames["name"], w.frames["kind"].astype(str)))
    return [x for x in f["name"] if kinds.get(x) in ("native", "python")][:n]


@pytest.mark.timed
@pytest.mark.timeout(240)
@pytest.mark.requires("g++", "eu-stack", "ptrace", "perf", "perf_event")
def test_case_study_worker_joins_by_name_in_perf_and_eu_stack():
    c = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    try:
        assert c.stdout.readline().strip() == "ready"
        time.sleep(0.5)
        cap_e = tools.record_for(eustack.Recorder(Options(pid=c.pid, rate=50)), 3)
        cap_p = tools.record_for(perf.Recorder(Options(pid=c.pid, rate=100, mode="both")), 3)
    finally:
        c.kill()
        c.wait()
        c.stdout.close()
    pe, pp = eustack.read(cap_e, Options()), perf.read(cap_p, Options(rate=100))
    top_e, top_p = _worker_top(pe), _worker_top(pp)
    assert len(top_e) == len(top_p) == 10, (top_e, top_p)
    all_e, all_p = set(pe.frames["name"]), set(pp.frames["name"])
    assert [x for x in top_e if x not in all_p] == [] and [x for x in top_p if x not in all_e] == [], (top_e, top_p)
    # The names that used to differ.
    assert "worker_loop" in top_e and any(x.startswith("std::thread::_State_impl<") for x in top_e)
    assert "clone3" in all_e and "clone3" in all_p and "__clone3" not in all_e

"""perf and a thread that execs (issue 28): one thread row per tid, named by its comm after the exec.

``record -- cmd`` starts the command through a launcher that execs it, and a command may exec another
(``sh -c '...; exec dd ...'``): perf prints the thread's old comm before the exec and its new one
after. Both recordings are real; the stacks keep the comm of their moment as their root frame."""
from __future__ import annotations

import subprocess

import pytest
import tools

import profmagic

pytestmark = [pytest.mark.timed, pytest.mark.timeout(240), pytest.mark.requires("perf", "perf_event")]
BIN = tools.find("profmagic")


def _record(tmp_path, *args):
    out = tmp_path / "r.speedscope.json"
    r = subprocess.run([BIN, "record", "-b", "perf", "-o", str(out), *args], capture_output=True, text=True,
                       timeout=180)
    assert r.returncode == 0, r.stderr
    return profmagic.load(out)


def _roots(p, thread):
    st = p.stacks[p.stacks["thread"] == thread]
    return {p.frames.at[s[0], "name"] for s in st["stack"]}


def test_both_clocks_a_command_that_execs_is_one_thread_named_after_the_exec(tmp_path):
    p = _record(tmp_path, "--mode", "both", "--", "sleep", "0.3")   # record's default with perf chosen for it
    assert p.meta["backend"] == "perf" and {"wall", "cpu"} <= set(p.metrics)
    table = p.thread_table
    assert len(table) == 1 and table["tid"].nunique() == 1, table
    assert table.at[0, "name"] == "sleep" and table.at[0, "label"] == f'Thread {table.at[0, "tid"]} "sleep"'
    # The whole command's time is that thread's: the 0.3 s sleep and the start-up around it.
    assert 0.3 <= p.total("wall") <= p.meta["duration"] + 1e-6


def test_cpu_clock_a_command_that_execs_again_is_one_thread(tmp_path):
    # sh counts (on-CPU, comm "sh"), then execs dd (comm "dd") in the same thread.
    p = _record(tmp_path, "--mode", "cpu", "--", "sh", "-c",
                "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done; "
                "exec dd if=/dev/zero of=/dev/null bs=64k count=20000")
    assert p.metric == "cpu"
    table = p.thread_table
    assert list(table["name"]) == ["dd"] and table["tid"].nunique() == 1, table
    # Its samples before the exec keep sh as their root frame, those after dd.
    assert _roots(p, table.at[0, "label"]) == {"sh", "dd"}

"""Attaching to running processes (issue 9): profmagic.attach and %profile --pid, with real py-spy."""
from __future__ import annotations

import subprocess
import sys

import pytest

from profmagic import multi
from profmagic.attaching import attach
from profmagic.validate import pids as parse_pids
from profmagic.errors import ProfilerError

pytestmark = [pytest.mark.timed, pytest.mark.timeout(120)]

# Spins for argv[1] seconds; with argv[2] == "go", only after reading a line (sent once py-spy samples it).
TARGET = ("import sys, time\n"
          "def known_attach_target(d):\n"
          "    t = time.perf_counter()\n"
          "    while time.perf_counter() - t < d: pass\n"
          "def waiting():\n"
          "    sys.stdin.readline()\n"
          "print('ready', flush=True)\n"
          "if sys.argv[2:] == ['go']: waiting()\n"
          "known_attach_target(float(sys.argv[1]))\n")


def start(seconds: float, *extra: str) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", TARGET, str(seconds), *extra], stdout=subprocess.PIPE,
                         stdin=subprocess.PIPE)
    assert p.stdout.readline() == b"ready\n"
    return p


@pytest.fixture
def procs():
    made = []
    yield lambda *a: made.append(start(*a)) or made[-1]
    for p in made:
        p.kill()
        p.wait()
        p.stdout.close()
        p.stdin.close()


@pytest.mark.requires("py-spy", "ptrace")
def test_attach_one_second_records_known_function(procs):
    p = procs(60)
    prof = attach([p.pid], 1.0, backend="py-spy")
    f = prof.functions()
    top = f.iloc[0]
    assert top["name"] in ("known_attach_target", "<module>")
    share = f.set_index("name").at["known_attach_target", "total"] / prof.total()
    assert share > 0.9
    (lab,) = multi.processes(prof)
    assert lab.startswith(f"pid {p.pid} · python -c")
    assert prof.meta["processes"][lab]["ended"] is False
    assert prof.meta["attached"] == [p.pid] and prof.meta["backend"] == "py-spy"


@pytest.mark.requires("py-spy", "ptrace")
def test_attach_two_one_ends_during_recording(procs):
    # The short one spins 0.5 s from when both py-spy sample (announce): started before, it ended
    # while a loaded machine was still starting py-spy, which then could not attach.
    long, short = procs(60), procs(0.5, "go")

    def go(_):
        short.stdin.write(b"go\n")
        short.stdin.flush()

    prof = attach(f"{long.pid},{short.pid}", 1.5, announce=go)
    info = prof.meta["processes"]
    by_pid = {v["pid"]: v for v in info.values()}
    assert by_pid[short.pid]["ended"] is True and by_pid[long.pid]["ended"] is False
    t = multi.by_process(prof)
    short_lab = [k for k, v in info.items() if v["pid"] == short.pid][0]
    assert t.at[short_lab, "samples"] > 0      # what was sampled before it ended is kept
    assert t.loc[t["ended"]].index.tolist() == [short_lab]


def test_attach_errors():
    with pytest.raises(ProfilerError, match="no running process"):
        attach([2 ** 22 + 12345], 0.5)
    with pytest.raises(ProfilerError, match="cannot attach"):
        attach([1], 0.5, backend="sampler")
    with pytest.raises(ProfilerError, match="separated by commas"):
        parse_pids("12;x")


@pytest.mark.kernel
@pytest.mark.timeout(300)
@pytest.mark.requires("py-spy", "ptrace")
def test_line_magic_pid(procs):
    from kernel import Kernel
    p = procs(60)
    k = Kernel()
    try:
        r = k.run(f"%load_ext profmagic\n%profile --pid {p.pid} --duration 1 -q")
        assert r.status == "ok", r.text()
        names = k.value("list(_profile.functions()['name'][:3])")
        assert "known_attach_target" in names
        r = k.run("%profile --pid 1,x")
        assert "separated by commas" in r.stderr
    finally:
        k.close()

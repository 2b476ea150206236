"""eu-stack's helper under faults (issue 21): a stopped eu-stack is killed at its deadline, not waited
for; a target that becomes a zombie ends the sampling; every wait has a deadline."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from procs import descendants, wait_for

from profmagic.backends import eustack, eustack_helper
from profmagic.backends.base import Options

pytestmark = [pytest.mark.requires("eu-stack", "ptrace"), pytest.mark.timeout(120)]

TARGET = "import time\nprint('ready', flush=True)\nwhile True:\n    time.sleep(0.01)\n"


def _target():
    p = subprocess.Popen([sys.executable, "-c", TARGET], stdout=subprocess.PIPE)
    assert p.stdout.readline().strip() == b"ready"
    return p


def _eu_stacks(rec) -> list[int]:
    return [pid for pid, name in descendants(rec.proc.pid) if name == "eu-stack"]


def test_a_stopped_eu_stack_is_killed_at_its_deadline():
    target = _target()
    rec = eustack.Recorder(Options(pid=target.pid, rate=20))
    try:
        rec.start()
        stopped, end = set(), time.monotonic() + 3 * eustack_helper.EUSTACK_TIMEOUT
        while not stopped and time.monotonic() < end:   # catch one eu-stack while it runs
            for pid in _eu_stacks(rec):
                try:
                    os.kill(pid, signal.SIGSTOP)
                    stopped.add(pid)
                except ProcessLookupError:   # it finished between the listing and the signal
                    pass
            time.sleep(0.002)
        assert stopped, "no eu-stack caught running"
        # The helper kills and reaps it at its deadline: wait for that, with a deadline of our own.
        wait_for(lambda: not [pid for pid in stopped if os.path.exists(f"/proc/{pid}")],
                 timeout=3 * eustack_helper.EUSTACK_TIMEOUT, step=0.05)
        t0 = time.monotonic()
        cap = rec.stop()
        assert time.monotonic() - t0 < 30
    finally:
        rec.close()
        target.kill()
        target.wait()
    p = eustack.read(cap, Options())
    assert p.sample_count > 0       # the snapshots before and after the stopped one are kept
    assert not [pid for pid in stopped if os.path.exists(f"/proc/{pid}")]


def test_sampling_ends_when_the_target_becomes_a_zombie():
    target = _target()
    rec = eustack.Recorder(Options(pid=target.pid, rate=50))
    try:
        rec.start()                    # returns after the helper's first snapshot
        target.kill()                  # not reaped yet: a zombie
        # The helper ends its sampling and writes the capture: the sign it saw the zombie.
        wait_for(lambda: os.path.exists(rec.out), timeout=30, step=0.01)
        spawned = set()
        end = time.monotonic() + 2.0
        while time.monotonic() < end:  # the helper spawns no eu-stack for a zombie
            spawned |= set(_eu_stacks(rec))
            time.sleep(0.01)
        assert not spawned, spawned
        assert rec.proc.poll() is None or rec.proc.returncode == 0
        cap = rec.stop()
    finally:
        rec.close()
        target.wait()
    assert eustack.read(cap, Options()).sample_count > 0

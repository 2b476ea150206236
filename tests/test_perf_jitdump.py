"""The jitdump for this process's perf trampolines (backends/perf_jitdump.py) and the stale perf
map it must not trust: /tmp/perf-PID.map of an ended process whose pid came round again."""
import ctypes
import os
import subprocess
import sys
import time

import pytest

from profmagic.backends import perf, perf_jitdump as jd


@pytest.fixture
def own_map():
    """/tmp/perf-<this pid>.map for the test to write; whatever was there is put back after."""
    path = f"/tmp/perf-{os.getpid()}.map"
    aside = path + ".aside"
    if os.path.lexists(path):
        os.rename(path, aside)
    yield path
    for p in (path, f"/tmp/jit-{os.getpid()}.dump"):
        if os.path.lexists(p):
            os.unlink(p)
    if os.path.lexists(aside):
        os.rename(aside, path)


def test_lines_outside_this_process_memory_are_never_read(own_map):
    """CI's 3.12 kernel crashed (a segfault in memcpy, the map's first stale line + 3) when the map
    held an ended process's lines: only lines inside readable mappings are read, and of those only
    real trampolines become code loads."""
    code = ctypes.create_string_buffer(jd.TRAMPOLINE * 3)
    base = ctypes.addressof(code)
    ranges = jd.readable_ranges()
    unmapped = next(hi for (lo, hi), (nlo, _) in zip(ranges, ranges[1:]) if nlo - hi >= 1 << 20)
    with open(own_map, "w") as f:
        f.write(f"{unmapped + 0x1000:x} b py::gone:<old process>\n")
        for i in range(3):
            f.write(f"{base + 11 * i:x} b py::f{i}:x.py\n")
        f.write(f"{ctypes.addressof(ctypes.create_string_buffer(b'not code' * 2)):x} b py::data:x.py\n")
    dump = jd.JitDump()
    assert dump.open()
    try:
        assert dump.write() == 3
        assert [[e[2] for e in run] for _, run in dump.runs] == [["py::f0:x.py", "py::f1:x.py", "py::f2:x.py"]]
    finally:
        dump.close()


def test_a_stale_map_of_an_ended_process_is_removed_and_a_live_ones_kept():
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.readline()"], stdin=subprocess.PIPE)
    path = f"/tmp/perf-{child.pid}.map"
    try:
        with open(path, "w") as f:
            f.write("7f0000000000 b py::gone:<old process>\n")
        old = time.time() - 3600
        os.utime(path, (old, old))           # written before the child started: another process's
        perf._drop_stale_map(child.pid)
        assert not os.path.exists(path)
        with open(path, "w") as f:           # written since it started: its own, kept
            f.write("7f0000000000 b py::mine:x.py\n")
        perf._drop_stale_map(child.pid)
        assert os.path.exists(path)
    finally:
        child.stdin.close()
        child.wait()
        if os.path.exists(path):
            os.unlink(path)

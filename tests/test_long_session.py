"""Long-session stability (issue 8): one kernel profiles 200 tiny cells in a row, alternating backends.
RSS after cell 200 within 50 MB of cell 20, open fds flat, no thread left behind. The figures are
printed; with PROFMAGIC_WRITE_RESULTS=1 they replace this test's section of bench/RESULTS.md."""
from __future__ import annotations

import os
import sys

import pytest

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(400), pytest.mark.requires("py-spy", "ptrace")]
BACKENDS = ["py-spy", "sampler", "pyinstrument", "cprofile"]
CELLS = 200
SECTION = "## Long-session stability (issue 8)"


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def os_threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def test_200_cells(k):
    k.run("def tiny():\n    s = 0\n    for i in range(20000):\n        s += i\n    return s\n")
    base_threads = k.value("sorted(t.name for t in threading.enumerate())")
    fig = {}
    for i in range(1, CELLS + 1):
        b = BACKENDS[i % len(BACKENDS)]
        r = k.run(f"%%profile -b {b} -q --rate 100\ntiny(); busy(0.02)")
        assert r.error is None, (i, b, r.text())
        if i in (20, CELLS):
            fig[i] = (rss_mb(k.pid), fds(k.pid), os_threads(k.pid))
    names = k.value("sorted(t.name for t in threading.enumerate())")
    (rss20, fd20, th20), (rss200, fd200, th200) = fig[20], fig[CELLS]
    text = (f"\n{SECTION}\n\n`pytest tests/test_long_session.py`: one kernel, {CELLS} `%%profile -q --rate 100` cells "
            f"alternating {', '.join(BACKENDS)} (20k-iteration loop + 20 ms spin each).\n\n"
            f"| after cell | RSS (MB) | open fds | OS threads |\n|---|---|---|---|\n"
            f"| 20 | {rss20:.1f} | {fd20} | {th20} |\n| {CELLS} | {rss200:.1f} | {fd200} | {th200} |\n\n"
            f"RSS growth cell 20 → {CELLS}: {rss200 - rss20:+.1f} MB (limit 50 MB).\n")
    if os.environ.get("PROFMAGIC_WRITE_RESULTS"):  # a test run must not grow the results file
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
        from results import write_section
        write_section(text)
    print(text)
    assert rss200 - rss20 < 50, text
    assert fd200 <= fd20, text
    assert th200 <= th20, text
    assert names == base_threads, f"threads left: {sorted(set(names) - set(base_threads))}"


@pytest.fixture(scope="module")
def k():
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "faults", "conftest.py")
    spec = importlib.util.spec_from_file_location("faults_conftest", path)
    faults = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(faults)  # the fault suite's kernel, with profmagic loaded
    kern = faults.start_kernel()
    yield kern
    faults.stop_kernel(kern)

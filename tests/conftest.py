import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

import retries  # noqa: E402
import tools  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


@pytest.fixture(scope="session")
def corpus():
    """tests/data: the test inputs kept in the repository (see its README)."""
    if not os.path.isdir(os.path.join(DATA, "flamegraph")):
        pytest.fail(f"the test data is missing at {DATA}")
    return DATA


@pytest.fixture(scope="module")
def kernel():
    from kernel import Kernel
    k = Kernel()
    yield k
    k.close()


def pytest_configure(config):
    config.addinivalue_line("markers", "requires(*names): needs these tools or privileges (tests/tools.py); "
                                       "missing ones fail under CI=true or PROFMAGIC_REQUIRE_TOOLS=1, else skip")
    config.addinivalue_line("markers", "timed: asserts on the time, CPU or shares of a live workload (or is otherwise "
                                       "sensitive to CPU contention); `make test` runs these serially, after "
                                       "the others ran in parallel (-m 'not timed' -n 2)")


# Test files that must run on the same xdist worker (one after the other): both build the checkout
# in place (pip's in-tree build writes build/ and profmagic.egg-info/ in the repository).
SAME_WORKER = {"tests/test_wheel.py": "in-tree-build", "tests/test_binder.py": "in-tree-build"}


# The longest files (minutes each in `make test`'s parallel phase) start first, so that none of them is
# left running alone at the end.
SLOW_FIRST = ("tests/test_binder.py", "tests/test_wheel.py", "tests/test_browser.py", "tests/test_browser_memory.py",
              "tests/test_memray_magic.py", "tests/test_long_session.py", "tests/test_fuzz_readers.py",
              "tests/test_speedscope_app.py")


def pytest_collection_modifyitems(config, items):
    if hasattr(config, "workerinput"):   # an xdist worker: the scheduler hands out files in this order
        rank = {path: i for i, path in enumerate(SLOW_FIRST)}
        items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(SLOW_FIRST)))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile, except that the files of SAME_WORKER share one work unit."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class Scheduling(LoadFileScheduling):
        def _split_scope(self, nodeid):
            path = nodeid.split("::", 1)[0]
            return SAME_WORKER.get(path, path)

    return Scheduling(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    names = [n for m in item.iter_markers("requires") for n in m.args]
    gone = tools.missing(dict.fromkeys(names))
    if gone:
        tools.lacking("; ".join(gone))


def pytest_terminal_summary(terminalreporter):
    counts = os.environ.get("PROFMAGIC_TEST_COUNTS")   # set by `make test`: one JSON file per phase
    if counts and not hasattr(terminalreporter.config, "workerinput"):
        import json
        n = {k: len(terminalreporter.stats.get(k, [])) for k in ("passed", "failed", "error", "skipped", "xfailed",
                                                                  "xpassed")}
        with open(counts, "w") as f:
            json.dump(n, f)
    if retries.MISSES or retries.OVERLOADED:
        terminalreporter.section("counted misses (tests/retries.py)")
        for test_id, i, why in retries.MISSES:
            terminalreporter.line(f"{test_id} try {i}: {why}")
        for test_id, i, why in retries.OVERLOADED:
            terminalreporter.line(f"{test_id} try {i}: not counted, overloaded: {why}")
    if retries.MEASURED:
        terminalreporter.section("noise measured (PROFMAGIC_MEASURE_NOISE)")
        for test_id, tries in retries.MEASURED:
            terminalreporter.line(f"{test_id}: {retries.summary(tries)}")


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium (tests/browser.py) per browser test module."""
    import browser as B
    with B.chromium() as b:
        yield b

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


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    names = [n for m in item.iter_markers("requires") for n in m.args]
    gone = tools.missing(dict.fromkeys(names))
    if gone:
        tools.lacking("; ".join(gone))


def pytest_terminal_summary(terminalreporter):
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

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

CORPUS = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", "shared", "corpus"))


@pytest.fixture(scope="session")
def corpus():
    if not os.path.isdir(CORPUS):
        pytest.fail(f"the shared corpus is missing at {CORPUS}")
    return CORPUS


@pytest.fixture(scope="module")
def kernel():
    from kernel import Kernel
    k = Kernel()
    yield k
    k.close()

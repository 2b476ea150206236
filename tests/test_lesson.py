"""The teaching notebooks' share helpers (profmagic.casestudy.lesson) on a profile of known content."""
import pytest

from profmagic.casestudy import lesson
from profmagic.model import StackBuilder


def two_waits():
    """A thread's wait: 0.6 s named by Python frames (0.5 s in Tensor.result), 0.3 s native frames only."""
    b = StackBuilder()
    loop = b.frame("_PyEval_EvalFrameDefault", "/usr/bin/python3.11", None, "native")
    futex = b.frame("futex_wait", "[kernel]", None, "native")
    step = b.frame("train_step", "/src/cs.py", 10, "python")
    result = b.frame("Tensor.result", "/src/cs.py", 30, "python")
    b.add(b.stack("main", [step, result, futex]), samples=5, wall=0.5, cpu=0.0)
    b.add(b.stack("main", [step, futex]), samples=1, wall=0.1, cpu=0.0)
    b.add(b.stack("main", [loop, futex]), samples=3, wall=0.3, cpu=0.0)
    b.add(b.stack("other", [loop]), samples=2, wall=0.2, cpu=0.2)
    return b.build(metric="wall", meta={"backend": "perf", "rate": 100.0})


def test_named_counts_only_stacks_with_a_python_frame():
    p = two_waits()
    assert lesson.seconds(p, None, "main") == pytest.approx(0.9)
    assert lesson.seconds(p, None, "main", named=True) == pytest.approx(0.6)
    assert lesson.seconds(p, r"Tensor\.result", "main") == pytest.approx(0.5)
    assert lesson.seconds(p, None, "other", named=True) == 0.0
    assert lesson.seconds(p, None, None, "samples", named=True) == pytest.approx(6)

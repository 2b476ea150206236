"""Fuzzed readers (issue 8): every outcome is a Profile or a ProfileFormatError, never another exception,
never a hang (inputs are bounded; pytest-timeout), never memory beyond 10x the input (tracemalloc)."""
from __future__ import annotations

import cProfile
import glob
import marshal
import os
import time
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from profmagic import ProfileFormatError
from profmagic.formats import eu_stack, folded, perf_script, pstats, pyinstrument, speedscope, stap
from profmagic.model import Profile

pytestmark = pytest.mark.timeout(300)
CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "flamegraph")
MAX = 64 * 1024  # bytes of input per example
FUZZ = settings(max_examples=120, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _head(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read(MAX)


def _pstats_seed() -> bytes:
    pr = cProfile.Profile()
    pr.enable()
    sum(i * i for i in range(1000))
    sorted(str(i) for i in range(300))
    pr.disable()
    pr.create_stats()
    return marshal.dumps(pr.stats)


def _pyinstrument_seed() -> bytes:
    from pyinstrument import Profiler
    p = Profiler(interval=0.001)
    p.start()
    end = time.perf_counter() + 0.05
    while time.perf_counter() < end:
        pass
    p.stop()
    from pyinstrument.renderers.session import SessionRenderer
    return SessionRenderer().render(p.last_session).encode()


EU_SEED = (b"PID 4242 - process\nTID 4242:\n#0  0x00007f0000001000 __poll\n#1  0x0000555500001000 main\n"
           b"TID 4243:\n#0  0x00007f0000002000 __futex_wait\n#1  0x00007f0000003000 start_thread\n")


def seeds() -> dict:
    perf = sorted(glob.glob(os.path.join(CORPUS, "test", "perf-*.txt")))
    coll = sorted(glob.glob(os.path.join(CORPUS, "test", "results", "*collapsed-all.txt")))
    fold = [_head(p) for p in coll[:4]]
    ss = speedscope.write(folded.read(fold[0]))
    return {
        "perf_script": (perf_script, [_head(p) for p in perf[:4]]),
        "folded": (folded, fold),
        "stap": (stap, [_head(os.path.join(CORPUS, "extra", "stap-header-example.input.txt"))]),
        "speedscope": (speedscope, [ss]),
        "pstats": (pstats, [_pstats_seed()]),
        "pyinstrument": (pyinstrument, [_pyinstrument_seed()]),
        "eu_stack": (eu_stack, [EU_SEED]),
    }


SEEDS = seeds()


@st.composite
def mutated(draw, seed_list):
    data = bytearray(draw(st.sampled_from(seed_list)))
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["cut", "flip", "insert", "delete", "dup"]))
        pos = draw(st.integers(0, max(0, len(data) - 1)))
        if op == "cut":
            del data[pos:]
        elif op == "flip" and data:
            data[pos] = draw(st.integers(0, 255))
        elif op == "insert":
            data[pos:pos] = draw(st.binary(max_size=32) | st.sampled_from(
                [b";", b"\n", b"\t", b"{", b"]", b'"', b"-1", b"1e999", b"NaN", b"\x00", b"\xff\xfe", b" 0\n"]))
        elif op == "delete":
            del data[pos:pos + draw(st.integers(1, 64))]
        elif op == "dup" and data:
            data[pos:pos] = data[pos:pos + draw(st.integers(1, 256))]
    return bytes(data[:MAX])


def check(reader, data: bytes) -> None:
    tracemalloc.start()
    try:
        out = reader.read(data, source="fuzz")
    except ProfileFormatError as e:
        assert "fuzz" in str(e)
        return
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert isinstance(out, Profile)
    # 10x the input, plus a fixed allowance for pandas' per-DataFrame overhead on tiny inputs.
    assert peak <= 10 * len(data) + 4 * 1024 * 1024, f"peak {peak} B for {len(data)} B of input"


@pytest.mark.parametrize("name", sorted(SEEDS))
def test_seeds_read(name):
    reader, seed_list = SEEDS[name]
    for s in seed_list:
        assert isinstance(reader.read(s, source="seed"), Profile)


@pytest.mark.parametrize("name", sorted(SEEDS))
def test_mutated_inputs(name):
    reader, seed_list = SEEDS[name]

    @FUZZ
    @given(mutated(seed_list))
    def run(data):
        check(reader, data)
    run()


@pytest.mark.parametrize("name", ["folded", "speedscope", "perf_script", "stap", "eu_stack"])
def test_arbitrary_bytes(name):
    reader = SEEDS[name][0]

    @settings(max_examples=60, derandomize=True, deadline=None, database=None)
    @given(st.binary(max_size=2048) | st.text(max_size=512).map(str.encode))
    def run(data):
        check(reader, data)
    run()


NAME = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r;"), min_size=1, max_size=12)


@FUZZ
@given(st.lists(st.tuples(st.lists(NAME.filter(lambda s: s.strip() == s and " " not in s), min_size=1, max_size=6),
                          st.integers(1, 1000)), min_size=1, max_size=20))
def test_folded_speedscope_round_trip(rows):
    text = "".join(";".join(stack) + f" {n}\n" for stack, n in rows)
    p = folded.read(text.encode(), source="gen")
    assert p.sample_count == sum(n for _, n in rows)
    back = speedscope.read(speedscope.write(p), source="gen")
    assert back.sample_count == p.sample_count
    assert sorted(back.functions("samples")["total"]) == sorted(p.functions("samples")["total"])
    again = folded.read(p.to_folded().encode(), source="gen")
    assert again.sample_count == p.sample_count


# -- Chrome trace and gecko (issue 18): seeds from our writers and a py-spy-shaped trace ---------------
from profmagic.formats import chrome_trace, gecko  # noqa: E402
from profmagic.model import StackBuilder  # noqa: E402


def _timeline_seeds() -> dict:
    b = StackBuilder()
    m, f, g = b.frame("main", "app.py", 1, "python"), b.frame("f", "app.py", 5, "python"), b.frame("g", "lib.so")
    for i in range(40):
        st = ((m,), (m, f), (m, f, g), (m, g))[i % 4]
        b.add(b.stack(f'Thread {11 + i % 2} "t{i % 2}"', st), time=i * 0.01, wall=0.01, cpu=0.004 * (i % 3))
    p = b.build(metric="wall", meta={"pid": 5})
    pyspy = b"[" + b",".join(
        b'{"args":{"filename":"w.py","line":%d},"cat":"py-spy","name":"%s","ph":"%s","pid":9,"tid":1,"ts":%d}'
        % (ln, nm, ph, ts) for ln, nm, ph, ts in
        ((1, b"main", b"B", 0), (2, b"f", b"B", 0), (2, b"f", b"E", 10), (3, b"g", b"B", 10), (3, b"g", b"E", 30),
         (1, b"main", b"E", 30))) + b"]"
    return {"chrome_trace": (chrome_trace, [chrome_trace.write(p), pyspy]), "gecko": (gecko, [gecko.write(p)])}


TIMELINE_SEEDS = _timeline_seeds()


@pytest.mark.parametrize("name", sorted(TIMELINE_SEEDS))
def test_timeline_mutated_inputs(name):
    reader, seed_list = TIMELINE_SEEDS[name]
    for s in seed_list:
        assert isinstance(reader.read(s, source="seed"), Profile)

    @FUZZ
    @given(mutated(seed_list))
    def run(data):
        check(reader, data)
    run()

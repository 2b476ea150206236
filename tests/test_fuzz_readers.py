"""Fuzzed readers (issues 8 and 21): every outcome is a Profile or a ProfileFormatError, never another
exception, never a crash or a hang, never memory beyond 10x the input.

Seeds are real profiler output made here (tests/fuzz.py: cProfile, py-spy speedscope and raw, perf
script) plus two small hand-written dumps in the documented eu-stack and stap text formats.
"""
from __future__ import annotations

import os
import struct
import time
import tracemalloc

import fuzz
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import profmagic
from profmagic import ProfileFormatError
from profmagic.formats import eu_stack, folded, perf_script, pstats, pyinstrument, speedscope, stap
from profmagic.model import Profile

pytestmark = pytest.mark.timeout(300)
MAX = 64 * 1024  # bytes of input per example
FUZZ = settings(max_examples=120, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
READERS = {"perf_script": perf_script, "folded": folded, "stap": stap, "speedscope": speedscope,
           "pstats": pstats, "pyinstrument": pyinstrument, "eu_stack": eu_stack}
EU_SEED = (b"PID 4242 - process\nTID 4242:\n#0  0x00007f0000001000 __poll\n#1  0x0000555500001000 main\n"
           b"TID 4243:\n#0  0x00007f0000002000 __futex_wait\n#1  0x00007f0000003000 start_thread\n")
# stap's print_ubacktrace()/print_backtrace() lines, then the count (as stackcollapse-stap.pl reads).
STAP_SEED = (b" 0xffffffff8103ce3b : native_safe_halt+0xb/0x10 [kernel]\n"
             b" 0xffffffff8101c6a3 : default_idle+0x53/0x1d0 [kernel]\n"
             b" 0x0000555555555189 : main+0x20/0x40 [/usr/bin/app]\n\t2404\n\n"
             b" 0x00007ffff7e4a1c0 : __poll+0x10/0x80 [/usr/lib/x86_64-linux-gnu/libc.so.6]\n"
             b" 0x0000555555555189 : main+0x20/0x40 [/usr/bin/app]\n\t17\n")


def _pyinstrument_seed() -> bytes:
    from pyinstrument import Profiler
    from pyinstrument.renderers.session import SessionRenderer
    p = Profiler(interval=0.001)
    p.start()
    end = time.perf_counter() + 0.05
    while time.perf_counter() < end:
        pass
    p.stop()
    return SessionRenderer().render(p.last_session).encode()


@pytest.fixture(scope="session")
def seed_files(tmp_path_factory) -> dict[str, str]:
    return fuzz.make_seeds(str(tmp_path_factory.mktemp("fuzz-seeds")))


@pytest.fixture(scope="session")
def seeds(seed_files) -> dict[str, list[bytes]]:
    out = {}
    for name, path in seed_files.items():
        with open(path, "rb") as f:
            out[name] = [f.read()[:MAX]]
    out["speedscope"].append(speedscope.write(folded.read(out["folded"][0])))
    out.update(pyinstrument=[_pyinstrument_seed()], eu_stack=[EU_SEED], stap=[STAP_SEED])
    return out


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


def peak_of(fn) -> tuple[object, int]:
    """(what ``fn()`` returned or raised, its peak traced allocation in bytes)."""
    tracemalloc.start()
    try:
        try:
            out = fn()
        except ProfileFormatError as e:
            out = e
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def check(reader, data: bytes) -> None:
    out, peak = peak_of(lambda: profmagic.formats.read(data, reader.NAME, source="fuzz"))
    if isinstance(out, ProfileFormatError):
        assert "fuzz" in str(out)
        return
    assert isinstance(out, Profile)
    # 10x the input, plus a fixed allowance for pandas' per-DataFrame overhead on tiny inputs.
    assert peak <= 10 * len(data) + 4 * 1024 * 1024, f"peak {peak} B for {len(data)} B of input"


@pytest.mark.parametrize("name", sorted(READERS))
def test_seeds_read(name, seeds):
    for s in seeds[name]:
        assert isinstance(READERS[name].read(s, source="seed"), Profile)


@pytest.mark.parametrize("name", sorted(READERS))
def test_mutated_inputs(name, seeds):
    @FUZZ
    @given(mutated(seeds[name]))
    def run(data):
        check(READERS[name], data)
    run()


@pytest.mark.parametrize("name", ["folded", "speedscope", "perf_script", "stap", "eu_stack"])
def test_arbitrary_bytes(name):
    @settings(max_examples=60, derandomize=True, deadline=None, database=None)
    @given(st.binary(max_size=2048) | st.text(max_size=512).map(str.encode))
    def run(data):
        check(READERS[name], data)
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
    again = folded.read(profmagic.to_folded(p).encode(), source="gen")
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


# -- issue 21: mutated files through load() in worker processes ------------------------------------
@pytest.mark.timeout(600)
def test_two_thousand_mutations_in_worker_processes(seed_files):
    # 500 mutations of each of pstats, speedscope, folded and perf script, fixed seed. A worker that
    # dies (negative exit code) or stops answering for 60 s is a failure attributed to one mutation.
    report = fuzz.run(seed_files, per_format=500, rseed=0, parallel=2)
    assert report.mutations + len(report.crashes) + len(report.hangs) == 2000
    assert report.crashes == [] and report.hangs == [] and report.others == []
    for fmt in fuzz.FORMATS:   # each format was reached: some mutations still read, some are refused
        assert report.outcomes.get((fmt, "profile"), 0) + report.outcomes.get((fmt, "format-error"), 0) == 500
    assert report.outcomes[("pstats", "format-error")] > 0 and report.outcomes[("speedscope", "format-error")] > 0
    print(f"fuzz: {report.mutations} mutations in {report.seconds:.1f} s, {report.workers} workers, "
          f"outcomes {sorted(report.outcomes.items())}, worker peak RSS {report.max_rss_mb:.0f} MB")


def _hostile() -> dict[str, bytes]:
    head = b'{"$schema": "https://www.speedscope.app/file-format-schema.json", "shared": {"frames": '
    key = b")\x03z\x01ai\x01\x00\x00\x00z\x01b"
    ints = b"".join(b"i" + struct.pack("<i", i) + b"N" for i in range(100_000))
    with open(os.path.join(os.path.dirname(__file__), "data", "hostile", "marshal-cycle.json"), "rb") as f:
        cycle = f.read()
    return {
        "marshal cycle (segfaults marshal.loads)": cycle,
        "pstats tuple of 2^28 items, 19 bytes": b"{" + key + b"(" + struct.pack("<i", 1 << 28),
        "pstats tuple of 2^31-1 items, 19 bytes": b"{" + key + b"(" + struct.pack("<i", (1 << 31) - 1),
        "pstats string of 2^31-1 bytes": b"{" + key + b"u" + struct.pack("<i", (1 << 31) - 1),
        "pstats dict of 100,000 int keys (16x when built)": b"{" + key + b"N" + ints + b"0",
        "pstats nested 200,000 deep": b"{" + key + b")\x01" * 200_000,
        "speedscope nested 100,000 deep": head + b"[" * 100_000 + b"]" * 100_000 + b"}}",
        "folded counts of 309 digits": b"a;b 1" + b"0" * 308 + b"\nc 1" + b"0" * 308 + b"\n",
        "folded, a first line of 110 KB (2600-deep recursion)":
            b"<module> (deep.py:9);" + b"descend_through_the_levels (deep.py:5);" * 2600 + b"spin (deep.py:7) 40\n",
    }


@pytest.mark.parametrize("name", list(_hostile()))
def test_hostile_input_memory_is_bounded(name):
    data = _hostile()[name]
    out, peak = peak_of(lambda: profmagic.load(data))
    assert isinstance(out, (ProfileFormatError, Profile)), out
    assert peak <= 10 * len(data) + 4 * 1024 * 1024, f"{name}: peak {peak:,} B for {len(data):,} B of input"


def test_densest_folded_text_is_proportional():
    # One-byte frame names: each frame costs far more in memory (its id in the stack, the name split
    # out) than its two bytes of text: about 26x. Proportional: twice the input, about twice the peak.
    peaks = []
    for n in (250_000, 500_000):
        data = b"a;" * n + b"b 1\n"
        out, peak = peak_of(lambda: profmagic.load(data))
        assert isinstance(out, Profile) and out.sample_count == 1
        assert peak <= 40 * len(data) + 4 * 1024 * 1024, peak
        peaks.append(peak)
    assert peaks[1] <= 2.5 * peaks[0], peaks


@pytest.mark.parametrize("data", [b"\xff\xfeabc", b"\xff\xfe\x00\xd8a\x00", b"\xfe\xff\x00"])
def test_a_byte_order_mark_on_bytes_that_are_not_utf16(data):
    # The eu-stack and perf sniffers decoded such a head and raised UnicodeDecodeError out of load().
    with pytest.raises(ProfileFormatError, match="unrecognised profile format"):
        profmagic.load(data)
    assert profmagic.load("a;b 3\n".encode("utf-16")).sample_count == 3


@pytest.mark.parametrize("path", ["/dev/zero", "fifo"])
def test_special_files_read_nothing(path, tmp_path):
    if path == "fifo":
        path = str(tmp_path / "fifo")
        os.mkfifo(path)
    out, peak = peak_of(lambda: profmagic.load(path))
    assert isinstance(out, ProfileFormatError) and peak < 1024 * 1024, (out, peak)


_HDR = b"python 123/123 [000] 1.000000: 1 cpu-clock:\n"
PATHOLOGICAL = {   # lines on which a reader's regex backtracked in time quadratic in their length
    "stap, a 256 KB line without ' : '": (b" 0xffffffff81000000 : x+0x0/0x1 [kernel]\n" + b"a" * 256_000
                                          + b"\n\t1\n", "stap"),
    "folded, a name of 40,000 ' (a.py'": (b"x" + b" (a.py" * 40_000 + b" 1\n", "folded"),
    "perf script, a frame line of 100,000 ' ('": (_HDR + b"\t7f00 x" + b" (" * 100_000 + b"\n\n", "perf_script"),
    "perf script, a frame line of 200,000 word characters": (_HDR + b"\t" + b"a" * 200_000 + b")\n\n", "perf_script"),
    "perf script, a header line with a 200,000-blank run": (_HDR + b"\tf x (y)\n\n" + b"a" + b" " * 200_000 + b"x\n",
                                                            "perf_script"),
    "sniffing, a 64 KB line of ' ('": (b"0 x" + b" (" * 32_000 + b"\n", None),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", list(PATHOLOGICAL))
def test_pathological_lines_take_linear_time(name):
    # Each took from a minute to hours before (the fuzz found the stap one: a 256 KB line, 64+ s).
    # Linear now: well under 0.1 s of CPU here; the bound leaves 50x for a slow, loaded machine.
    data, fmt = PATHOLOGICAL[name]
    t = time.process_time()
    try:
        profmagic.formats.read(data, fmt, source="patho")
    except ProfileFormatError:
        pass
    assert time.process_time() - t < 5.0


JSON = st.recursive(st.none() | st.booleans() | st.integers(-10**30, 10**30) | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=12)
KEYS = st.sampled_from(["meta", "metric", "unknown_metrics", "kinds", "thread_labels", "duration", "rate",
                        "requested_rate", "start_time", "backend", "processes", "threads", "approximate"])


@pytest.mark.parametrize("name", ["speedscope", "pyinstrument"])
def test_hostile_x_profmagic_block(name, seeds):
    # Our own block rides along in speedscope and pyinstrument files and is read back into meta:
    # whatever it holds, the file reads or is refused, and `profmagic info` can print what was read.
    import json

    from profmagic.cli import summary
    doc = json.loads(seeds[name][-1] if name == "speedscope" else seeds[name][0])

    @settings(max_examples=80, derandomize=True, deadline=None, database=None)
    @given(st.dictionaries(KEYS, JSON, max_size=4) | st.builds(lambda m: {"meta": m}, st.dictionaries(KEYS, JSON)))
    def run(block):
        data = json.dumps({**doc, "x-profmagic": block}).encode()
        out, _ = peak_of(lambda: profmagic.load(data))
        if isinstance(out, Profile):
            summary(out)
    run()


# -- issue 28: shapes that ask a reader for much work, at 10x the sizes of the attacks --------------
BIG_SHAPES = [n for n, s in fuzz.SHAPES.items() if s[2] > 1]     # chains, nesting, threads, counts, archives
SMALL_SHAPES = [n for n, s in fuzz.SHAPES.items() if s[2] == 1]  # typed meta, surrogates: one child for all


@pytest.fixture(scope="module")
def shape_rows() -> dict[str, dict]:
    # Four children for the big shapes (grouped by reader: a child's start costs more than most loads),
    # one for the small ones, two at a time (2 cores). Each load runs under the 1 GiB cap.
    from concurrent.futures import ThreadPoolExecutor
    groups: dict[int, list] = {}
    for n in BIG_SHAPES:
        fmt = fuzz.SHAPES[n][0]
        groups.setdefault(0 if fmt == "chrome_trace" else 1 if fmt in ("gecko", "speedscope", "pstats")
                          else 2 if fmt is None else 3, []).append(n)
    with ThreadPoolExecutor(2) as pool:
        jobs = [pool.submit(fuzz.run_shapes, g, 10.0) for g in groups.values()]
        jobs.append(pool.submit(fuzz.run_shapes, SMALL_SHAPES, 1.0))
        rows = [r for j in jobs for r in j.result()]
    return {r["name"]: r for r in rows}


# What each shape must come to: a profile (its sample count) or an error naming the limit or field.
EXPECT = {
    "counts: folded huge count": ("profile", "10000000000 samples"),
    "archive: zip bomb (KiB)": ("format-error", "(compression ratio limit: a zip bomb?)"),
    "archive: sizes that lie (KiB)": ("format-error", "is damaged (BadZipFile: Bad CRC-32"),
    "archive: many parts": ("format-error", "the manifest lists 200,000 parts; at most 256 (part limit)"),
    "archive: many members": ("format-error", "the zip holds 200,001 members; a container holds at most 260"),
    "surrogates: speedscope": ("profile", "2 samples"), "surrogates: Chrome": ("profile", "1 samples"),
    "surrogates: gecko": ("profile", "2 samples"), "surrogates: folded": ("profile", "3 samples"),
    "surrogates: eu-stack": ("profile", "1 samples"), "surrogates: perf_script": ("profile", "1 samples"),
    "surrogates: stap": ("profile", "2 samples"),
}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", list(fuzz.SHAPES))
def test_shape_is_a_profile_or_a_format_error_within_10_s_and_1_gib(name, shape_rows):
    row = shape_rows[name]
    assert row["outcome"] in ("profile", "format-error"), row
    assert row["cpu"] <= fuzz.SHAPE_SECONDS, row   # CPU: other work on the machine makes wall time longer
    assert row["rss_mb"] < fuzz.MEMORY_CAP / 2**20, row
    if name in EXPECT:
        outcome, text = EXPECT[name]
        assert row["outcome"] == outcome and text in row["message"], row
    elif name.startswith("typed meta") and row["outcome"] == "format-error":
        field = name.split()[-1]
        bad = {"gecko": fuzz.BAD_META, "Chrome": fuzz.BAD_META, "speedscope": fuzz.BAD_META}.get(name.split()[2])
        if bad is not None:   # the message names the mistyped field
            assert list(bad[int(field)])[0] in row["message"], row

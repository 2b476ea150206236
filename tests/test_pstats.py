"""The pstats reader on real cProfile and profile-module output."""
import cProfile
import marshal
import math
import profile as pyprofile
import pstats
import subprocess
import time

import pytest
import tools

import profmagic
from profmagic.formats import pstats as fmt
from profmagic.formats import sniff

pytestmark = pytest.mark.timeout(60)


def leaf(n):
    return sum(range(n))


def heavy():
    for _ in range(30):
        leaf(20000)


def light():
    for _ in range(10):
        leaf(20000)


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def even(n):
    return True if n == 0 else odd(n - 1)


def odd(n):
    return False if n == 0 else even(n - 1)


def program():
    heavy()
    light()
    fib(12)
    even(30)
    time.sleep(0.01)


@pytest.fixture(scope="module")
def dumped(tmp_path_factory):
    pr = cProfile.Profile(time.perf_counter)
    pr.enable()
    program()
    pr.disable()
    path = tmp_path_factory.mktemp("pstats") / "run.pstats"
    pr.dump_stats(str(path))
    return path


def names(p, stack):
    return [p.frames.at[f, "name"] for f in stack]


def test_round_trip_of_a_real_run(dumped):
    data = dumped.read_bytes()
    assert sniff(data[:65536]) == "pstats"
    p = profmagic.load(str(dumped))
    assert p.raw.format == "pstats" and p.raw.read() == data
    ref = pstats.Stats(str(dumped)).stats
    t = fmt.table(data)
    assert len(t) == len(ref)
    by = {(r.file if r.file else "~", r.name): r for r in t.itertuples()}
    for (file, line, name), (cc, nc, tt, ct, _) in ref.items():
        r = by[(file, name)]
        assert (r.ncalls, r.primitive_calls, r.tottime, r.cumtime) == (nc, cc, tt, ct)
    assert fmt.table(p).equals(t)


def test_exact_total_and_the_approximate_flag(dumped):
    p = profmagic.load(str(dumped))
    stats = fmt.load(dumped.read_bytes())
    assert math.isclose(p.total("wall"), sum(v[2] for v in stats.values()), rel_tol=1e-12)
    # Each function's own time is kept exactly, split over its paths.
    f = p.functions("wall").set_index("name")
    for (_, _, name), (_, _, tt, _, _) in stats.items():
        if tt > 0:
            assert math.isclose(f.loc[name, "self"], tt, rel_tol=1e-9)
    assert "approximate" in p.describe() and "caller" in p.meta["approximate"]
    assert p.sample_count == 0 and p.stacks["cpu"].isna().all()
    calls = p.stacks.groupby(p.stacks["stack"].map(lambda s: s[-1]))["calls"].sum()
    for fid, n in calls.items():
        key = next(k for k in stats if fmt._frame_args(k)[0] == p.frames.at[fid, "name"])
        assert n == pytest.approx(stats[key][1])


def test_recursion_and_cycles_are_cut(dumped):
    p = profmagic.load(str(dumped))
    for st in p.stacks["stack"]:
        assert len(set(st)) == len(st), names(p, st)  # no function twice on a rebuilt path
    fib_paths = [names(p, s) for s in p.stacks["stack"] if names(p, s)[-1] == "fib"]
    assert fib_paths == [["program", "fib"]]
    assert {tuple(names(p, s)) for s in p.stacks["stack"] if names(p, s)[-1] in ("even", "odd")} == {
        ("program", "even"), ("program", "even", "odd")}


def test_time_is_split_by_caller_cumtime_share(dumped):
    p = profmagic.load(str(dumped))
    stats = fmt.load(dumped.read_bytes())
    leaf_key = next(k for k in stats if k[2] == "leaf")
    callers = {k[2]: v[3] for k, v in stats[leaf_key][4].items()}
    share = callers["heavy"] / (callers["heavy"] + callers["light"])
    w = {tuple(names(p, s)): x for s, x in zip(p.stacks["stack"], p.stacks["wall"])}
    got = w[("program", "heavy", "leaf")] / (w[("program", "heavy", "leaf")] + w[("program", "light", "leaf")])
    assert got == pytest.approx(share, rel=1e-9)


def test_profile_module_output_with_count_only_callers(tmp_path):
    pr = pyprofile.Profile()
    pr.runcall(program)
    path = tmp_path / "py.prof"
    pr.dump_stats(str(path))
    stats = fmt.load(path.read_bytes())
    assert any(isinstance(cv, int) for v in stats.values() for cv in v[4].values())
    p = profmagic.load(str(path), metric="cpu")
    assert p.metric == "cpu"
    assert math.isclose(p.total(), sum(v[2] for v in stats.values()), rel_tol=1e-12)


@pytest.mark.parametrize("data, expect", [
    (b"", "first byte"),
    (b"hello world", "expected a marshalled dict"),
    (marshal.dumps({("f.py", 1, "f"): (1, 1, 0.1, 0.1, {})})[:-3], "ends early"),
    (marshal.dumps({}), "no functions"),
    (marshal.dumps({"f": (1, 1, 0.1, 0.1, {})}), "expected a key"),
    (marshal.dumps({("f.py", 1, "f"): (1, 1, 0.1)}), "expected (primitive calls"),
    (marshal.dumps({("f.py", 1, "f"): (1, 1, 0.1, 0.1, {("g.py", 2, "g"): (1, 1, 0.1, 0.1)})}),
     "has no entry of its own"),
    (marshal.dumps({("f.py", 1, "f"): (1, 1, 0.1, float("nan"), {})}), "expected (primitive calls"),
    (b"{\xff\xff", "marshal"),
])
def test_malformed_input_is_a_format_error(data, expect):
    with pytest.raises(profmagic.ProfileFormatError) as e:
        fmt.read(data, source="bad.pstats")
    assert "bad.pstats" in str(e.value) and expect in str(e.value)
    assert e.value.offset is not None or e.value.where is not None


def test_sniff_is_specific(dumped):
    assert fmt.sniff(dumped.read_bytes()[:64])
    assert fmt.sniff(marshal.dumps({}))
    assert not fmt.sniff(b'{"profiles": [], "shared": {"frames": []}}')
    assert not fmt.sniff(marshal.dumps([1, 2, 3]))


# -- the marshal subset reader (issue 21) ---------------------------------------------------------------
DUMP = r'''
import cProfile, marshal, sys
src = "def leaf(n):\n    return sum(range(n))\ndef rec(n):\n    return leaf(50) if n == 0 else rec(n - 1)\n"
ns = {}
exec(compile(src, "модуль_ü.py", "exec"), ns)   # a non-ASCII file name: marshal writes it as 'u'
pr = cProfile.Profile()
pr.enable()
ns["rec"](40); sorted(str(i) for i in range(300)); [ns["leaf"](i) for i in range(200)]
pr.disable()
pr.dump_stats(sys.argv[1])
print(repr(sorted(marshal.loads(open(sys.argv[1], "rb").read()).items())))
'''


@pytest.mark.parametrize("minor", [pytest.param(m, marks=pytest.mark.requires(f"python3.{m}")) for m in (11, 12, 13)])
def test_reader_decodes_real_dumps_as_marshal_does(minor, tmp_path):
    python = tools.find(f"python3.{minor}")
    path = tmp_path / "dump.prof"
    r = subprocess.run([python, "-c", DUMP, str(path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    data = path.read_bytes()
    assert data[0] == 0xFB   # a dict with FLAG_REF, as dump_stats writes
    got = fmt.decode(data)
    assert repr(sorted(got.items())) == r.stdout.strip()   # what that Python's own marshal.loads returned
    assert any(k[0] == "модуль_ü.py" for k in got) and len(got) >= 5
    assert fmt.load(data) == got and profmagic.load(str(path)).meta["functions"] == len(got)


@pytest.mark.parametrize("obj", [
    {("a.py", 1, "f"): (1, 2, 0.5, -1.25, {})},
    {"k": (0, -1, 2**31 - 1, -2**31, 2**31, -2**40, 2**62, -(2**62) + 1)},
    {"s": ("", "x", "é", "\ud800", "日本", "a" * 300, b"bytes", None, True, False, ())},
    {"nested": ((1, (2, (3,))), {"in": {"deeper": (1.5,)}})},
])
def test_reader_matches_marshal_on_the_subset(obj):
    shared = ("shared", 1)
    obj = {**obj, "ref1": shared, "ref2": shared}   # marshal writes the second as a reference
    data = marshal.dumps(obj)
    assert fmt.decode(data) == obj == marshal.loads(data)


@pytest.mark.parametrize("obj, what", [
    ({"c": compile("1", "x", "eval")}, "code object"),
    ({"l": [1, 2]}, "list"),
    ({"s": {1}}, "set"),
    ({"f": frozenset({1})}, "frozenset"),
    ({"x": 1j}, "complex number"),
    ({"i": 2**80}, "too large for a count"),
])
def test_reader_refuses_what_pstats_never_holds(obj, what):
    with pytest.raises(profmagic.ProfileFormatError, match=what):
        fmt.decode(marshal.dumps(obj), source="bad.prof")

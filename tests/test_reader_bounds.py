"""Readers bounded by the work a file asks for (issue 28): each hostile shape, at 10x the size that
took tens of seconds or gigabytes before, gives a profile or a one-line ProfileFormatError naming the
limit, in a child process capped at 1 GiB of address space; legit deep and wide inputs under the caps
read exactly; mistyped meta is refused by field; names with lone surrogates survive every writer."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

import profmagic
from profmagic import ProfileFormatError
from profmagic.formats import _common, chrome_trace, eu_stack, gecko, speedscope
import hostile

HERE = os.path.dirname(os.path.abspath(__file__))
CPU_LIMIT = 10.0    # seconds of CPU in the child (wall time on this shared 2-core machine is noisier)
WALL_LIMIT = 120.0  # the child is killed after this: before the fix these ran for minutes or to the cap
DEPTH = re.escape(f"a stack deeper than {_common.MAX_DEPTH:,} frames")
FRAMES = re.escape("the distinct stacks hold more than 16,000,000 frames in all")
THREADS = re.escape(f"more than {_common.MAX_THREADS:,} threads")


def bounded(shape: str, n: int) -> tuple[float, str]:
    """(CPU seconds, outcome) of reading ``shape`` at size ``n`` in a child limited to 1 GiB."""
    out = subprocess.run([sys.executable, os.path.join(HERE, "hostile.py"), shape, str(n), "1024"],
                         capture_output=True, text=True, timeout=WALL_LIMIT, cwd=HERE)
    assert out.returncode == 0, out.stderr[-2000:]
    line = out.stdout.strip()
    assert "\n" not in line, line
    m = re.search(r"\(([\d.]+) s CPU\), peak RSS (\d+) MB; (.*)$", line)
    assert m, line
    assert int(m.group(2)) < 1024, line
    return float(m.group(1)), m.group(3)


# Sizes: 10x the (gecko 20k rows, Chrome 20k nested B and stackFrames, 40k unordered E,
# speedscope 20k deep, eu-stack 40k threads).
@pytest.mark.parametrize("shape,n,expect", [
    ("gecko_chain", 200_000, DEPTH),
    ("gecko_chain", 16_000, FRAMES),   # under the depth cap: 16k stacks of up to 16k frames
    ("chrome_nested", 200_000, DEPTH),
    ("chrome_frames", 200_000, DEPTH),
    ("chrome_unordered_ends", 400_000, r"^profile: 1 stacks, 40 samples, depth 10000$"),
    ("speedscope_deep", 200_000, DEPTH),
    ("eu_stack_threads", 400_000, THREADS),
    # Threads, each in its own process, at the cap and past it.
    ("gecko_threads", 16_384, r"^profile: 16384 stacks, 16384 samples, depth 1$"),
    ("chrome_threads", 16_385, THREADS),
    ("speedscope_threads", 16_384, r"^profile: 16384 stacks, 16384 samples, depth 1$"),
])
def test_hostile_shape_is_bounded(shape, n, expect):
    cpu, what = bounded(shape, n)
    assert re.search(expect, what), what
    assert cpu < CPU_LIMIT, (cpu, what)


# -- legit inputs under the caps read exactly ------------------------------------------------------------
def test_deep_gecko_chain_under_the_cap_reads_every_stack():
    p = profmagic.load(hostile.gecko_chain(5000))
    depths = sorted(len(s) for s in p.stacks["stack"])
    assert depths == list(range(1, 5001))
    assert p.sample_count == 5000
    assert p.total("wall") == pytest.approx(5.0)   # 1 ms apart; the last weighs the 1 ms interval
    # Every stack is the one frame repeated, from the chain's root.
    assert p.frames.loc[p.stacks["stack"].iloc[-1][0], "name"] == "f"


def test_deep_chrome_nesting_under_the_cap_reads_exactly():
    n = 5000
    p = profmagic.load(hostile.chrome_nested(n))
    assert max(len(s) for s in p.stacks["stack"]) == n
    assert len(p.stacks) == n
    # A stretch of 1 µs at each depth on the way in, n - 1 on the way out.
    assert p.total("wall") == pytest.approx((2 * n - 1) * 1e-6)


def test_deep_chrome_stack_frames_under_the_cap_read_exactly():
    p = profmagic.load(hostile.chrome_frames(5000))
    assert sorted(len(s) for s in p.stacks["stack"]) == list(range(1, 5001))
    assert p.sample_count == 5000


def test_unordered_ends_pair_by_name():
    p = profmagic.load(hostile.chrome_unordered_ends(3 * 700, depth=700))
    (stack,) = p.stacks["stack"]
    assert [p.frames.loc[f, "name"] for f in stack] == [f"f{i}" for i in range(700)]
    assert p.sample_count == 3 and p.total("wall") == pytest.approx(3e-6)


def test_deep_speedscope_events_under_the_cap_read_exactly():
    n = 5000
    p = profmagic.load(hostile.speedscope_deep(n))
    assert max(len(s) for s in p.stacks["stack"]) == n
    assert p.total("wall") == pytest.approx(2 * n - 1)


def test_eu_stack_with_many_threads_reads_each_one():
    n = 5000
    p = profmagic.load(hostile.eu_stack_threads(n))
    assert len(p.threads) == n and p.sample_count == n
    assert p.total("wall") == pytest.approx(n * 0.01)    # each thread's first snapshot: the interval
    assert p.total("cpu") == pytest.approx(n * 1e-6)     # its 1000 ns delta, on its only sample


def test_speedscope_profiles_of_one_name_become_distinct_threads():
    p = profmagic.load(hostile.speedscope_threads(4))
    assert p.threads == ["t", "t (2)", "t (3)", "t (4)"]
    assert p.sample_count == 4


def test_too_deep_sampled_speedscope_is_refused_by_place():
    doc = json.loads(hostile.speedscope_deep(1))
    doc["profiles"][0] = {"type": "sampled", "name": "t", "unit": "none", "startValue": 0, "endValue": 1,
                          "samples": [[0] * (_common.MAX_DEPTH + 1)], "weights": [1]}
    with pytest.raises(ProfileFormatError, match=r"profiles\[0\]\.samples\[0\]: " + DEPTH):
        profmagic.load(json.dumps(doc).encode())


def test_too_deep_eu_stack_block_is_refused_by_line():
    frames = [f"#{i} 0x{i + 1:x} f{i % 3}" for i in range(_common.MAX_DEPTH + 1)]
    text = "PID 1 - process\nTID 1:\n" + "\n".join(frames) + "\n"
    with pytest.raises(ProfileFormatError, match=r"line 2: " + DEPTH):
        eu_stack.read(text.encode())


# -- counts are weighed, not expanded ----------------------------------------------------------------------
def test_gecko_writer_weighs_a_huge_count():
    p = profmagic.load(b"a;b 1000000000\n")
    data = gecko.write(p)
    assert len(data) < 4 << 20   # about MAX_SAMPLES samples, not 10^9
    doc = json.loads(data)["profile"]
    th = doc["threads"][0]
    rows, schema = th["samples"]["data"], th["samples"]["schema"]
    assert th["samples"]["weightType"] == "samples"
    weights = [r[schema["weight"]] for r in rows if r[schema["stack"]] is not None]
    assert len(weights) == gecko.MAX_SAMPLES and sum(weights) == 1_000_000_000
    assert "1,000,000,000" in doc[_common.EXT]["samples_note"]
    q = profmagic.load(data)
    assert q.sample_count == 1_000_000_000
    assert q.functions().set_index("name").loc["b", "self"] == 1_000_000_000


def test_gecko_writer_scales_counts_over_the_cap_alike():
    p = profmagic.load(b"a;b 3000000\na;c 1000000\na;d 1\n")
    doc = json.loads(gecko.write(p))["profile"]
    th = doc["threads"][0]
    schema = th["samples"]["schema"]
    names = [th["stringTable"][r[0]].split(" ")[0] for r in th["frameTable"]["data"]]
    leaf = {}
    for r in th["samples"]["data"]:
        if r[schema["stack"]] is not None:
            f = names[th["stackTable"]["data"][r[schema["stack"]]][1]]
            n, w = leaf.get(f, (0, 0))
            leaf[f] = (n + 1, w + r[schema["weight"]])
    # Drawn 3:1 as the counts are (d, under one sample's worth, still gets one); weights exact.
    assert leaf == {"b": (75_000, 3_000_000), "c": (25_000, 1_000_000), "d": (1, 1)}
    assert profmagic.load(gecko.write(p)).sample_count == 4_000_001


def test_chrome_writer_carries_a_huge_count_in_one_slice():
    p = profmagic.load(b"a;b 1000000000\n")
    data = chrome_trace.write(p)
    doc = json.loads(data)
    assert sum(e["ph"] == "B" for e in doc["traceEvents"]) == 2    # a and b, once
    assert profmagic.load(data).sample_count == 1_000_000_000


# -- typed meta ------------------------------------------------------------------------------------------
BAD_META = [("duration", [1], "a finite number"), ("pid", {}, "an integer"), ("processes", [1], "an object of objects"),
            ("warnings", 5, "a list of strings"), ("metric_labels", "x", "an object of strings"),
            ("unknown", {"wall": 3}, "an object of strings"), ("rate", "fast", "a finite number"),
            ("argv", "python x.py", "a list of strings"), ("folded_thread_roots", 1, "true or false")]


@pytest.mark.parametrize("fmt", ["gecko", "chrome_trace", "speedscope"])
@pytest.mark.parametrize("field,value,expected", BAD_META)
def test_mistyped_meta_names_the_field(fmt, field, value, expected):
    mod = {"gecko": gecko, "chrome_trace": chrome_trace, "speedscope": speedscope}[fmt]
    doc = json.loads(mod.write(profmagic.load(b"main;f 3\nmain;g 2\n")))
    ext = doc["profile"][_common.EXT] if fmt == "gecko" else doc[_common.EXT]
    ext["meta"][field] = value
    with pytest.raises(ProfileFormatError, match=rf"x-profmagic\.meta\.{field}: meta field '{field}' is .*; "
                                                 rf"expected {expected}$"):
        profmagic.load(json.dumps(doc).encode())


@pytest.mark.parametrize("key,value,where", [("unknown_metrics", 5, "unknown_metrics"), ("t0", "0", "t0"),
                                             ("threads", [1], "threads"), ("metric", ["wall"], "metric")])
def test_mistyped_extension_fields_are_refused(key, value, where):
    doc = json.loads(chrome_trace.write(profmagic.load(b"main;f 3\n")))
    doc[_common.EXT][key] = value
    with pytest.raises(ProfileFormatError, match=rf"x-profmagic\.{where}: '{key}' is "):
        profmagic.load(json.dumps(doc).encode())


@pytest.mark.parametrize("fact,message", [
    ("pid=abc", "header field pid='abc'; expected an integer"),
    ("target_rate=fast", "header field target_rate='fast'; expected a finite number"),
    ("cell_wall=nan", "header field cell_wall='nan'; expected a finite number"),
    ("processes=x", "header field processes='x'; expected an object of objects"),
])
def test_mistyped_eu_stack_header_names_the_field(fact, message):
    text = (f"# profmagic eu-stack sampler {fact} interval=0.01 duration=1\n# t=0.1\nPID 1 - process\n"
            "TID 1: state=R cpu_ns=5\n#0  0x1 f - /x.so\n")
    with pytest.raises(ProfileFormatError, match=rf"^<input>: line 1: {re.escape(message)}$"):
        eu_stack.read(text.encode())


def test_typed_eu_stack_header_fields_are_kept_typed():
    text = ("# profmagic eu-stack sampler pid=42 interval=0.01 duration=1 target_rate=100 t0_unix=12.5 "
            "sched=fifo format=evil\n# t=0.1\nPID 42 - process\nTID 42: state=R cpu_ns=5\n#0  0x1 f - /x.so\n")
    p = eu_stack.read(text.encode())
    assert p.meta["pid"] == 42 and p.meta["t0_unix"] == 12.5
    assert 100.0 in (p.meta.get("requested_rate"), p.meta.get("target_rate"))   # a number, under either name
    assert p.meta["sched"] == "fifo" and p.meta["format"] == "eu-stack"


# -- lone surrogates --------------------------------------------------------------------------------------
def test_lone_surrogates_round_trip_through_every_writer():
    doc = {"$schema": speedscope.SCHEMA,
           "shared": {"frames": [{"name": "main"}, {"name": "f\ud800g", "file": "x\udcffy.py", "line": 3}]},
           "profiles": [{"type": "sampled", "name": "t\ud800", "unit": "seconds", "startValue": 0, "endValue": 3,
                         "samples": [[0, 1], [0]], "weights": [2, 1]}]}
    p = profmagic.load(json.dumps(doc).encode())
    assert p.frames["name"].tolist() == ["main", "f\ud800g"]
    for mod in (gecko, chrome_trace, speedscope):
        q = profmagic.load(mod.write(p))
        assert q.frames["name"].tolist() == ["main", "f\ud800g"], mod.NAME
        assert q.frames["file"].tolist() == ["", "x\udcffy.py"], mod.NAME
        assert q.threads == ["t\ud800"], mod.NAME
        assert q.total("wall") == pytest.approx(3.0), mod.NAME


# -- what the command line says ------------------------------------------------------------------------
def _documented(error_id: str, text: str) -> None:
    """``text`` holds the message docs/errors.md gives under ``### `error_id` `` (… matches anything)."""
    with open(os.path.join(HERE, "..", "docs", "errors.md"), encoding="utf-8") as f:
        doc = f.read()
    m = re.search(rf"^### `{re.escape(error_id)}`[^\n]*\n```text\n(.*?)\n```", doc, re.S | re.M)
    assert m, f"docs/errors.md has no section ### `{error_id}`"
    assert re.search(".*?".join(re.escape(p) for p in m.group(1).split("…")), text, re.S), (error_id, text)


def _mistyped_gecko() -> bytes:
    doc = json.loads(gecko.write(profmagic.load(b"main;f 3\n")))
    doc["profile"][_common.EXT]["meta"]["metric_labels"] = "x"
    return json.dumps(doc).encode()


def _mistyped_chrome_ext() -> bytes:
    doc = json.loads(chrome_trace.write(profmagic.load(b"main;f 3\n")))
    doc[_common.EXT]["unknown_metrics"] = 5
    return json.dumps(doc).encode()


@pytest.mark.parametrize("command", ["info", "view"])
@pytest.mark.parametrize("make,name,error_id", [
    (lambda: hostile.gecko_chain(_common.MAX_DEPTH + 1, sample_every=False), "deep.json", "stack-too-deep"),
    (lambda: hostile.gecko_chain(8000), "wide.json", "stacks-too-many-frames"),
    (lambda: hostile.eu_stack_threads(_common.MAX_THREADS + 1, sampled=False), "threads.txt", "too-many-threads"),
    (_mistyped_gecko, "meta.json", "meta-mistyped"),
    (_mistyped_chrome_ext, "ext.json", "extension-mistyped"),
    (lambda: b"# profmagic eu-stack sampler pid=abc interval=0.01 duration=1\n# t=0.1\nPID 1 - process\n"
             b"TID 1: state=R cpu_ns=5\n#0  0x1 f - /x.so\n", "header.txt", "header-field-mistyped"),
])
def test_cli_says_one_documented_line(tmp_path, command, make, name, error_id):
    path = tmp_path / name
    path.write_bytes(make())
    r = subprocess.run([os.path.join(os.path.dirname(sys.executable), "profmagic"), command, str(path),
                        *(["-o", str(tmp_path / "out.html")] if command == "view" else [])],
                       capture_output=True, text=True, timeout=WALL_LIMIT)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("profmagic: "), r.stderr
    _documented(error_id, r.stderr)
    assert not (tmp_path / "out.html").exists()

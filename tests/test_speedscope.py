"""speedscope JSON: round trips on hand-built profiles, real-world shapes, py-spy output, errors."""
from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
import tools

import profmagic
from profmagic import ProfileFormatError
from profmagic.formats import speedscope
from profmagic.model import StackBuilder



@pytest.fixture(autouse=True, params=["plain", "fast"])
def reader_path(request, monkeypatch):
    """Run every test through both readers: plain json.loads, and the fast path that large files take
    (which cuts the samples/weights arrays out of the text). The size threshold is lowered, nothing faked."""
    if request.param == "fast":
        monkeypatch.setattr(speedscope, "_MIN_FAST", 0)
    return request.param


def canon(p):
    """Stacks as sorted (thread, frames by content, weights) rows, independent of ids and row order."""
    fr = p.frames
    key = {fid: (r.name, r.file, None if r.line is None or r.line is getattr(np, "nan", None) else r.line, r.kind)
           for fid, r in zip(fr.index, fr.itertuples())}
    rows = []
    for i, r in p.stacks.iterrows():
        w = tuple(None if (m not in p.stacks or (isinstance(r[m], float) and math.isnan(r[m])))
                  else round(float(r[m]), 9) for m in ("wall", "cpu"))
        rows.append((r["thread"], tuple(key[f] for f in r["stack"]), int(r["samples"])) + w)
    return sorted(rows, key=repr)


def canon_frames(p):
    fr = p.frames
    return sorted((r.name, r.file, None if r.line is None or str(r.line) == "<NA>" else int(r.line), r.kind)
                  for r in fr.itertuples())


def roundtrip(p):
    data = speedscope.write(p)
    doc = json.loads(data)
    assert doc["$schema"] == speedscope.SCHEMA
    assert doc["exporter"] == f"profmagic@{profmagic.__version__}"
    assert all(pr["type"] == "sampled" for pr in doc["profiles"])
    q = profmagic.load(data)
    assert q.meta["format"] == "speedscope"
    assert canon(q) == canon(p)
    assert canon_frames(q) == canon_frames(p)
    assert q.threads == p.threads
    assert q.metric == p.metric
    return q, doc


def test_roundtrip_recursion_unicode_empty_thread_root_only():
    b = StackBuilder()
    main = b.frame("main", "app.py", 1, "python")
    rec = b.frame("fib", "app.py", 10, "python")
    cjk = b.frame("计算矩阵", "数学.py", 7, "python")
    emoji = b.frame("🔥 hot <b>&", "lib.so", None, "native")
    b.add(b.stack("MainThread", [main, rec, rec, rec]), samples=3)
    b.add(b.stack("MainThread", [main, rec, cjk]), samples=2)
    b.add(b.stack("工作线程 🧵", [main, emoji]), samples=4)
    b.thread("idle thread")  # a thread with no samples
    b.add(b.stack("root only", [main]), samples=5)
    b.add(b.stack("root only", []), samples=1)  # a sample with no frame at all
    p = b.build(metric="samples")
    q, doc = roundtrip(p)
    assert [pr["name"] for pr in doc["profiles"]] == ["MainThread", "工作线程 🧵", "idle thread", "root only"]
    idle = doc["profiles"][2]
    assert idle["samples"] == [] and idle["weights"] == []
    fn = q.functions().set_index("name")
    assert fn.loc["fib", "total"] == 5 and fn.loc["fib", "self"] == 3
    assert fn.loc["main", "total"] == 14
    assert {f["name"] for f in doc["shared"]["frames"]} >= {"计算矩阵", "🔥 hot <b>&"}
    assert next(f for f in doc["shared"]["frames"] if f["name"] == "fib") == {"name": "fib", "file": "app.py", "line": 10}


def test_roundtrip_multi_metric_wall_and_cpu():
    b = StackBuilder()
    f, g, h = (b.frame(n, "w.py", i, "python") for i, n in enumerate("fgh", 1))
    b.add(b.stack("main", [f, g]), samples=3, wall=0.3, cpu=0.1)
    b.add(b.stack("main", [f, h]), samples=2, wall=0.2, cpu=0.2)
    b.add(b.stack("io", [f]), samples=1, wall=0.5, cpu=0.0)
    p = b.build(metric="wall")
    q, doc = roundtrip(p)
    assert doc["profiles"][0]["unit"] == "seconds"
    assert q.total("wall") == pytest.approx(1.0)
    assert q.total("cpu") == pytest.approx(0.3)
    assert q.total("off_cpu") == pytest.approx(0.7)
    assert q.total("samples") == 6
    # cpu as primary metric too
    q2, _ = roundtrip(p.replace(metric="cpu"))
    assert q2.total() == pytest.approx(0.3)


def test_roundtrip_time_ordered_samples():
    b = StackBuilder()
    f, g = b.frame("f", "a.py", 1, "python"), b.frame("g", "a.py", 2, "python")
    seq = [("T1", [f]), ("T2", [f, g]), ("T1", [f, g]), ("T1", [f]), ("T2", [f])]
    for i, (th, st) in enumerate(seq):
        b.add(b.stack(th, st), time=1.0 + 0.01 * i, wall=0.01, cpu=0.005 if th == "T1" else 0.01)
    p = b.build()
    assert p.samples is not None
    q, _ = roundtrip(p)
    assert q.samples is not None and len(q.samples) == len(seq)

    def ordered(x):
        return [(r.thread, tuple(x.frames.at[fid, "name"] for fid in x.stacks.at[r.stack, "stack"]),
                 round(r.time, 9), round(r.wall, 9), round(r.cpu, 9))
                for r in x.samples.sort_values("time", kind="stable").itertuples()]
    assert ordered(q) == ordered(p)


def _doc(profiles, frames=None, **top):
    d = {"$schema": speedscope.SCHEMA, "shared": {"frames": frames or [{"name": "a"}, {"name": "b"}]},
         "profiles": profiles}
    d.update(top)
    return json.dumps(d).encode()


@pytest.mark.parametrize("unit,scale", [("none", None), ("nanoseconds", 1e-9), ("microseconds", 1e-6),
                                        ("milliseconds", 1e-3), ("seconds", 1.0), ("bytes", None)])
def test_sampled_every_unit(unit, scale):
    data = _doc([{"type": "sampled", "name": "t", "unit": unit, "startValue": 0, "endValue": 30,
                  "samples": [[0, 1], [0], [0, 1]], "weights": [10, 5, 15]}])
    p = profmagic.load(data)
    if scale is None:
        assert p.metric == "samples" and p.total() == 30
    else:
        assert p.metric == "wall" and p.total() == pytest.approx(30 * scale)
        assert p.total("samples") == 3
        assert np.allclose(p.samples["time"], np.array([0, 10, 15]) * scale)
    if unit == "bytes":
        assert p.meta["unit"] == "bytes"
    fn = p.functions().set_index("name")
    assert fn.loc["b", "self"] == fn.loc["b", "total"] == (25 if scale is None else pytest.approx(25 * scale))


@pytest.mark.parametrize("unit,scale", [("none", None), ("nanoseconds", 1e-9), ("microseconds", 1e-6),
                                        ("milliseconds", 1e-3), ("seconds", 1.0), ("bytes", None)])
def test_evented_every_unit(unit, scale):
    ev = [{"type": "O", "frame": 0, "at": 0}, {"type": "O", "frame": 1, "at": 2},
          {"type": "C", "frame": 1, "at": 7}, {"type": "C", "frame": 0, "at": 10}]
    data = _doc([{"type": "evented", "name": "t", "unit": unit, "startValue": 0, "endValue": 10, "events": ev}])
    p = profmagic.load(data)
    fn = p.functions().set_index("name")
    s = 1 if scale is None else scale
    assert fn.loc["a", "total"] == pytest.approx(10 * s) and fn.loc["a", "self"] == pytest.approx(5 * s)
    assert fn.loc["b", "total"] == pytest.approx(5 * s)
    assert p.samples is not None and list(p.samples["time"] / s) == pytest.approx([0, 2, 7])


def test_nulls_as_py_spy_writes_them():
    data = _doc([{"type": "sampled", "name": "Thread 1", "unit": "seconds", "startValue": 0.0, "endValue": 0.02,
                  "samples": [[1, 0], [1]], "weights": [0.01, 0.01]}],
                frames=[{"name": "spin", "file": "<string>", "line": 5, "col": None},
                        {"name": "<module>", "file": None, "line": None, "col": None}],
                activeProfileIndex=None, exporter="py-spy@0.4.3")
    p = profmagic.load(data)
    assert p.total() == pytest.approx(0.02)
    fr = p.frames.set_index("name")
    assert fr.loc["<module>", "file"] == "" and fr.loc["<module>", "line"] is pd_na()
    assert fr.loc["spin", "line"] == 5
    assert p.meta["exporter"] == "py-spy@0.4.3"


def pd_na():
    import pandas as pd
    return pd.NA


@pytest.mark.timeout(60)
@pytest.mark.requires("py-spy")
@pytest.mark.timed
def test_real_py_spy_file(tmp_path):
    out = tmp_path / "spin.speedscope.json"
    code = ("import time\n"
            "def spin():\n"
            "    t = time.perf_counter()\n"
            "    while time.perf_counter() - t < 0.5:\n"
            "        pass\n"
            "spin()\n")
    r = subprocess.run([tools.find("py-spy"), "record", "-f", "speedscope", "-r", "100",
                        "-o", str(out), "--", sys.executable, "-c", code],
                       capture_output=True, text=True, timeout=50)
    assert r.returncode == 0, r.stderr
    p = profmagic.load(out)
    assert p.meta["exporter"].startswith("py-spy@")
    assert p.metric == "wall"
    assert p.sample_count >= 10
    fn = p.functions().set_index("name")
    # spin is on (nearly) every sample and is where the time is spent.
    assert fn.loc["spin", "total"] >= 0.8 * p.total()
    assert fn.index[0] in ("spin", "<module>")
    assert fn.sort_values("self", ascending=False).index[0] == "spin"


# -- errors: one per rule, each names the profile index and the event/sample index -------------

def _err(data, match):
    with pytest.raises(ProfileFormatError) as e:
        speedscope.read(data, source="p.json")
    assert match in str(e.value), str(e.value)
    return str(e.value)


def test_error_unbalanced_close():
    ev = [{"type": "O", "frame": 0, "at": 0}, {"type": "C", "frame": 1, "at": 1}]
    msg = _err(_doc([{"type": "sampled", "unit": "none", "samples": [], "weights": []},
                     {"type": "evented", "unit": "none", "startValue": 0, "endValue": 1, "events": ev}]),
               "profiles[1].events[1]")
    assert "unbalanced events: closes frame 1 but frame 0 is open" in msg


def test_error_unbalanced_open():
    ev = [{"type": "O", "frame": 0, "at": 0}, {"type": "O", "frame": 1, "at": 1}, {"type": "C", "frame": 1, "at": 2}]
    msg = _err(_doc([{"type": "evented", "unit": "none", "startValue": 0, "endValue": 1, "events": ev}]),
               "profiles[0]")
    assert "1 frame(s) still open at the end (innermost 0)" in msg


def test_error_unequal_lengths():
    msg = _err(_doc([{"type": "sampled", "unit": "none", "samples": [[0], [1], [0]], "weights": [1, 1]}]),
               "p.json: profiles[0]: ")
    assert "'samples' has 3 entries but 'weights' has 2" in msg


def test_error_negative_weight():
    msg = _err(_doc([{"type": "sampled", "unit": "none", "samples": [[0]], "weights": [1]},
                     {"type": "sampled", "unit": "none", "samples": [[0], [1], [0]], "weights": [1, 2, -3]}]),
               "profiles[1].weights[2]")
    assert "negative weight -3" in msg


def test_error_frame_out_of_range():
    _err(_doc([{"type": "sampled", "unit": "none", "samples": [[0], [0, 9]], "weights": [1, 1]}]),
         "profiles[0].samples[1]: frame index 9 is not in shared.frames (0..1)")


def test_error_invalid_json_names_line_and_offset():
    data = '{"name": "é🔥", "profiles": [\n  {"type": "sampled",,}\n]}'.encode()
    bad = data.index(b",,") + 1  # a byte offset, not a character offset
    with pytest.raises(ProfileFormatError) as e:
        speedscope.read(data, source="bad.json")
    assert str(e.value).startswith(f"bad.json: line 2, byte offset {bad}: invalid JSON: Expecting property name")
    assert e.value.line == 2 and e.value.offset == bad


def test_error_empty_input():
    _err(b"", "line 1, byte offset 0: invalid JSON")


def test_roundtrip_off_cpu_primary_metric():
    b = StackBuilder()
    f = b.frame("wait", "w.py", 1, "python")
    b.add(b.stack("main", [f]), samples=2, wall=1.0, cpu=0.25)
    p = b.build(metric="off_cpu")
    q, _ = roundtrip(p)
    assert q.total() == pytest.approx(0.75)


def _fast(data):
    return speedscope._read_fast(data, "<t>", "wall")


def test_fast_path_is_taken_and_equals_plain():
    frames = [{"name": "a", "file": "a.py", "line": 1, "col": None}, {"name": "b", "file": None, "line": None}]
    prof = [{"type": "sampled", "name": "T", "unit": "milliseconds", "startValue": 0, "endValue": 9,
             "samples": [[0, 1], [0], [0, 1], [], [1, 1, 1]], "weights": [1, 2, 1.5, 0.5, 4]}]
    for data in (_doc(prof, frames), json.dumps(json.loads(_doc(prof, frames)), indent=1).encode()):
        fast = _fast(data)
        assert fast is not None
        plain = speedscope.from_dict(json.loads(data))
        assert canon(fast) == canon(plain)
        assert list(fast.samples["time"]) == list(plain.samples["time"])
        assert list(fast.samples["stack"].map(fast.stacks["stack"].__getitem__)) == \
            list(plain.samples["stack"].map(plain.stacks["stack"].__getitem__))


@pytest.mark.parametrize("case", ["key in a name", "float frame index", "negative", "nan text", "out of range"])
def test_fast_path_declines_what_it_cannot_vouch_for(case):
    frames = [{"name": "a"}, {"name": "b"}]
    samples, weights = [[0, 1], [0]], [1, 1]
    if case == "key in a name":
        frames[1]["name"] = 'x\\"samples":[[0]]'
    data = _doc([{"type": "sampled", "unit": "none", "samples": samples, "weights": weights}], frames)
    if case == "float frame index":
        data = data.replace(b"[0, 1]", b"[0, 1.0]")
    elif case == "negative":
        data = data.replace(b"[1, 1]", b"[1, -1]")
    elif case == "nan text":
        data = data.replace(b"[1, 1]", b"[1, NaN]")
    elif case == "out of range":
        data = data.replace(b"[0, 1]", b"[0, 2]")
    if case == "key in a name":
        assert _fast(data) is None or canon(_fast(data)) == canon(speedscope.from_dict(json.loads(data)))
        assert profmagic.load(data).frames["name"].iloc[1] == 'x\\"samples":[[0]]'
    else:
        assert _fast(data) is None
        with pytest.raises(ProfileFormatError):
            profmagic.load(data)


def test_fast_path_many_chunks_blocks_and_profiles(monkeypatch):
    """Samples split into many text chunks (the hash's powers made once and shared by every chunk of
    every profile, some chunks needing a longer table than the first), stacks made by marshal in many
    blocks: the same profile as the plain path, and a stack's items are plain ints."""
    monkeypatch.setattr(speedscope, "_CHUNK", 64)
    monkeypatch.setattr(speedscope, "_BLOCK", 50)
    rng = np.random.default_rng(7)
    nfr = 300
    frames = [{"name": f"f{i}", "file": f"m{i % 5}.py", "line": i} for i in range(nfr)]
    prof = []
    for t in range(3):
        n = 40 + 30 * t
        samples = [[int(x) for x in rng.integers(0, nfr, int(rng.integers(0, 12 + 20 * t)))] for _ in range(n)]
        samples += samples[:7]   # repeated stacks intern to the first
        prof.append({"type": "sampled", "name": f"T{t}", "unit": "milliseconds", "startValue": 0, "endValue": 1,
                     "samples": samples, "weights": [float(x) for x in rng.integers(1, 9, len(samples))]})
    data = _doc(prof, frames)
    fast = _fast(data)
    assert fast is not None
    plain = speedscope.from_dict(json.loads(data))
    assert canon(fast) == canon(plain)
    assert list(fast.samples["stack"].map(fast.stacks["stack"].__getitem__)) == \
        list(plain.samples["stack"].map(plain.stacks["stack"].__getitem__))
    assert all(type(x) is int for st in fast.stacks["stack"] for x in st)
    assert len(fast.stacks) == len(plain.stacks) == len({(r.thread, r.stack) for r in plain.stacks.itertuples()})

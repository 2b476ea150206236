"""Reading JSON at parser speed (issue 27 item 2): errors name byte offsets in every JSON reader,
large files included; speedscope's samples are parsed by numpy into one array, interned by a checked
hash, and only distinct stacks become tuples; whatever that path cannot vouch for goes to json.loads."""
from __future__ import annotations

import json
import random

import pytest

from profmagic import ProfileFormatError
from profmagic.formats import chrome_trace, gecko, speedscope

BAD = '{"name": "é🔥", "profiles": [1, 2,, 3]}'.encode()


@pytest.mark.parametrize("read", [speedscope.read, gecko.read, chrome_trace.read])
def test_invalid_json_names_the_byte_offset(read):
    bad = BAD.index(b",,") + 1   # bytes: "é🔥" is 2 characters but 6 bytes
    with pytest.raises(ProfileFormatError) as e:
        read(BAD, source="bad.json")
    assert e.value.offset == bad and e.value.line == 1
    assert f"byte offset {bad}: invalid JSON: Expecting value" in str(e.value)


def test_invalid_json_in_a_big_speedscope_file_names_the_byte_offset():
    # Over speedscope._MIN_FAST: the fast path declines, the error comes from the parse of the whole file.
    frames = [{"name": f"é{i}"} for i in range(20)]
    doc = {"shared": {"frames": frames}, "profiles": [{"type": "sampled", "unit": "none",
                                                       "samples": [[1, 2, 3]] * 200_000, "weights": [1] * 200_000}]}
    data = json.dumps(doc, ensure_ascii=False).encode()
    assert len(data) > speedscope._MIN_FAST
    data = data.replace(b'"weights": [1', b'"weights": [,1', 1)
    with pytest.raises(ProfileFormatError) as e:
        speedscope.read(data, source="big.json")
    assert e.value.offset == data.index(b"[,1") + 1
    assert f"line 1, byte offset {e.value.offset}: invalid JSON: Expecting value" in str(e.value)


# -- speedscope samples through numpy -------------------------------------------------------------
def _sampled_doc(rng, n, nframes, depth=40, distinct=300):
    pool = [[rng.randrange(nframes) for _ in range(rng.randrange(0, depth))] for _ in range(distinct)]
    samples = [rng.choice(pool) for _ in range(n)]
    return {"shared": {"frames": [{"name": f"f{i}"} for i in range(nframes)]},
            "profiles": [{"type": "sampled", "name": "T", "unit": "seconds", "samples": samples,
                          "weights": [rng.choice((1, 2, 0.5, 1e-3, 0)) for _ in samples]}]}


@pytest.mark.parametrize("chunk", [8, 100, 1 << 22])
@pytest.mark.parametrize("layout", ["compact", "spaced", "indented"])
def test_numpy_samples_equal_the_plain_path(monkeypatch, chunk, layout):
    monkeypatch.setattr(speedscope, "_CHUNK", chunk)   # many cuts between chunks; the text is real
    doc = _sampled_doc(random.Random(chunk), 3000, 12_000)
    data = json.dumps(doc, **{"compact": {"separators": (",", ":")}, "spaced": {},
                              "indented": {"indent": 1}}[layout]).encode()
    fast = speedscope._read_fast(data, "<t>", "wall")
    plain = speedscope.from_dict(json.loads(data))
    assert fast is not None
    assert fast.stacks["stack"].tolist() == plain.stacks["stack"].tolist()
    assert fast.stacks["samples"].tolist() == plain.stacks["samples"].tolist()
    assert fast.stacks["wall"].tolist() == plain.stacks["wall"].tolist()
    assert fast.samples["stack"].tolist() == plain.samples["stack"].tolist()
    assert fast.samples["time"].tolist() == plain.samples["time"].tolist()
    assert {type(f) for s in fast.stacks["stack"] for f in s} == {int}


ACCEPTED = [b"[]", b"[0]", b"[1,2],[],[3]", b" [ 1 , 2 ] ,\n[0] ", b"[4999,10,0],[4999,10,0],[]", b"[],[]"]


@pytest.mark.parametrize("chunk", [1, 1 << 22])
@pytest.mark.parametrize("text", ACCEPTED)
def test_numpy_samples_read(monkeypatch, text, chunk):
    monkeypatch.setattr(speedscope, "_CHUNK", chunk)
    stacks, ids = speedscope._parse_samples(text, 0, len(text), 5000)
    assert [stacks[i] for i in ids] == [tuple(s) for s in json.loads(b"[" + text + b"]")]
    assert len(stacks) == len({tuple(s) for s in json.loads(b"[" + text + b"]")})


DECLINED = [b"[01]", b"[1 2]", b"[1,,2]", b"[[1]]", b"[1],,[2]", b"[1][2]", b"[,1]", b"[1,]", b"[12345678901]",
            b"[5000]", b"[1],[2]x", b"[1]]", b"[[1]", b",[1]", b"[1],", b"[-1]", b"[1.0]", b"1,[2]", b"[1]2"]


@pytest.mark.parametrize("chunk", [1, 1 << 22])
@pytest.mark.parametrize("text", DECLINED + [b"[1,2][3]", b"[1] [2]", b"[1],[2],,[3]"])
def test_numpy_samples_decline_what_is_not_exactly_json_frame_indices(monkeypatch, text, chunk):
    monkeypatch.setattr(speedscope, "_CHUNK", chunk)   # a cut after each "]" too
    assert speedscope._parse_samples(text, 0, len(text), 5000) is None


def test_a_hash_collision_is_caught(monkeypatch):
    # The base set to 1: [1, 2] and [2, 1] hash alike, a collision a real file would have to be built
    # for; the check against each class's first sample finds it and the plain path reads.
    monkeypatch.setattr(speedscope, "_BASE", 1)
    assert speedscope._parse_samples(b"[1,2],[2,1]", 0, 11, 5) is None
    stacks, ids = speedscope._parse_samples(b"[1,2],[1,2]", 0, 11, 5)
    assert stacks == [(1, 2)] and ids.tolist() == [0, 0]
    monkeypatch.setattr(speedscope, "_MIN_FAST", 0)
    data = json.dumps({"shared": {"frames": [{"name": "a"}, {"name": "b"}, {"name": "c"}]},
                       "profiles": [{"type": "sampled", "unit": "none", "samples": [[1, 2], [2, 1], [1, 2]],
                                     "weights": [1, 1, 1]}]}).encode()
    assert speedscope._read_fast(data, "<t>", "wall") is None
    p = speedscope.read(data)
    assert sorted(zip(p.stacks["stack"], p.stacks["samples"])) == [((1, 2), 2), ((2, 1), 1)]


def test_weights_that_are_not_json_numbers_go_to_the_plain_path():
    for text in (b"+1,2", b".5,1", b"01,1", b"1 2,3", b"1. 5"):
        assert speedscope._parse_weights(text, 0, len(text)) is None
    assert speedscope._parse_weights(b"1, 2.5e-3 ,0", 0, 12).tolist() == [1, 2.5e-3, 0]

"""load() picks the format by content, never by file name; unknown formats list the known ones."""
from __future__ import annotations

import json

import pytest

import profmagic
from profmagic import ProfileFormatError
from profmagic import formats

SPEEDSCOPE = json.dumps({
    "$schema": "https://www.speedscope.app/file-format-schema.json",
    "shared": {"frames": [{"name": "main"}, {"name": "work"}]},
    "profiles": [{"type": "sampled", "name": "t", "unit": "milliseconds", "startValue": 0, "endValue": 3,
                  "samples": [[0, 1], [0]], "weights": [2, 1]}]}).encode()
FOLDED = b"main;work 2\nmain 1\n"


def test_speedscope_content_in_a_folded_name(tmp_path):
    path = tmp_path / "looks.folded"
    path.write_bytes(SPEEDSCOPE)
    p = profmagic.load(path)
    assert p.meta["format"] == "speedscope"
    assert p.total() == pytest.approx(0.003)


def test_folded_content_in_a_json_name(tmp_path):
    path = tmp_path / "looks.speedscope.json"
    path.write_bytes(FOLDED)
    p = profmagic.load(str(path))
    assert p.meta["format"] == "folded"
    assert p.total() == 3


def test_bytes_and_str_sources():
    assert profmagic.load(SPEEDSCOPE).meta["format"] == "speedscope"
    assert profmagic.load(SPEEDSCOPE.decode()).meta["format"] == "speedscope"
    assert profmagic.load(FOLDED.decode()).meta["format"] == "folded"


def test_speedscope_with_bom_and_whitespace_and_no_schema():
    doc = json.loads(SPEEDSCOPE)
    del doc["$schema"]
    data = b"\xef\xbb\xbf\n  " + json.dumps(doc, indent=2).encode()
    assert formats.sniff(data) == "speedscope"


def test_unknown_content_lists_known_formats():
    with pytest.raises(ProfileFormatError) as e:
        profmagic.load(b"\x00\x01\x02 this is no profile at all\n")
    msg = str(e.value)
    assert "unrecognised profile format; expected one of: " in msg
    for name in formats.available():
        assert name in msg
    assert "speedscope" in msg and "folded" in msg


def test_unknown_format_name_lists_known_formats():
    with pytest.raises(ValueError) as e:
        profmagic.load(FOLDED, format="nosuchformat")
    assert "unknown format 'nosuchformat'; known formats: " in str(e.value)
    assert "speedscope" in str(e.value) and "folded" in str(e.value)


def test_empty_input():
    with pytest.raises(ProfileFormatError) as e:
        profmagic.load(b"")
    assert "byte offset 0" in str(e.value)
    with pytest.raises(ProfileFormatError, match="byte offset 0"):
        profmagic.load(b"   \n\n")

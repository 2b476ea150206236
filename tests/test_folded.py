"""Folded stacks: every FlameGraph expected result reads back exactly and re-writes to the same lines."""
from __future__ import annotations

import collections
import glob
import os
from decimal import Decimal

import pytest

import profmagic
from profmagic import ProfileFormatError
from profmagic.formats import folded

RESULTS = os.path.join(os.path.dirname(__file__), "data", "flamegraph", "test", "results")
RESULT_FILES = sorted(glob.glob(os.path.join(RESULTS, "*")))


def _lines(data: bytes) -> list[str]:
    return [ln for ln in data.decode("utf-8", "surrogateescape").split("\n") if ln.strip()]


def test_corpus_is_there():
    assert len(RESULT_FILES) == 78, RESULTS


@pytest.mark.parametrize("path", RESULT_FILES, ids=os.path.basename)
def test_corpus_result_reads_back_exactly(path):
    data = open(path, "rb").read()
    lines = _lines(data)
    expected_total = sum(Decimal(ln.rsplit(None, 1)[1]) for ln in lines)
    p = profmagic.load(path)
    assert p.meta["format"] == "folded"
    assert p.total() == expected_total
    assert p.sample_count == expected_total
    assert p.meta["skipped_lines"] == 0
    out = [ln for ln in profmagic.to_folded(p).split("\n") if ln]
    assert collections.Counter(out) == collections.Counter(lines)
    # Written in stackcollapse's order: sorted by the stack's bytes.
    keys = [ln.rsplit(" ", 1)[0].encode("utf-8", "surrogateescape") for ln in out]
    assert keys == sorted(keys)


def test_integer_and_decimal_counts():
    p = profmagic.load(b"a;b 3\na;c 1.5\na 0.25\n")
    assert p.total() == pytest.approx(4.75)
    assert p.meta["fractional_counts"] is True
    assert sorted(profmagic.to_folded(p).splitlines()) == ["a 0.25", "a;b 3", "a;c 1.5"]
    q = profmagic.load(b"a;b 3\na;c 1\n")
    assert q.total() == 4 and isinstance(q.total(), int)


def test_crlf():
    p = profmagic.load(b"main;work 7\r\nmain;idle 3\r\n")
    assert p.total() == 10
    assert set(p.frames["name"]) == {"main", "work", "idle"}  # no stray '\r'


@pytest.mark.parametrize("enc,bom", [("utf-16-le", b"\xff\xfe"), ("utf-16-be", b"\xfe\xff")])
def test_utf16_bom(enc, bom):
    text = "主函数;计算 5\r\nmain;🔥hot 2\r\n"
    p = profmagic.load(bom + text.encode(enc))
    assert p.meta["format"] == "folded"
    assert p.total() == 7
    assert sorted(profmagic.to_folded(p).splitlines()) == ["main;🔥hot 2", "主函数;计算 5"]


def test_bad_line_names_line_number_and_text():
    data = b"a;b 1\na;c 2\nthis line has no count\n"
    with pytest.raises(ProfileFormatError) as e:
        folded.read(data, source="x.folded")
    msg = str(e.value)
    assert msg.startswith("x.folded: line 3: ")
    assert "'this line has no count'" in msg
    assert e.value.line == 3


def test_lenient_skips_and_counts():
    data = b"a;b 1\ngarbage\na;c 2\nmore garbage here\n"
    p = profmagic.load(data, format="folded", lenient=True)
    assert p.total() == 3
    assert p.meta["skipped_lines"] == 2


def test_empty_input_is_an_error():
    with pytest.raises(ProfileFormatError, match="no stacks found"):
        folded.read(b"\n\n", source="e.folded")


def test_python_frames_get_file_and_line():
    p = profmagic.load(b"<module> (app.py:3);work (app.py:10) 4\nmain;schedule_[k] 1\n")
    fr = p.frames.set_index("name")
    assert fr.loc["work (app.py:10)", "file"] == "app.py"
    assert fr.loc["work (app.py:10)", "line"] == 10
    assert fr.loc["work (app.py:10)", "kind"] == "python"
    assert fr.loc["schedule_[k]", "kind"] == "kernel"


def test_write_roots_stacks_at_thread_names_when_several():
    p = profmagic.load(b"a;b 1\n")
    assert profmagic.to_folded(p) == "a;b 1\n"
    from profmagic.model import StackBuilder
    b = StackBuilder()
    f = b.frame("f;g")  # ';' in a name becomes ':' so the line still parses
    b.add(b.stack("T1", [f]), samples=2)
    b.add(b.stack("T2", [f]), samples=1)
    assert profmagic.to_folded(b.build()) == "T1;f:g 2\nT2;f:g 1\n"

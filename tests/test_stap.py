"""systemtap backtrace reader: FlameGraph's own example, '%' in names, sniffing, bad input."""
import profmagic
import os

import pytest

from profmagic.errors import ProfileFormatError
from profmagic.formats import stap, perf_script, folded

pytestmark = pytest.mark.timeout(60)


def _extra(corpus, name):
    with open(os.path.join(corpus, "flamegraph", "extra", name), "rb") as f:
        return f.read()


def test_header_example_matches_stackcollapse_stap(corpus):
    data = _extra(corpus, "stap-header-example.input.txt")
    want = _extra(corpus, "stap-header-example.expected-collapsed.txt").decode()
    p = stap.read(data, source="stap-header-example.input.txt")
    assert profmagic.to_folded(p) == want
    assert p.total() == 2404
    assert set(p.frames["kind"]) == {"kernel"}
    assert set(p.frames["file"]) == {"kernel"}


USER = (b" 0x4005b1 : busy_loop+0x1d/0x30 [/tmp/busy]\n"
        b" 0x4005f0 : main+0x10/0x20 [/tmp/busy]\n"
        b"\t7\n"
        b"\n"
        b" 0x4005b1 : busy_loop+0x1d/0x30 [/tmp/busy]\n"
        b" 0x4005f0 : main+0x10/0x20 [/tmp/busy]\n"
        b"\t5\n"
        b" 0x400700 : printf_like_%s_%d+0x1/0x2 [/tmp/busy]\n"
        b" 0x4005f0 : main+0x10/0x20 [/tmp/busy]\n"
        b"3\n"
        b" 0x400800 : no_offset [/tmp/busy]\n"
        b" 0x400801 : \n"
        b"1\n"
        b"\t 2\n")


def test_counts_sum_and_names_are_cleaned():
    p = stap.read(USER)
    # Expected by the rules of stackcollapse-stap.pl: cut from the last '+', up to the last ' : ';
    # an empty name becomes '-'; a count with no frames is the empty stack.
    assert profmagic.to_folded(p) == (" 2\n"
                             "-;no_offset [/tmp/busy] 1\n"
                             "main;busy_loop 12\n"
                             "main;printf_like_%s_%d 3\n")
    assert p.total() == 18
    assert set(p.frames["kind"]) == {"native"}


def test_percent_in_names_is_kept():
    # FlameGraph's printf("$k $v\n") would turn these into garbage; we keep them.
    p = stap.read(b" 0x1 : a%%b%n+0x1/0x2 [/x]\n 0x2 : 100%_done+0x3/0x4 [/x]\n4\n")
    assert profmagic.to_folded(p) == "100%_done;a%%b%n 4\n"
    assert set(p.frames["name"]) == {"a%%b%n", "100%_done"}


def test_frames_after_last_count_are_reported():
    p = stap.read(USER + b" 0x9 : orphan+0x1/0x2 [/x]\n")
    assert p.total() == 18
    assert "no count" in p.meta["warnings"][0]


@pytest.mark.parametrize("text", [b"", b"\n\n", b" 0x1 : f+0x1/0x2 [/x]\n"])
def test_no_count_is_an_error(text):
    with pytest.raises(ProfileFormatError, match="no count line found"):
        stap.read(text, source="x.stap.txt")


def test_sniff(corpus):
    assert stap.sniff(_extra(corpus, "stap-header-example.input.txt"))
    assert stap.sniff(USER)
    assert not stap.sniff(b"main;busy_loop 12\nmain;idle 3\n")
    assert not stap.sniff(b"PID 123 - python3\nTID 123:\n#0  0x00007f3c0a1b2c3d __nanosleep\n")
    perf = os.path.join(corpus, "flamegraph", "test", "perf-funcab-cmd-01.txt")
    with open(perf, "rb") as f:
        head = f.read(65536)
    assert not stap.sniff(head) and perf_script.sniff(head)
    # and the other readers do not claim stap text
    assert not folded.sniff(USER) and not perf_script.sniff(USER)

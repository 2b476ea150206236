"""The two longest readers parse first, then build (issue 26): ``chrome_trace.parse`` gives checked plain
records and no Profile; ``pstats._parse`` gives one record a marshal type code, and ``_build`` the objects."""
from __future__ import annotations

import cProfile
import json
import marshal

import pytest

from profmagic.errors import ProfileFormatError
from profmagic.formats import chrome_trace, pstats

EVENTS = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "main"}},
          {"ph": "B", "name": "run (x.py:3)", "ts": 0, "pid": 1, "tid": 2},
          {"ph": "X", "name": "g", "ts": 10, "dur": 30, "pid": 1, "tid": 2, "args": {"filename": "y.py", "line": 4}},
          {"ph": "E", "ts": 50, "pid": 1, "tid": 2},
          {"ph": "i", "ts": 50, "pid": 1, "tid": 2}]


def test_chrome_trace_parse_gives_plain_records():
    t = chrome_trace.parse(json.dumps({"traceEvents": EVENTS}).encode(), "t.json")
    assert t.frames == [("run", "x.py", 3, "python"), ("g", "y.py", 4, "python")]
    got = [(a, z, t.tree.stack(node)) for a, z, node in t.stretches[(1, 2)]]
    assert got == [(0, 10, (0,)), (10, 40, (0, 1)), (40, 50, (0,))]
    assert t.thread_names == {(1, 2): "main"} and t.ignored == {"i": 1} and not t.sampled
    assert not t.unclosed and not t.open_at_end
    p = chrome_trace.read(json.dumps({"traceEvents": EVENTS}).encode(), "t.json")   # and built, the same
    assert p.total("wall") == pytest.approx(50e-6) and p.threads == ['Thread 2 "main"']


def test_chrome_trace_parse_names_the_event_that_is_wrong():
    bad = EVENTS[:2] + [{"ph": "E", "name": "other", "ts": 5, "pid": 1, "tid": 2}]
    with pytest.raises(ProfileFormatError) as e:
        chrome_trace.parse(json.dumps({"traceEvents": bad}).encode(), "t.json")
    assert "traceEvents[2]" in str(e.value) and "end event for 'other' but the open slice is 'run (x.py:3)'" in str(e.value)


def test_pstats_parse_records_then_build():
    data = marshal.dumps({("f.py", 1, "g"): (1, 2, 0.5, 0.75, {})}, 2)
    ops = [r[0] for r in pstats._parse(data, "p")]
    o = pstats
    assert ops == [o._OPEN_DICT, o._OPEN_TUPLE, o._VALUE, o._VALUE, o._VALUE, o._DONE, o._OPEN_TUPLE, o._VALUE,
                   o._VALUE, o._VALUE, o._VALUE, o._OPEN_DICT, o._END_DICT, o._DONE, o._END_DICT]
    assert pstats.decode(data) == {("f.py", 1, "g"): (1, 2, 0.5, 0.75, {})}
    pr = cProfile.Profile()
    pr.enable()
    sorted(str(i) for i in range(1000))
    pr.disable()
    pr.create_stats()
    real = marshal.dumps(pr.stats)          # version 4: references to shared strings
    assert pstats.decode(real) == marshal.loads(real)


def test_pstats_parse_refuses_before_anything_is_built():
    cycle = b"\xfb" + b"r\x00\x00\x00\x00"   # a dict whose first key is a reference to itself
    records = pstats._parse(cycle, "p")
    assert next(records)[0] == pstats._OPEN_DICT
    with pytest.raises(ProfileFormatError, match="reference 0 to a container that is still being read"):
        next(records)

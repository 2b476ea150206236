"""The pyinstrument backend (real pyinstrument 5, in this process) and its session reader."""
import json
import threading

import pytest
from pyinstrument import Profiler
from pyinstrument.session import Session
from pyinstrument.stack_sampler import get_stack_sampler

import profmagic
from profmagic.backends import pyinstrument as backend
from profmagic.backends.base import Options
from profmagic.threads import thread_label
from profmagic.formats import pyinstrument as fmt
from profmagic.formats import sniff
from test_sampler import BUSY_CPU, by_name, check_wall_shares, clean_tmp, record, work  # noqa: F401

pytestmark = [pytest.mark.timed, pytest.mark.timeout(120)]


def test_wall_mode_shares(clean_tmp):
    p, cap = record(backend, work, rate=100, mode="wall")
    assert p.metric == "wall" and cap.format == "pyinstrument" and p.raw.format == "pyinstrument"
    check_wall_shares(by_name(p, "wall"))
    me = thread_label(threading.get_native_id(), threading.current_thread().name)
    assert p.threads == [me] and p.meta["cell_thread"] == me
    # Frames above the recorded block stay, with file and line, for trimming later.
    fr = p.frames.set_index("name")
    assert fr.loc["record", "file"].endswith("test_sampler.py")
    assert fr.loc["busy", "line"] > 0 and fr.loc["sleep", "kind"] == "native"
    m = p.meta
    assert m["requested_rate"] == 100 and m["rate"] == pytest.approx(m["samples"] / m["duration"])
    assert p.sample_count == m["samples"] and not m["internal_api"]


def test_cpu_mode_rests_on_the_internal_timer_and_resets_it(clean_tmp):
    p, _ = record(backend, work, rate=100, mode="cpu")
    assert p.metric == "cpu" and p.meta["internal_api"] is True and "internal" in p.meta["timer"]
    cpu = by_name(p, "cpu")
    assert cpu["busy"] == pytest.approx(BUSY_CPU, rel=0.15)
    assert cpu.get("nap", 0.0) < 0.02
    assert p.stacks["wall"].isna().all()
    assert get_stack_sampler().timer_func is None


def test_raw_is_pyinstruments_own_session_json(clean_tmp):
    p, cap = record(backend, work, rate=200, mode="wall")
    doc = json.loads(cap.data)
    s = Session.from_json(doc)  # pyinstrument itself still loads it
    assert s.sample_count == p.sample_count
    assert sum(t for _, t in s.frame_records) == pytest.approx(p.total("wall"), rel=1e-12)
    assert sniff(cap.data[:65536]) == "pyinstrument"
    q = profmagic.load(cap.data)
    assert q.threads == p.threads and q.total() == pytest.approx(p.total(), rel=1e-12)
    assert q.samples["time"].is_monotonic_increasing


def test_a_file_saved_by_pyinstrument_reads(tmp_path):
    prof = Profiler(interval=0.005, async_mode="disabled")
    prof.start()
    work()
    prof.stop()
    path = tmp_path / "run.pyisession"
    prof.last_session.save(str(path))
    p = profmagic.load(str(path))
    assert p.meta["format"] == "pyinstrument" and p.threads == ["MainThread"]
    check_wall_shares(by_name(p, "wall"))


def test_exception_inside_and_close_resets_everything(clean_tmp):
    rec = backend.Recorder(Options(mode="cpu"))
    with pytest.raises(KeyError):
        try:
            rec.start()
            {}["missing"]
        finally:
            rec.close()
    rec.close()
    assert get_stack_sampler().timer_func is None and not get_stack_sampler().subscribers


def test_another_profiler_is_a_clear_error(clean_tmp):
    other = Profiler(async_mode="disabled")
    other.start()
    try:
        rec = backend.Recorder(Options(mode="cpu"))
        try:
            with pytest.raises(profmagic.ProfilerError, match="already profiling.*--backend sampler"):
                rec.start()
        finally:
            rec.close()
        assert get_stack_sampler().timer_func is None
    finally:
        other.stop()


def test_both_mode_is_refused():
    with pytest.raises(profmagic.ProfilerError, match="one clock per run"):
        backend.Recorder(Options(mode="both"))


GOOD = {"start_time": 1.0, "duration": 0.1, "sample_count": 1, "start_call_stack": [],
        "target_description": "t", "cpu_time": 0.1,
        "frame_records": [[["MainThread\x00<thread>\x001", "f\x00a.py\x003\x01l4"], 0.01]]}


@pytest.mark.parametrize("doc, where, expect", [
    (b'{"start_time": 1,', "line 1", "invalid JSON"),
    ([1, 2], "$", "session object"),
    ({**GOOD, "frame_records": None}, "frame_records", "[stack, seconds]"),
    ({**GOOD, "duration": "x"}, "duration", "a number"),
    ({**GOOD, "frame_records": []}, "frame_records", "no samples"),
    ({**GOOD, "frame_records": [[["f\x00a.py\x003"], -1]]}, "frame_records[0][1]", "≥ 0"),
    ({**GOOD, "frame_records": [[["f\x00a.py\x00x"], 0.1]]}, "frame_records[0][0][0]", "integer line"),
    ({**GOOD, "frame_records": [[["f\x00a.py\x003", 7], 0.1]]}, "frame_records[0][0][1]", "frame string"),
    ({**GOOD, "frame_records": [["f", 0.1]]}, "frame_records[0]", "pair"),
])
def test_malformed_session_is_a_format_error(doc, where, expect):
    data = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    with pytest.raises(profmagic.ProfileFormatError) as e:
        fmt.read(data, source="bad.pyisession")
    msg = str(e.value)
    assert msg.startswith("bad.pyisession: ") and where in msg and expect in msg


def test_good_minimal_session_reads():
    p = fmt.read(json.dumps(GOOD).encode())
    assert p.threads == ["MainThread"] and p.frames["name"].tolist() == ["f"] and p.total() == 0.01

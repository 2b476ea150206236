"""Chrome trace JSON: real py-spy and viztracer output, round trips through our writer, the trace's
shape for Perfetto and chrome://tracing, hand-built edge cases of the format, and strict errors."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import pytest

import profmagic
from profmagic import ProfileFormatError
from profmagic import formats
from profmagic.formats import chrome_trace, folded, speedscope
from timelines import assert_same_functions, two_thread_recording

VENV_BIN = os.path.dirname(sys.executable)
MAIN_BOUND, SHARE_BOUND = 0.10, 25.0  # see test_real_py_spy_chrometrace


@pytest.fixture(scope="module")
def sampled():
    return two_thread_recording()


def events_of(doc):
    return doc["traceEvents"] if isinstance(doc, dict) else doc


def test_sampler_profile_round_trips(sampled):
    p = sampled
    assert {"wall", "cpu"} <= set(p.metrics) and len(p.threads) >= 2
    data = chrome_trace.write(p)
    q = profmagic.load(data)
    assert q.meta["format"] == "chrome_trace"
    assert_same_functions(p, q)
    assert q.threads == p.threads
    assert q.metric == p.metric
    assert q.sample_count == p.sample_count
    # Time order survives: the same samples start at the same times (runs of one stack merge).
    assert q.samples["time"].min() == pytest.approx(p.samples["time"].min(), abs=1e-9)


def test_written_trace_has_what_viewers_need(sampled):
    """Per thread: a thread_name, slices that nest (B before E, in time order) and a CPU counter track;
    one process_name per pid. This is what Perfetto and chrome://tracing draw."""
    p = sampled
    doc = json.loads(chrome_trace.write(p))
    ev = events_of(doc)
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    assert sorted(names.values()) == sorted(str(t).split('"')[1] for t in p.threads)
    assert len({e["pid"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}) == 1
    for key in names:
        mine = [e for e in ev if (e.get("pid"), e.get("tid")) == key and e["ph"] in "BE"]
        assert [e["ts"] for e in mine] == sorted(e["ts"] for e in mine)
        depth = 0
        for e in mine:
            depth += 1 if e["ph"] == "B" else -1
            assert depth >= 0
        assert depth == 0
        cpu = [e for e in ev if e["ph"] == "C" and e.get("tid") == key[1]]
        assert cpu and all(0 <= e["args"]["cpu"] <= 100.5 for e in cpu)
    # The CPU track adds up to the profile's CPU seconds.
    q = chrome_trace.read(json.dumps(doc).encode(), source="w")
    assert q.total("cpu") == pytest.approx(p.total("cpu"), rel=1e-9)


def test_aggregated_profile_is_laid_end_to_end_and_reads_back():
    p = folded.read(b"main;work;inner 7\nmain;work 3\nmain;other 5\n", source="f")
    doc = json.loads(chrome_trace.write(p))
    assert "laid end to end" in doc["otherData"]["layout"]
    q = chrome_trace.read(json.dumps(doc).encode(), source="f")
    assert q.metric == "samples" and q.sample_count == 15
    assert_same_functions(p, q, metrics=("samples",))


def test_multiprocess_round_trip(sampled):
    a = sampled.replace(threads=sampled.thread_table.assign(pid=111))   # the thread table says the pid
    b = sampled.replace(threads=sampled.thread_table.assign(pid=222))
    p = profmagic.concat([a, b], key="rank", labels=["pid 111 · a", "pid 222 · b"])
    doc = json.loads(chrome_trace.write(p))
    assert {e["pid"] for e in events_of(doc) if e["ph"] == "B"} == {111, 222}
    q = chrome_trace.read(json.dumps(doc).encode(), source="m")
    assert sorted(set(q.stacks["process"])) == ["pid 111 · a", "pid 222 · b"]
    assert q.total("wall") == pytest.approx(p.total("wall"), rel=1e-9)


def test_written_by_extension_and_convert(tmp_path, sampled):
    src = tmp_path / "in.speedscope.json"
    src.write_bytes(speedscope.write(sampled))
    out = tmp_path / "out.trace.json"
    r = subprocess.run([os.path.join(VENV_BIN, "profmagic"), "convert", str(src), str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    q = profmagic.load(str(out))
    assert q.meta["format"] == "chrome_trace"
    assert q.total("wall") == pytest.approx(sampled.total("wall"), rel=1e-9)
    assert formats.writer_for("x.json") is speedscope


SCRIPT = textwrap.dedent("""
    import json, sys, threading, time
    def busy(t):
        end = time.perf_counter() + t
        while time.perf_counter() < end:
            pass
    def nap(t):
        time.sleep(t)
    def main():
        out = {}
        w0 = time.perf_counter()
        for _ in range(4):  # nap first: py-spy sees the start of main() while the script is idle
            t = time.perf_counter(); nap(0.08); out["nap"] = out.get("nap", 0) + time.perf_counter() - t
            t = time.perf_counter(); busy(0.12); out["busy"] = out.get("busy", 0) + time.perf_counter() - t
        out["main"] = time.perf_counter() - w0
        out["ident"] = threading.get_ident()
        out["tid"] = threading.get_native_id()
        return out
    print("ready", flush=True)
    sys.stdin.readline()             # py-spy is sampling
    json.dump(main(), open(sys.argv[1], "w"))
    print("done", flush=True)
    sys.stdin.readline()             # py-spy has stopped
""")


def record_chrometrace(tmp_path):
    """py-spy attached to a waiting script, as the backend attaches to the kernel: (trace bytes, truth)."""
    script = tmp_path / "w.py"
    script.write_text(SCRIPT)
    out, truth_f = tmp_path / "trace.json", tmp_path / "truth.json"
    child = subprocess.Popen([sys.executable, str(script), str(truth_f)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    spy = None
    try:
        assert child.stdout.readline().strip() == "ready"
        spy = subprocess.Popen([os.path.join(VENV_BIN, "py-spy"), "record", "--pid", str(child.pid), "-f",
                                "chrometrace", "--idle", "--nonblocking", "-r", "100", "-o", str(out)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert b"Sampling process" in spy.stdout.readline()
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "done"
        spy.send_signal(signal.SIGINT)
        _, err = spy.communicate(timeout=60)
        assert spy.returncode == 0, err
        child.stdin.write("exit\n")
        child.stdin.flush()
        child.wait(timeout=60)
    finally:
        for proc in (spy, child):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
        child.stdin.close()
        child.stdout.close()
    return out.read_bytes(), json.loads(truth_f.read_text()), str(script)


@pytest.mark.timed
def test_real_py_spy_chrometrace(tmp_path):
    """py-spy's timed format, read with each sample weighing the time to the next one on its thread:
    the main thread's seconds match its measured wall time without calibration. Bounds: over 20 runs on
    this 2-core machine under other test suites' load, the worst errors were 4.8% of main()'s 0.8 s and
    11.6 points of share (a stalled py-spy gives the stall to the stack it saw before); the bounds are
    about twice that."""
    data, truth, script = record_chrometrace(tmp_path)
    assert formats.sniff(data[:65536]) == "chrome_trace"
    label = f'Thread {truth["tid"]} "MainThread"'
    p = chrome_trace.read(data, source="py-spy", labels={truth["ident"]: label})
    assert "py-spy writes no event when a thread exits" in p.meta["timing"]
    assert label in p.threads
    fn = p.functions("wall")
    fn = fn[fn["file"] == script].set_index("name")
    main = fn.loc["main", "total"]
    assert main == pytest.approx(truth["main"], rel=MAIN_BOUND)
    for f in ("busy", "nap"):
        assert 100 * fn.loc[f, "total"] / main == pytest.approx(100 * truth[f] / truth["main"], abs=SHARE_BOUND)
    # Without labels the threads are named by py-spy's pthread ids, never passed off as kernel tids.
    assert all(t.startswith("pthread 0x") for t in chrome_trace.read(data, source="py-spy").threads)


def test_real_viztracer_trace(tmp_path):
    """viztracer writes one complete ('X') event per call: every call's time is in the profile."""
    script = tmp_path / "v.py"
    script.write_text(textwrap.dedent("""
        import threading, time
        def nap(s):
            time.sleep(s)
        def work():
            for _ in range(3):
                nap(0.01)
        t = threading.Thread(target=work, name="wrk"); t.start(); work(); t.join()
    """))
    out = tmp_path / "v.json"
    r = subprocess.run([os.path.join(VENV_BIN, "viztracer"), "--quiet", "-o", str(out), str(script)],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    data = out.read_bytes()
    doc = json.loads(data)
    naps = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["name"].startswith("nap (")]
    assert len(naps) == 6
    p = profmagic.load(data)
    assert p.meta["format"] == "chrome_trace"
    fn = p.functions("wall")
    row = fn[fn["name"] == "nap"].iloc[0]
    assert row["file"] == str(script)
    assert row["total"] == pytest.approx(sum(e["dur"] for e in naps) * 1e-6, rel=1e-9)
    assert any(t.endswith('"wrk"') for t in p.threads) and any(t.endswith('"MainThread"') for t in p.threads)


# -- the format's corners, hand-built from the Trace Event Format document ---------------------------
def ev(ph, ts, name=None, tid=1, **kw):
    e = {"ph": ph, "ts": ts, "pid": 7, "tid": tid}
    if name is not None:
        e["name"] = name
    e.update(kw)
    return e


def load(events, **kw):
    return chrome_trace.read(json.dumps(events).encode(), source="t.json", **kw)


def stacks_of(p, thread=None):
    names = p.frames["name"]
    st = p.stacks if thread is None else p.stacks[p.stacks["thread"] == thread]
    return {tuple(names[f] for f in s): round(float(w), 12) for s, w in zip(st["stack"], st["wall"])}


def test_nested_complete_events_with_shared_edges():
    """X events may come in any order; equal starts nest the longer outside, identical spans nest in
    file order, equal ends close the inner first; a zero-length X carries no time and is ignored."""
    p = load([ev("X", 10, "mid", dur=5), ev("X", 0, "outer", dur=15), ev("X", 10, "inner", dur=5),
              ev("X", 20, "zero", dur=0)])
    assert stacks_of(p) == {("outer",): 10e-6, ("outer", "mid", "inner"): 5e-6}
    assert p.meta["ignored_events"] == {"X (zero length)": 1}


def test_begin_end_in_file_order_at_one_timestamp():
    """py-spy ends and begins slices at the same timestamp; a zero-length B/E pair is allowed."""
    p = load([ev("B", 0, "a"), ev("B", 0, "b"), ev("E", 5, "b"), ev("B", 5, "c"), ev("E", 5, "c"),
              ev("B", 5, "d"), ev("E", 9, "d"), ev("E", 9, "a")])
    assert stacks_of(p) == {("a", "b"): 5e-6, ("a", "d"): 4e-6}
    assert p.sample_count == 2


def test_sampled_events_with_stack_frames_object_form():
    doc = {"traceEvents": [ev("P", 0, sf=2), ev("P", 10, sf=3), ev("P", 30, sf=2), ev("P", 40, sf=3, tid=2)],
           "stackFrames": {"1": {"name": "main"}, "2": {"name": "f", "parent": 1},
                           "3": {"name": "g", "parent": "2", "category": "lib.so"}},
           "samples": [{"tid": 2, "pid": 7, "ts": 50, "sf": 2}]}
    p = chrome_trace.read(json.dumps(doc).encode(), source="s")
    # Each sample weighs the time to the next one on its thread; the last, its thread's median gap.
    assert stacks_of(p, "Thread 1") == {("main", "f"): 25e-6, ("main", "f", "g"): 20e-6}
    assert stacks_of(p, "Thread 2") == {("main", "f"): 10e-6, ("main", "f", "g"): 10e-6}
    assert p.sample_count == 5
    g = p.frames[p.frames["name"] == "g"].iloc[0]
    assert g["file"] == "lib.so"
    counted = chrome_trace.read(json.dumps(doc).encode(), source="s", weigh="count")
    assert counted.metric == "samples" and counted.sample_count == 5


def test_unclosed_array_is_allowed_and_said():
    data = b'[{"ph":"B","ts":0,"pid":1,"tid":1,"name":"a"},\n{"ph":"E","ts":4,"pid":1,"tid":1,"name":"a"},\n'
    p = chrome_trace.read(data, source="cut")
    assert p.total("wall") == pytest.approx(4e-6)
    assert "not closed" in p.meta["truncated"]


def test_open_slice_lasts_to_the_last_timestamp():
    p = load([ev("B", 0, "a"), ev("B", 2, "b"), ev("E", 3, "b"), ev("B", 9, "x", tid=2), ev("E", 10, "x", tid=2)])
    assert stacks_of(p)[("a",)] == pytest.approx(9e-6)  # 0-2 and 3-10: the trace ends at 10
    assert "last timestamp" in p.meta["open_slices"]


def test_rate_turns_stretches_into_sample_counts():
    p = load([ev("B", 0, "a"), ev("E", 95_000, "a")], rate=100)
    assert p.sample_count == 10 and "estimated" in p.meta["approximate"]


@pytest.mark.parametrize("events, place, words", [
    ([ev("E", 1, "a")], "[0]", "no open slice"),
    ([ev("B", 0, "a"), ev("E", 1, "b")], "[1]", "expected slices to nest"),
    ([ev("X", 0, "a", dur=10), ev("X", 5, "b", dur=10)], "[0]", "overlap"),
    ([ev("B", "soon", "a")], "[0]", "'ts'"),
    ([{"ph": "B", "ts": 0, "name": "a", "pid": 1}], "[0]", "'pid' and 'tid'"),
    ([ev("X", 0, "a", dur=-1)], "[0]", "'dur'"),
    ([ev("B", 0, 5)], "[0]", "string 'name'"),
    ([5], "[0]", "event object"),
    ({"traceEvents": [ev("P", 0, sf=9)], "stackFrames": {}}, "traceEvents[0]", "not in stackFrames"),
    ({"traceEvents": [ev("P", 0, sf=1)], "stackFrames": {"1": {"name": "a", "parent": 2},
                                                         "2": {"name": "b", "parent": 1}}}, "stackFrames", "loops"),
    ({"events": []}, "$", "traceEvents"),
])
def test_errors_name_the_place(events, place, words):
    with pytest.raises(ProfileFormatError) as e:
        chrome_trace.read(json.dumps(events).encode(), source="bad.json")
    msg = str(e.value)
    assert msg.startswith("bad.json: ") and place in msg and words in msg


def test_invalid_json_names_the_offset():
    data = b'[{"ph":"B","ts":0,"pid":1,"tid":1,"name":"a"} {"ph":"E"}]'
    with pytest.raises(ProfileFormatError, match=r"byte offset 46"):
        chrome_trace.read(data, source="x")


def test_sniff():
    assert chrome_trace.sniff(b'[{"args":{},"cat":"py-spy","name":"f","ph":"B","pid":1,"tid":2,"ts":3}')
    assert chrome_trace.sniff(b'{"traceEvents": [')
    assert chrome_trace.sniff(b'\xef\xbb\xbf\n [\n {"ph": "X"')
    assert not chrome_trace.sniff(speedscope.write(folded.read(b"a;b 1\n"))[:4096])
    assert not chrome_trace.sniff(b'{"name": "traceEvents"}')
    assert not chrome_trace.sniff(b"a;b 1\n")


def test_labels_for_renumbered_py_spy_threads():
    """py-spy after 0.4 renumbers tids from 0 and names threads '<pthread id>: <name>'."""
    events = [{"ph": "M", "name": "thread_name", "pid": 7, "tid": 0, "args": {"name": "140001: MainThread"}},
              ev("B", 0, "main", tid=0), ev("E", 10, "main", tid=0)]
    p = load(events, labels={140001: 'Thread 42 "MainThread"'})
    assert p.threads == ['Thread 42 "MainThread"']


def test_window_ends_and_json_labels():
    """What py-spy's recorder passes (backends.pyspy.trace_options): labels kept in JSON (string keys,
    with the native id and name), a window cutting the trace to the recorded run, and a thread's end."""
    pthread = 140_000_000_001
    events = [ev("B", 0, "main", tid=1), ev("B", 100_000, "work", tid=1), ev("E", 300_000, "work", tid=1),
              ev("E", 400_000, "main", tid=1),
              ev("B", 50_000, "loop", tid=pthread), ev("E", 400_000, "loop", tid=pthread)]  # py-spy: open to the end
    p = load(events, labels={str(pthread): {"label": 'Thread 42 "w"', "tid": 42, "name": "w"}},
             window=[50_000, 350_000], ends={str(pthread): 250_000}, rate=100)
    t = p.thread_table.set_index("label")
    assert t.at['Thread 42 "w"', "tid"] == 42 and t.at['Thread 42 "w"', "name"] == "w"
    per = p.stacks.groupby("thread", observed=True)["wall"].sum()
    assert per['Thread 42 "w"'] == pytest.approx(0.2)          # 50 ms .. its end at 250 ms
    assert per["Thread 1"] == pytest.approx(0.3)               # the window: 50 .. 350 ms
    assert p.samples["time"].min() == 0.0                      # times count from the window's start
    work = p.functions().set_index("name").at["work", "total"]
    assert work == pytest.approx(0.2)
    # A stretch of several samples keeps its count in the time-ordered samples (speedscope writes it).
    assert p.samples["samples"].sum() == p.sample_count == 5 + 20 + 5 + 20

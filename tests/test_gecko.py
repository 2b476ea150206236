"""Firefox Profiler formats: our gecko writer round-trips and carries what the Firefox Profiler draws
(CPU deltas, thread names, the process table); the reader takes the gecko and processed shapes that
perf, CPython 3.15 and samply write; bad input fails with the place named."""
from __future__ import annotations

import json

import pytest

import profmagic
from profmagic import ProfileFormatError, formats
from profmagic.formats import folded, gecko
from timelines import assert_same_functions, two_thread_recording


@pytest.fixture(scope="module")
def sampled():
    return two_thread_recording()


def test_sampler_profile_round_trips(sampled):
    p = sampled
    data = gecko.write(p)
    assert formats.sniff(data[:65536]) == "gecko"
    q = profmagic.load(data)
    assert q.meta["format"] == "gecko"
    assert_same_functions(p, q)
    assert q.threads == p.threads and q.metric == p.metric and q.sample_count == p.sample_count


@pytest.mark.timed
def test_written_profile_has_cpu_deltas_names_and_processes(sampled):
    p = sampled
    doc = json.loads(gecko.write(p))
    assert doc["systemHost"]["name"] == "Firefox"          # the envelope speedscope recognises
    prof = doc["profile"]
    meta = prof["meta"]
    assert meta["version"] == gecko.VERSION and meta["sampleUnits"]["threadCPUDelta"] == "µs"
    assert [c["name"] for c in meta["categories"]] == ["Python", "Native", "Kernel", "Other"]
    threads = prof["threads"]
    assert sorted(t["name"] for t in threads) == sorted(str(t).split('"')[1] for t in p.threads)
    assert len({t["pid"] for t in threads}) == 1 and prof["processes"] == []
    for th in threads:
        schema = th["samples"]["schema"]
        rows = th["samples"]["data"]
        label = next(t for t in p.threads if str(t).endswith(f'"{th["name"]}"'))
        mine = p.stacks[p.stacks["thread"] == label]
        # One gecko sample (of weight 1) per profile sample, plus a stackless one that ends the last.
        assert sum(r[schema["stack"]] is not None for r in rows) == int(mine["samples"].sum())
        assert th["samples"]["weightType"] == "samples"
        assert {r[schema["weight"]] for r in rows if r[schema["stack"]] is not None} == {1}
        assert rows[-1][schema["stack"]] is None
        times = [r[schema["time"]] for r in rows]
        assert times == sorted(times)
        cpu_us = sum(r[schema["threadCPUDelta"]] for r in rows)
        assert cpu_us * 1e-6 == pytest.approx(float(mine["cpu"].sum()), rel=1e-9)
        # Each location reads back as the frame it names.
        locs = [th["stringTable"][r[0]] for r in th["frameTable"]["data"]]
        assert any(loc.startswith("busy (") or loc.startswith("spin (") for loc in locs), (th["name"], locs)


def test_multiprocess_profile_has_a_process_table(sampled):
    a = sampled.replace(threads=sampled.thread_table.assign(pid=111))   # the thread table says the pid
    b = sampled.replace(threads=sampled.thread_table.assign(pid=222))
    p = profmagic.concat([a, b], key="rank", labels=["pid 111 · a", "pid 222 · b"])
    prof = json.loads(gecko.write(p))["profile"]
    assert {t["pid"] for t in prof["threads"]} == {111}
    assert [{t["pid"] for t in sub["threads"]} for sub in prof["processes"]] == [{222}]
    assert prof["threads"][0]["processName"] == "pid 111 · a"
    q = gecko.read(json.dumps({"profile": prof}).encode(), source="m")
    assert sorted(set(q.stacks["process"])) == ["pid 111 · a", "pid 222 · b"]
    assert q.total("wall") == pytest.approx(p.total("wall"), rel=1e-9)


def test_aggregated_profile_reads_back_as_samples(tmp_path):
    p = folded.read(b"main;work;inner 7\nmain;work 3\nmain;other 5\n", source="f")
    path = tmp_path / "f.gecko.json"
    profmagic.save(p, str(path))
    q = profmagic.load(str(path))
    assert q.meta["format"] == "gecko" and q.metric == "samples" and q.sample_count == 15
    assert_same_functions(p, q, metrics=("samples",))


# -- other producers' shapes (hand-built from their writers' documented output, not copied files) ----
def perf_gecko():
    """What `perf script report gecko` writes: gecko version 24, 'sym (in dso)' locations, User/Kernel
    categories, samples with 'responsiveness', a stack table of [prefix, frame]."""
    strings = ["main (in /usr/bin/app)", "compute (in /usr/bin/app)", "do_syscall_64 (in [kernel.kallsyms])"]
    frame_schema = {"location": 0, "relevantForJS": 1, "innerWindowID": 2, "implementation": 3,
                    "optimizations": 4, "line": 5, "column": 6, "category": 7, "subcategory": 8}
    thread = {"tid": 501, "pid": 500, "name": "app", "registerTime": 0, "unregisterTime": None,
              "processType": "default",
              "markers": {"schema": {"name": 0, "startTime": 1, "endTime": 2, "phase": 3, "category": 4,
                                     "data": 5}, "data": []},
              "samples": {"schema": {"stack": 0, "time": 1, "responsiveness": 2},
                          "data": [[1, 1000.0, 0], [1, 1001.0, 0], [2, 1002.0, 0], [0, 1004.0, 0]]},
              "frameTable": {"schema": frame_schema,
                             "data": [[0, False, 0, None, None, None, None, 0, None],
                                      [1, False, 0, None, None, None, None, 0, None],
                                      [2, False, 0, None, None, None, None, 1, None]]},
              "stackTable": {"schema": {"prefix": 0, "frame": 1}, "data": [[None, 0], [0, 1], [1, 2]]},
              "stringTable": strings}
    return {"meta": {"interval": 1, "processType": 0, "product": "Linux x86_64", "stackwalk": 1, "debug": 0,
                     "gcpoison": 0, "asyncstack": 1, "startTime": 0, "shutdownTime": None, "version": 24,
                     "presymbolicated": True, "markerSchema": [],
                     "categories": [{"name": "User", "color": "yellow", "subcategories": ["Other"]},
                                    {"name": "Kernel", "color": "orange", "subcategories": ["Other"]}]},
            "libs": [], "threads": [thread], "processes": [], "pausedRanges": []}


def test_perf_gecko_shape():
    p = gecko.read(json.dumps(perf_gecko(), indent=2).encode(), source="perf.json")
    names = p.frames.set_index("name")
    assert names.loc["do_syscall_64", "kind"] == "kernel" and names.loc["compute", "kind"] == "native"
    assert names.loc["compute", "file"] == "/usr/bin/app"
    assert p.threads == ['Thread 501 "app"']
    fn = p.functions("wall").set_index("name")["total"]
    # Intervals to the next sample: 1 + 1 ms in compute, 2 ms in the syscall, the last 1 ms (meta.interval).
    assert fn["compute"] == pytest.approx(0.004) and fn["do_syscall_64"] == pytest.approx(0.002)
    assert fn["main"] == pytest.approx(0.005)
    assert "cpu" not in p.metrics


def cpython_processed():
    """What CPython 3.15's profiling.sampling GeckoCollector writes: the processed format (version 57),
    strings in shared.stringArray, funcTable with isJS for Python functions, pid as a string."""
    strings = ["(root)", "main", "app.py", "work", "sleep", "<native>"]
    th = {"name": "Thread-11", "isMainThread": True, "pid": "10", "tid": 11, "processType": "default",
          "processName": "Python Process", "registerTime": 0, "unregisterTime": None,
          "samples": {"stack": [1, 1, 2, 1], "time": [0.0, 10.0, 20.0, 30.0], "eventDelay": [None] * 4,
                      "weight": None, "weightType": "samples", "length": 4},
          "stackTable": {"frame": [0, 1, 2], "prefix": [None, 0, 1], "category": [1, 1, 2],
                         "subcategory": [0, 0, 0], "length": 3},
          "frameTable": {"func": [0, 1, 2], "line": [5, 9, None], "column": [None] * 3, "category": [1, 1, 2],
                         "subcategory": [0] * 3, "address": [-1] * 3, "inlineDepth": [0] * 3,
                         "nativeSymbol": [None] * 3, "innerWindowID": [None] * 3,
                         "implementation": [None] * 3, "optimizations": [None] * 3, "length": 3},
          "funcTable": {"name": [1, 3, 4], "isJS": [True, True, False], "relevantForJS": [True, True, False],
                        "resource": [0, 0, 1], "fileName": [2, 2, None], "lineNumber": [5, 9, None],
                        "columnNumber": [None] * 3, "length": 3},
          "resourceTable": {"lib": [None, None], "name": [2, 5], "host": [None, None], "type": [1, 1],
                            "length": 2},
          "markers": {"data": [], "name": [], "startTime": [], "endTime": [], "phase": [], "category": [],
                      "length": 0}}
    return {"meta": {"interval": 10.0, "startTime": 5000.0, "version": 32, "preprocessedProfileVersion": 57,
                     "product": "Python", "importedFrom": "Tachyon Sampling Profiler",
                     "categories": [{"name": "Other", "color": "grey", "subcategories": ["Other"]},
                                    {"name": "Python", "color": "yellow", "subcategories": ["Other"]},
                                    {"name": "Native", "color": "blue", "subcategories": ["Other"]}]},
            "libs": [], "threads": [th], "pages": [],
            "shared": {"stringArray": strings, "sources": {"length": 0, "uuid": [], "filename": []}}}


def test_cpython_processed_shape():
    data = json.dumps(cpython_processed()).encode()
    assert formats.sniff(data) == "gecko"
    p = profmagic.load(data)
    assert p.meta["variant"] == "processed" and p.meta["imported_from"] == "Tachyon Sampling Profiler"
    fr = p.frames.set_index("name")
    assert fr.loc["work", "file"] == "app.py" and fr.loc["work", "line"] == 9 and fr.loc["work", "kind"] == "python"
    assert fr.loc["sleep", "kind"] == "native" and fr.loc["sleep", "file"] == "<native>"
    fn = p.functions("wall").set_index("name")["total"]
    assert fn["main"] == pytest.approx(0.040) and fn["sleep"] == pytest.approx(0.010)
    assert p.threads == ['Thread 11 "Thread-11"']
    assert p.samples["time"].min() == pytest.approx(5.0)  # meta.startTime (ms) + the first sample


def samply_processed():
    """samply's processed shape: per-thread stringArray, timeDeltas, sample weights, CPU deltas in µs."""
    th = {"name": "worker", "pid": "77", "tid": "78", "processName": "app",
          "samples": {"stack": [0, 1, 1, None], "timeDeltas": [100.0, 1.0, 1.0, 1.0], "weight": [1, 1, 2, 1],
                      "weightType": "samples", "threadCPUDelta": [None, 900, 1000, 0], "length": 4},
          "stackTable": {"frame": [0, 1], "prefix": [None, 0], "length": 2},
          "frameTable": {"func": [0, 1], "line": [None, None], "category": [0, 0], "length": 2},
          "funcTable": {"name": [0, 1], "isJS": [False, False], "fileName": [None, None], "resource": [0, 0],
                        "length": 2},
          "resourceTable": {"name": [2], "lib": [0], "length": 1},
          "stringArray": ["start", "hot_loop", "libapp.so"]}
    return {"meta": {"interval": 1.0, "startTime": 0, "preprocessedProfileVersion": 49, "product": "app",
                     "sampleUnits": {"time": "ms", "eventDelay": "ms", "threadCPUDelta": "µs"},
                     "categories": [{"name": "User", "color": "yellow", "subcategories": ["Other"]}]},
            "libs": [{"name": "libapp.so"}], "threads": [th]}


def test_samply_processed_shape():
    p = gecko.read(json.dumps(samply_processed()).encode(), source="samply.json")
    fn = p.functions("wall").set_index("name")["total"]
    # Samples at 100, 101, 102 ms; the stackless one at 103 ends the last.
    assert fn["start"] == pytest.approx(0.003) and fn["hot_loop"] == pytest.approx(0.002)
    cpu = p.functions("cpu").set_index("name")["total"]
    assert cpu["hot_loop"] == pytest.approx(0.001) and cpu["start"] == pytest.approx(0.0019)
    assert p.sample_count == 4  # the weight column counts samples
    assert p.frames.set_index("name").loc["hot_loop", "file"] == "libapp.so"
    assert p.threads == ['Thread 78 "worker"']


@pytest.mark.parametrize("mutate, place, words", [
    (lambda d: d["threads"][0]["samples"]["data"].__setitem__(0, [9, 1000.0, 0]), "samples[0]", "stack index 9"),
    (lambda d: d["threads"][0]["stackTable"]["data"].__setitem__(1, [2, 1]), "stackTable[1]", "earlier stack"),
    (lambda d: d["threads"][0]["frameTable"]["data"].__setitem__(0, [99, False]), "frameTable.data[0]",
     "string index 99"),
    (lambda d: d["threads"][0].pop("stringTable"), "threads[0]", "stringTable"),
    (lambda d: d["threads"][0]["samples"]["data"].__setitem__(1, [1, "late", 0]), "samples[1]", "milliseconds"),
    (lambda d: d.pop("threads"), "$", "'threads' list"),
])
def test_errors_name_the_place(mutate, place, words):
    doc = perf_gecko()
    mutate(doc)
    with pytest.raises(ProfileFormatError) as e:
        gecko.read(json.dumps(doc).encode(), source="bad.json")
    msg = str(e.value)
    assert msg.startswith("bad.json: ") and place in msg and words in msg


def test_invalid_json_names_the_offset():
    with pytest.raises(ProfileFormatError, match=r"byte offset 10"):
        gecko.read(b'{"meta": {,}}', source="x")


def test_sniff():
    assert gecko.sniff(json.dumps(perf_gecko()).encode())
    assert gecko.sniff(b'{"systemHost":{"name":"Firefox"},"duration":1,"profile":{"meta":{"version":29},"threads":[')
    assert not gecko.sniff(b'{"traceEvents": []}')
    assert not gecko.sniff(b'{"name": "meta", "threads": []}')

"""%%profile --backend memray and --memory in a real kernel, with the real memray (issue 20): the
accuracy test, the report's header and memory strip, --leaks, --allocated, --native, --subprocesses,
time beside memory in one run, refusals, a raising cell, and 200 cells with RSS flat."""
from __future__ import annotations

import os
import re

import faults.conftest as F
import pytest
import workloads

from profmagic.formats import memray as mf

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(600)]
HERE = os.path.dirname(os.path.abspath(__file__))




@pytest.fixture(scope="module")
def k():
    kern = F.start_kernel()  # the fault suite's kernel: profmagic loaded, a private TMPDIR
    r = kern.run(workloads.MEMORY_SOURCE + "import tracemalloc\nfrom profmagic import report\n"
                 "from profmagic.views import memory\n")
    assert r.error is None, r.text()
    yield kern
    F.stop_kernel(kern)


@pytest.fixture
def clean(k):
    """No profiler child, no temp file left (memray's included), and the kernel answers."""
    before = F.tmp_entries(k)
    yield k
    F.assert_clean(k, before)


def static(r) -> str:
    """The report's static twin among a cell's outputs."""
    html = [d["text/html"] for d in r.data + r.updates if "profmagic-static" in d.get("text/html", "")]
    assert html, r.text()
    return html[-1]


def plain(r) -> str:
    return "\n".join(d.get("text/plain", "") for d in r.data + r.updates) + r.stderr + r.stdout


def test_accuracy_against_tracemalloc(clean):
    """The issue's accuracy test, with --memory-exact (every Python object traced): bytes at alloc() within
    5% of tracemalloc's figure for the same code; strs() in allocated and not in bytes. The header names
    the metric, memray, its version, the mode and what it cost."""
    k = clean
    r = k.run("%%profile --backend memray --allocated --memory-exact\nkeep = cell()\n", timeout=300)
    assert r.error is None, r.text()
    k.run("fn = _profile.functions().set_index('name'); al = _profile.functions('allocated').set_index('name')\n"
          "del keep\ntracemalloc.start(); keep = alloc(); tm = tracemalloc.get_traced_memory()[0]\n"
          "tracemalloc.stop(); del keep\n")
    at_alloc, tm = k.value("int(fn.loc['alloc', 'total'])"), k.value("tm")
    print(f"bytes at alloc(): memray {at_alloc:,}, tracemalloc {tm:,} ({(at_alloc - tm) / tm:+.2%})")
    assert abs(at_alloc - tm) <= 0.05 * tm, (at_alloc, tm)
    assert k.value("int(fn['total'].get('strs', 0))") < 0.001 * tm
    assert k.value("int(al.loc['strs', 'total'])") > 20_000_000
    # Only the cell's thread, by its native id: the kernel's own threads allocated too.
    assert k.value("[str(t) for t in _profile.thread_table['tid']]") == [str(k.value("threading.get_native_id()"))]
    html = static(r)
    version = mf.version()
    assert f"bytes alive at the memory high-water mark · backend memray {version}" in html
    assert "allocations (every one recorded, not sampled)" in html
    assert "Cost: memray traced every Python object (--memory-exact): allocation-heavy cells took 9-19x" in html
    assert "; memray recorded every allocation (--allocated)" in html
    assert "profmagic-memory-strip" in html and "high-water mark" in html
    text = plain(r)
    assert ("recording with memray (every allocation: --allocated, slower to read back; every Python object "
            "traced: --memory-exact, 9-19x the cell's time on allocation-heavy code)") in text
    assert " Hz" not in text and "samples" not in text.replace("not sampled", "")
    assert "no samples" not in r.stderr


def test_default_is_aggregated_and_leaks_names_its_metric(clean):
    k = clean
    r = k.run("%%profile --backend memray\nkeep = cell()\n")
    assert r.error is None, r.text()
    html = static(r)
    assert "aggregated while recording (no record of each allocation)" in html
    assert "not measured (memray aggregated while recording and kept no record of each allocation; " \
           "--allocated records every one (slower))" in html
    assert k.value("_profile.metrics") == ["samples", "bytes"]
    assert k.value("int(_profile.functions().set_index('name').loc['alloc', 'total'])") > 20_000_000
    # Issue 27: the default leaves Python's allocators untraced; its bytes at the peak within 5% of
    # tracemalloc's peak for the same cell, in this kernel; the header and the announce line say how.
    total = k.value("int(_profile.total('bytes'))")
    k.run("import gc\ndel keep\ngc.collect()\ntracemalloc.start(); keep = cell(); tm_peak = tracemalloc.get_traced_memory()[1]\n"
          "tracemalloc.stop(); del keep\n")
    peak = k.value("tm_peak")
    assert abs(total - peak) <= 0.05 * peak, (total, peak)
    assert "were counted by the pymalloc blocks and 1 MiB arenas they filled" in html and "--memory-exact traces" in html
    assert "small objects by pymalloc&#x27;s blocks and arenas; --memory-exact traces each object" in html or \
        "small objects by pymalloc's blocks and arenas; --memory-exact traces each object" in plain(r)
    # The raw .bin is kept, as a download; memray's own reader opens it.
    assert k.value("_profile.raw.format") == "memray"
    assert re.search(r"download='profmagic-memray-\d+\.bin'", k.value("report.downloads_html(_profile)"))
    r = k.run("%%profile --backend memray --leaks\nkeep = cell()\ndel keep\n")
    assert r.error is None, r.text()
    assert mf.LEAKS_LABEL in static(r)
    fn = k.value("_profile.functions().set_index('name')['total'].to_dict()")
    # Its list was freed before the cell ended: of its 21 MB, by default at most the one pymalloc arena
    # (1 MiB) that its small objects opened is still counted, when another object keeps it open.
    assert fn.get("alloc", 0) <= 2**20, fn
    r = k.run("%%profile --backend memray --leaks --memory-exact\nkeep = cell()\ndel keep\n")
    assert r.error is None, r.text()
    fn = k.value("_profile.functions().set_index('name')['total'].to_dict()")
    assert fn.get("alloc", 0) < 1_000, fn   # every object traced: nothing of alloc's is left


@pytest.mark.timed
def test_time_beside_memory_in_one_run(clean):
    """--memory --allocated: the sampler's wall and CPU time and memray's bytes per function, from one
    run (--memory alone samples allocations: tests/test_memsample.py)."""
    k = clean
    r = k.run("runs = 0\n")
    r = k.run("%%profile --backend sampler --memory --allocated\nruns += 1\nkeep = cell()\nspin(0.3)\nnap(0.3)\n",
              timeout=300)
    assert r.error is None, r.text()
    assert k.value("runs") == 1
    t = k.value("memory.side_by_side(_profile).set_index('name')[['wall', 'cpu', 'bytes']].to_dict('index')")
    # spin: 0.3 s of CPU; nap: 0.3 s of waiting; neither keeps a byte.
    assert t["spin"]["cpu"] > 0.2 and t["spin"]["bytes"] < 1_000
    assert t["nap"]["wall"] > 0.2 and t["nap"]["cpu"] < 0.05 and t["nap"]["bytes"] < 1_000
    assert t["alloc"]["bytes"] > 20_000_000 and t["alloc"]["wall"] > 0
    html = static(r)
    assert f"memory: memray {mf.version()} (every allocation)" in html and "Time beside memory" in html
    assert "profmagic-memory-strip" in html and "seconds since the time recorder" in html
    assert "recording with sampler at 100 Hz, and memory with memray (every allocation" in plain(r)


@pytest.mark.parametrize("opts, error_id", [
    ("--backend pyinstrument --memory", "memory-with-setprofile"),
    ("--backend sampler --memory --subprocesses", "memory-with-subprocesses"),
    ("--backend sampler --leaks", "memory-options"),
])
def test_refusals_say_why_and_run_nothing(clean, opts, error_id):
    k = clean
    k.run("ran = False\n")
    r = k.run(f"%%profile {opts}\nran = True\n")
    assert r.error is None and k.value("ran") is False, r.text()
    line = [ln for ln in r.stderr.splitlines() if ln.startswith("profmagic:")]
    assert len(line) == 1, r.stderr
    F.documented(error_id, line[0])


def test_native_frames(clean):
    k = clean
    r = k.run("%%profile --backend memray --native\nkeep = alloc()\n", timeout=300)
    assert r.error is None, r.text()
    kinds = k.value("sorted(set(_profile.frames['kind'].astype(str)))")
    assert "native" in kinds and "python" in kinds
    assert k.value("int(_profile.functions().set_index('name').loc['alloc', 'total'])") > 20_000_000


def test_forked_children_with_subprocesses(clean):
    """--subprocesses goes to memray's follow_fork, not the time backends' child sampler."""
    k = clean
    r = k.run("%%profile --backend memray --subprocesses\n"
              "pid = os.fork()\n"
              "if pid == 0:\n"
              "    x = [bytearray(2000) for _ in range(1000)]\n"
              "    os._exit(0)\n"
              "os.waitpid(pid, 0)\n", timeout=300)
    assert r.error is None, r.text()
    procs = k.value("list(_profile.meta['processes'])")
    child = k.value("pid")
    assert procs == [f"pid {k.pid} · parent", f"pid {child} · forked child"]
    assert 2_000_000 <= k.value(f"int(_profile.stacks.loc[_profile.stacks['process'] == {procs[1]!r}, "
                                "'bytes'].sum())") < 2_300_000
    assert k.value(f"_profile.meta['processes'][{procs[1]!r}]['role']") == "forked child"
    assert "childsampler" not in plain(r)


def test_raising_cell_shows_its_profile(clean):
    k = clean
    r = k.run("%%profile --backend memray\nkeep = alloc()\n1 / 0\n")
    assert r.error is not None and r.error["ename"] == "ZeroDivisionError"
    assert "Partial: the code raised ZeroDivisionError" in static(r)
    assert k.value("int(_profile.functions().set_index('name').loc['alloc', 'total'])") > 20_000_000


@pytest.mark.timeout(1200)
def test_300_memray_cells_keep_rss_bounded(clean):
    """As tests/test_long_session.py for time: 300 %%profile --backend memray cells grow the kernel's RSS
    by less than issue 27's 150 MB, and open fds and threads stay flat; the clean fixture checks that
    no temp file is left.

    Not flat, because filling pymalloc's free space before each recording (fill_pymalloc) puts what the
    kernel keeps of each cell in fresh arenas, which it then pins: `bench_long_session.py --memray` grows
    +94 MB over 300 cells with the fill and +1.2 MB with it off (RESULTS, "Long sessions: memray cells").
    Measured 2026-12-05 at 20/50/100/200/300/400 cells: 164, 174, 192, 209, 219, 228 MB, so
    0.35 MB a cell at first and 0.09 at the end; five more runs to 300 cells grew 47-65 MB from the
    20th, 4-15 MB over the last 100. From 20 to 200 cells, 39-59 MB over six runs: this test's old
    bound there, 50 MB, failed half of them."""
    from test_long_session import fds, os_threads, rss_mb
    k = clean
    k.run("def tiny():\n    return [bytearray(100) for _ in range(2000)]\n")
    fig = {}
    for i in range(1, 301):
        r = k.run("%%profile --backend memray -q\nkeep = tiny()\n")
        assert r.error is None, (i, r.text())
        if i in (20, 100, 200, 300):
            fig[i] = (rss_mb(k.pid), fds(k.pid), os_threads(k.pid))
    assert k.value("_profile.total()") >= 200_000
    rss = {i: v[0] for i, v in fig.items()}
    print(f"memray cells: RSS (MB) {rss}; fds {fig[20][1]} -> {fig[300][1]}; threads {fig[20][2]} -> {fig[300][2]}")
    assert rss[300] - rss[20] < 150, fig
    assert fig[300][1] <= fig[20][1] and fig[300][2] <= fig[20][2], fig

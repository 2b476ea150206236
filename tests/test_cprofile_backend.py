"""The cProfile backend, recorded in this process; the 3.12 conflict in a real python3.12."""
import cProfile
import os
import subprocess
import sys
import textwrap

import pytest
import tools

import profmagic
from profmagic.backends import cprofile
from profmagic.backends.base import Options
from profmagic.formats import pstats as pstats_format
from test_sampler import BUSY_CPU, by_name, check_wall_shares, clean_tmp, record, work  # noqa: F401  (clean_tmp is a fixture)

pytestmark = [pytest.mark.timed, pytest.mark.timeout(120)]
PY312 = tools.find("python3.12")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_wall_mode_shares(clean_tmp):
    p, cap = record(cprofile, work, mode="wall")
    assert p.metric == "wall" and cap.format == "pstats" and p.raw.format == "pstats"
    check_wall_shares(by_name(p, "wall"))
    assert p.meta["timer"] == "time.perf_counter" and p.meta["approximate"]
    assert p.threads == [p.meta["cell_thread"]]
    assert "calls" in p.stacks and p.meta["calls"] >= 3


def test_cpu_mode_drops_the_sleep(clean_tmp):
    p, _ = record(cprofile, work, mode="cpu")
    assert p.metric == "cpu" and p.meta["timer"] == "time.thread_time"
    cpu = by_name(p, "cpu")
    assert cpu["busy"] == pytest.approx(BUSY_CPU, rel=0.15)
    assert cpu.get("nap", 0.0) < 0.01
    assert p.stacks["wall"].isna().all()  # a CPU timer knows nothing of wall time


def test_flat_table_is_exact(clean_tmp):
    p, cap = record(cprofile, work, mode="wall")
    t = pstats_format.table(p).set_index("name")
    stats = pstats_format.load(cap.data)
    for (file, line, name), (cc, nc, tt, ct, callers) in stats.items():
        row = t.loc[name]
        assert (row["ncalls"], row["primitive_calls"]) == (nc, cc)
        assert row["tottime"] == tt and row["cumtime"] == ct
    assert "work (" in t.loc["nap", "callers"][0]
    assert t.loc["work", "callees"] and any(c.startswith("busy") for c in t.loc["work", "callees"])


def test_both_mode_is_refused():
    with pytest.raises(profmagic.ProfilerError, match="--backend sampler"):
        cprofile.Recorder(Options(mode="both"))


def test_another_profiler_in_this_process(clean_tmp):
    other = cProfile.Profile()
    other.enable()
    try:
        rec = cprofile.Recorder(Options())
        try:
            with pytest.raises(profmagic.ProfilerError) as e:
                rec.start()
        finally:
            rec.close()
    finally:
        other.disable()
    msg = str(e.value)
    assert "already active" in msg and "--backend sampler" in msg and "disable()" in msg
    assert sys.getprofile() is None


def test_close_after_an_exception_disables_the_profiler(clean_tmp):
    rec = cprofile.Recorder(Options())
    with pytest.raises(ZeroDivisionError):
        try:
            rec.start()
            1 / 0
        finally:
            rec.close()
    rec.close()
    assert sys.getprofile() is None and cprofile.active_profiler() is None


@pytest.mark.requires("python3.12")
def test_312_another_profiling_tool_is_already_active():
    # python3.12 here has no pandas, so the script maps the profmagic package path without running
    # profmagic/__init__.py (which imports the model). The backend and the conflict are real.
    script = textwrap.dedent(f"""
        import cProfile, sys, types
        pkg = types.ModuleType("profmagic"); pkg.__path__ = [{os.path.join(ROOT, "profmagic")!r}]
        sys.modules["profmagic"] = pkg
        from profmagic.backends import cprofile
        from profmagic.backends.base import Options
        from profmagic.errors import ProfilerError
        other = cProfile.Profile(); other.enable()
        rec = cprofile.Recorder(Options())
        try:
            rec.start()
        except ProfilerError as e:
            print("ERROR:", e)
        finally:
            rec.close()
            other.disable()
        # The raw ValueError this turns into a clear message:
        a = cProfile.Profile(); a.enable()
        try:
            cProfile.Profile().enable()
        except ValueError as e:
            print("RAW:", e)
        a.disable()
        # With the other tool gone, recording works.
        rec = cprofile.Recorder(Options()); rec.start(); cap = rec.stop(); rec.close()
        print("OK:", cap.format, len(cap.data) > 0)
    """)
    out = subprocess.run([PY312, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "RAW: Another profiling tool is already active" in out.stdout
    err = next(line for line in out.stdout.splitlines() if line.startswith("ERROR:"))
    assert "'cProfile' (holds sys.monitoring.PROFILER_ID) is already active" in err
    assert "--backend sampler" in err
    assert "OK: pstats True" in out.stdout

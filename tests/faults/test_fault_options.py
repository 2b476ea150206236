"""Issue 21, the rough edges a held-out attack found in options, clocks, nesting and leftovers, each
produced for real in a real kernel. Every option is checked before the cell runs: a bad one runs
nothing and prints the message docs/errors.md gives for it."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import documented
from procs import state, wait_for

BACKENDS = ["sampler", "pyinstrument", pytest.param("py-spy", marks=pytest.mark.requires("py-spy", "ptrace")),
            pytest.param("perf", marks=pytest.mark.requires("perf")),
            pytest.param("eu-stack", marks=pytest.mark.requires("eu-stack"))]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("rate", ["0", "-5", "nan", "inf", "1e9"])
def test_bad_rate_runs_nothing(clean, backend, rate):
    k = clean
    k.run("ran = False")
    r = k.run(f"%%profile -b {backend} --rate {rate}\nran = True\n")
    assert r.error is None, r.error
    documented("bad-rate", r.stderr)
    assert k.value("ran") is False


def test_bad_duration_and_pid(clean):
    r = clean.run("%profile --pid 1 --duration nan")
    documented("bad-duration", r.stderr)
    r = clean.run("%profile --pid 12;x --duration 1")
    documented("bad-pid", r.stderr)


def test_output_path_with_spaces(clean, tmp_path):
    out = tmp_path / "my runs" / "p.speedscope.json"
    out.parent.mkdir()
    r = clean.run(f'%%profile -b sampler -q -o "{out}"\nbusy(0.1)\n')
    assert r.error is None and not r.stderr.strip().startswith("profmagic: --output"), r.text()
    import profmagic
    assert "busy" in set(profmagic.load(out).frames["name"])


def test_output_to_a_fifo_is_refused_without_hanging(clean, tmp_path):
    fifo = tmp_path / "p.json"
    os.mkfifo(fifo)
    clean.run("ran = False")
    r = clean.run(f"%%profile -b sampler -q -o {fifo}\nran = True\n", timeout=30)
    documented("output-not-a-file", r.stderr)
    assert clean.value("ran") is False


def test_relative_output_in_a_deleted_working_directory(clean, tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    k = clean
    k.run(f"import os\n_home = os.getcwd()\nos.chdir({str(gone)!r})\nos.rmdir({str(gone)!r})")
    try:
        r = k.run("%%profile -b sampler -q -o rel.json\nbusy(0.1)\n")
        documented("output-no-cwd", r.stderr)
    finally:
        k.run("os.chdir(_home)")


@pytest.mark.parametrize("backend", [pytest.param("py-spy", marks=pytest.mark.requires("py-spy", "ptrace")),
                                     pytest.param("perf", marks=pytest.mark.requires("perf"))])
def test_unusable_tmpdir(clean, backend):
    k = clean
    k.run("import os, tempfile\n_tmp = os.environ['TMPDIR']\nos.environ['TMPDIR'] = '/nonexistent/tmp'\n"
          "tempfile.tempdir = None")
    try:
        k.run("ran = False")
        r = k.run(f"%%profile -b {backend}\nran = True\n")
        documented("tmpdir-unusable", r.stderr)
        assert k.value("ran") is False
        r = k.run("%%profile -b sampler -q\nbusy(0.1)\n")     # in-process: needs no temp folder
        assert r.error is None and k.value("_profile.sample_count") > 0
    finally:
        k.run("os.environ['TMPDIR'] = _tmp\ntempfile.tempdir = None")


@pytest.mark.parametrize("backend", ["sampler", pytest.param("py-spy", marks=pytest.mark.requires("py-spy", "ptrace"))])
def test_a_cell_that_mocks_the_clock_keeps_its_profile(clean, backend):
    """The cell replaces time.perf_counter for good: profmagic times the cell with its own references
    to the real clocks, says so, and the profile has a sane duration and positive weights."""
    k = clean
    k.run("import time\n_real_pc = time.perf_counter")
    try:
        r = k.run(f"%%profile -b {backend} -q\nbusy(0.2)\ntime.perf_counter = lambda: -3389.0\n")
        assert r.error is None, r.error
        s = k.value("dict(d=_profile.duration, w=_profile.meta.get('warnings'), neg=bool((_profile.weights('wall') < 0).any()))")
        assert 0.15 < s["d"] < 5 and not s["neg"], s
        assert any("replaced time.perf_counter" in w for w in s["w"]), s
    finally:
        k.run("time.perf_counter = _real_pc")


def test_nested_cprofile_is_said(clean):
    r = clean.run("%%profile -b cprofile -q\nimport cProfile\n_pr = cProfile.Profile()\n_pr.enable()\n"
                  "busy(0.1)\n_pr.disable()\n")
    assert r.error is None, r.error
    w = clean.value("_profile.meta.get('warnings')")
    assert w and "started a profiler of its own" in w[0] and "sys.setprofile" in w[0]


def test_nested_pyinstrument_is_said(clean):
    r = clean.run("%%profile -b sampler -q\nimport pyinstrument\n_p = pyinstrument.Profiler()\n_p.start()\n"
                  "busy(0.1)\n_p.stop()\n")
    assert r.error is None, r.error
    w = clean.value("_profile.meta.get('warnings')")
    assert w and "started a profiler of its own" in w[0]


def test_profmagic_is_not_in_its_own_profile(clean):
    """A `with profmagic.profile()` inside a profiled cell: the outer profile shows neither the inner
    sampler's thread nor profmagic's own functions, only the user's call into it."""
    r = clean.run("%%profile -b py-spy -q\nwith profmagic.profile('sampler', announce=lambda t: None) as _rec:\n"
                  "    busy(0.3)\n")
    assert r.error is None, r.error
    names = clean.value("[str(n) for n in _profile.thread_table['name']]")
    assert "profmagic-sampler" not in names
    files = clean.value("sorted({_profile.frames.at[f, 'file'] for s in _profile.stacks['stack'] for f in s})")
    package = clean.value("__import__('os').path.dirname(profmagic.__file__) + '/'")   # not a path that merely
    assert not [f for f in files if f.startswith(package) and "/casestudy/" not in f], files   # has 'profmagic' in it
    assert clean.value("_rec.profile.sample_count") > 0


def test_stale_temp_dirs_of_a_dead_process_are_removed(clean):
    k = clean
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = os.path.join(k.tmp, f"profmagic-{dead.pid}-left")
    os.makedirs(os.path.join(stale, "x"))
    mine = os.path.join(k.tmp, f"profmagic-{k.pid}-keep")   # a live owner's folder stays
    os.makedirs(mine)
    try:
        r = k.run("%%profile -b py-spy -q\nbusy(0.1)\n")
        assert r.error is None, r.error
        assert not os.path.exists(stale)
        assert os.path.exists(mine)
    finally:
        os.rmdir(mine)


def test_pid_that_is_not_python(clean):
    r = clean.run("%profile --pid 1 --duration 0.5")
    assert "not look like a Python program" in r.stderr or "is not a Python process" in r.stderr, r.text()
    assert "ptrace" not in r.stderr


@pytest.mark.requires("perf")
def test_perf_on_a_sleeping_process(clean):
    p = subprocess.Popen([sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(30)"],
                         stdout=subprocess.PIPE)
    try:
        # Asleep: it said so, and /proc shows it in state S (polled with a deadline).
        assert p.stdout.readline() == b"ready\n"
        assert wait_for(lambda: state(p.pid) == "S", timeout=30, step=0.01)
        r = clean.run(f"%profile -b perf --pid {p.pid} --duration 0.5 -q")
        assert r.error is None, r.error
        assert "Traceback" not in r.stderr and "ProfileFormatError" not in r.stderr, r.text()
    finally:
        p.kill()
        p.wait()
        p.stdout.close()

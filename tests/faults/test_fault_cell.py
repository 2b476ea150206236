"""Faults: the profiled cell misbehaves (issue 8)."""
from __future__ import annotations

import pytest
from conftest import documented

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(120)]


@pytest.mark.requires("py-spy", "ptrace")
def test_cell_raises(clean):
    k = clean
    k.run("_profile = None")
    r = k.run("%%profile -b py-spy --idle\nbusy(0.3)\nraise ValueError('boom 42')")
    assert r.error is not None and r.error["ename"] == "ValueError" and r.error["evalue"] == "boom 42"
    documented("cell-raised", r.error["ename"])
    assert k.value("_profile.meta['partial']") == "the code raised ValueError; this profile covers it up to there"
    assert k.value("_profile.sample_count") > 0
    assert any("text/html" in d or len(d) > 1 for d in r.data), "the partial profile was not shown"


@pytest.mark.requires("py-spy", "ptrace")
def test_ctrl_c(clean, tmp_path):
    k = clean
    k.run("_profile = None")
    # Interrupted once the cell marks that it has run 0.6 s under py-spy (it starts once py-spy samples).
    mark = tmp_path / "busy-done"
    r = k.run(f"%%profile -b py-spy --idle\nbusy(0.6)\nopen({str(mark)!r}, 'w').close()\nbusy(30)",
              interrupt_on=mark.exists)
    assert r.error is not None and r.error["ename"] == "KeyboardInterrupt", r.text()
    documented("interrupted", r.error["ename"])
    assert k.value("_profile.meta['partial']").startswith("the code raised KeyboardInterrupt")
    assert 0.5 < k.value("_profile.meta['cell_wall']") < 25


@pytest.mark.parametrize("backend", [pytest.param("py-spy", marks=pytest.mark.requires("py-spy", "ptrace")),
                                     "sampler"])
def test_cell_under_1ms_zero_samples(clean, backend):
    r = clean.run(f"%%profile -b {backend}\nx = 1")
    assert r.error is None, r.error
    documented("no-samples", r.stderr)
    documented("few-samples-short", r.stderr)
    assert f"{backend} sampled at 100 Hz" in r.stderr


@pytest.mark.requires("py-spy", "ptrace")
def test_recursion_10000_deep(clean):
    k = clean
    k.run("sys.setrecursionlimit(30000)\ndef deep(n):\n    return deep(n - 1) if n else busy(0.4)\n")
    r = k.run("%%profile -b sampler -q\ndeep(10000)")
    assert r.error is None, r.error
    assert k.value("max(len(s) for s in _profile.stacks['stack'])") >= 10000
    assert k.value("int((_profile.frames['name'] == 'deep').sum())") >= 1
    # The report renders such a stack.
    r = k.run("_b = get_ipython().display_formatter.format(_profile)[0]\nprint(sorted(_b))")
    assert r.error is None, r.error
    # py-spy 0.4 cannot read stacks this deep: the message gives what py-spy itself reported (read
    # errors) and points to the sampler, without guessing at the cause.
    r = k.run("%%profile -b py-spy\ndeep(10000)")
    assert r.error is None, r.error
    documented("few-samples-tool-errors", r.stderr)
    assert "deep" not in r.stderr.split("profmagic:", 1)[1].lower()


@pytest.mark.requires("py-spy", "ptrace")
def test_200_threads(clean):
    k = clean
    body = ("_ts = [threading.Thread(target=busy, args=(0.01,), name=f'w{i}') for i in range(200)]\n"
            "for t in _ts: t.start()\nfor t in _ts: t.join()\nbusy(0.3)")
    r = k.run(f"%%profile -b py-spy --idle -q\n{body}")
    assert r.error is None, r.error
    assert k.value("_profile.sample_count") > 0
    assert k.value("_profile.meta['cell_thread'] in _profile.threads")
    r = k.run("%%profile -b sampler -q\n" + body)
    assert r.error is None, r.error
    assert k.value("sum(t.name.startswith('w') and t.name[1:].isdigit() for t in threading.enumerate())") == 0


@pytest.mark.requires("py-spy", "ptrace")
def test_cell_forks_a_subprocess(clean):
    k = clean
    r = k.run("%%profile -b py-spy --idle -q\nimport subprocess\n"
              "subprocess.run([sys.executable, '-c', 'import time; time.sleep(0.3)'], check=True)\n"
              "_pid = os.fork()\nif _pid == 0:\n    os._exit(0)\nos.waitpid(_pid, 0)\nbusy(0.2)")
    assert r.error is None, r.error
    assert k.value("_profile.sample_count") > 0
    names = k.value("sorted(set(_profile.frames['name']))")
    assert "busy" in names


@pytest.mark.requires("py-spy", "ptrace")
def test_top_level_await(clean):
    k = clean
    r = k.run("%%profile -b py-spy --idle -q\nawait asyncio.sleep(0.2)\nbusy(0.3)")
    assert r.error is None, r.error
    names = k.value("sorted(set(_profile.frames['name']))")
    assert "busy" in names
    assert k.value("'profmagic-await' in _profile.meta['cell_thread']")

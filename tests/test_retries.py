"""The test helpers' own rules: counted tries (tests/retries.py) and the one policy for a missing
requirement (tests/tools.py). Plain logic, run on scripted outcomes."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import retries
import tools

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(autouse=True)
def own_lists(monkeypatch):
    """These scripted misses stay out of the session's "counted misses" summary."""
    monkeypatch.setattr(retries, "MISSES", [])
    monkeypatch.setattr(retries, "OVERLOADED", [])


def scripted(outcomes):
    it = iter(outcomes)
    calls = []

    def once():
        calls.append(1)
        return next(it)
    return once, calls


def test_plan_meets_its_targets_or_says_it_cannot():
    r = retries.plan(0, 40, "t")
    assert (r.tries, r.allowed) == (16, 2)
    assert retries._tail(r.tries, r.allowed, r.noise) <= retries.FALSE_FAIL
    assert 1 - retries._tail(r.tries, r.allowed, retries.REGRESSION) <= retries.MISSED
    weak = retries.plan(12, 120, "t")   # 11 % noise: no n up to MAX_TRIES separates it from 30 %
    assert weak.tries == retries.MAX_TRIES and "regression passes 56.5%" in weak.describe()
    # Best of three, the old way, would pass a 30 % regression 97 % of the time.
    assert 1 - 0.3 ** 3 == pytest.approx(0.973)


def test_run_passes_at_enough_hits_and_fails_past_the_allowed_misses(monkeypatch):
    monkeypatch.delenv("PROFMAGIC_MEASURE_NOISE", raising=False)
    rule = retries.Rule(0.02, "t", tries=5, allowed=1)
    once, calls = scripted([None, "off", None, None, None, None])
    retries.run(rule, once)
    assert len(calls) == 5                     # 4 hits decide it; the miss is listed
    assert retries.MISSES[-1][1:] == (2, "off")
    once, calls = scripted(["a", None, "b", None, None])
    with pytest.raises(AssertionError, match=r"(?s)2 misses after 3 tries.*try 1: a.*try 3: b"):
        retries.run(rule, once)


def test_overloaded_tries_are_not_counted_and_too_many_is_a_missing_requirement(monkeypatch):
    monkeypatch.delenv("PROFMAGIC_MEASURE_NOISE", raising=False)
    monkeypatch.delenv("PROFMAGIC_REQUIRE_TOOLS", raising=False)
    monkeypatch.setenv("CI", "false")
    rule = retries.Rule(0.02, "t", tries=6, allowed=0)
    busy = retries.waited(0.9, 1.0)
    assert isinstance(busy, retries.Overloaded) and "90%" in busy.detail
    assert retries.waited(0.2, 1.0) is None and retries.waited(None, 1.0) is None
    once, calls = scripted([busy, None, None, busy, None, None, None, None])
    retries.run(rule, once)
    assert len(calls) == 8                     # 6 counted hits, 2 overloaded tries beside them
    once, calls = scripted([busy, busy, busy])
    with pytest.raises(pytest.skip.Exception, match="needs a core to spare"):
        retries.run(rule, once)
    monkeypatch.setenv("CI", "true")
    once, calls = scripted([busy, busy, busy])
    with pytest.raises(pytest.fail.Exception, match="needs a core to spare.*under CI"):
        retries.run(rule, once)


@pytest.mark.parametrize("env,outcome", [({"CI": "true"}, "failed"), ({"PROFMAGIC_REQUIRE_TOOLS": "1"}, "failed"),
                                         ({}, "skipped")])
def test_a_missing_tool_fails_under_ci_and_skips_elsewhere_with_the_same_line(tmp_path, env, outcome):
    (tmp_path / "conftest.py").write_text(  # the suite's own hooks, loaded under another module name
        f"import importlib.util, sys\nsys.path.insert(0, {HERE!r})\n"
        f"spec = importlib.util.spec_from_file_location('suite_conftest', {os.path.join(HERE, 'conftest.py')!r})\n"
        "m = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(m)\n"
        "pytest_configure, pytest_runtest_setup = m.pytest_configure, m.pytest_runtest_setup\n")
    (tmp_path / "test_x.py").write_text(
        "import pytest, tools\n"
        "tools.REQUIREMENTS['no-such-tool'] = (tools._tools('profmagic-no-such-tool'), 'apt-get install no-such')\n"
        "@pytest.mark.requires('no-such-tool')\n"
        "def test_needs_it():\n    pass\n")
    clean = {k: v for k, v in os.environ.items() if k not in ("CI", "PROFMAGIC_REQUIRE_TOOLS")}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider", str(tmp_path)],
                       capture_output=True, text=True, cwd=tmp_path, env={**clean, **env}, timeout=120)
    assert f"1 {'error' if outcome == 'failed' else outcome}" in r.stdout, r.stdout
    assert "needs no-such-tool (profmagic-no-such-tool not found" in r.stdout
    assert "install: apt-get install no-such" in r.stdout


def test_tools_are_found_next_to_the_interpreter_first():
    assert tools.find("python") == os.path.join(os.path.dirname(sys.executable), "python")
    assert tools.find("profmagic-no-such-tool") is None
    assert tools.find("sh") is not None   # on PATH

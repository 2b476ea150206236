"""The profmagic command: info on every corpus file, convert between speedscope and folded."""
from __future__ import annotations

import glob
import json
import os
import subprocess
from decimal import Decimal

import pytest
import tools

import profmagic
from profmagic import cli

TEST_DIR = os.path.join(os.path.dirname(__file__), "data", "flamegraph", "test")
RESULTS = sorted(glob.glob(os.path.join(TEST_DIR, "results", "*")))
INPUTS = sorted(glob.glob(os.path.join(TEST_DIR, "perf-*.txt")))
EXAMPLE = os.path.join(os.path.dirname(profmagic.__file__), "examples", "worker.folded")
BIN = tools.find("profmagic")   # the installed command: next to the interpreter, else on PATH


def _info(path, capsys):
    assert cli.main(["info", path]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("path", RESULTS, ids=os.path.basename)
def test_info_on_every_corpus_result(path, capsys):
    out = _info(path, capsys)
    total = sum(Decimal(ln.rsplit(None, 1)[1]) for ln in open(path, encoding="utf-8", errors="replace")
                if ln.strip())
    assert "format:   folded" in out
    assert f"samples:  {int(total):,}" in out
    assert "threads:  1" in out
    assert "top 10 functions by self (samples):" in out
    assert "top 10 functions by total (samples):" in out
    # The heaviest function by total is the root of most stacks: its share is printed first.
    p = profmagic.load(path)
    top = p.functions().iloc[0]
    assert top["name"] in out


@pytest.mark.parametrize("path", INPUTS, ids=os.path.basename)
def test_info_on_every_corpus_input(path, capsys):
    assert len(INPUTS) == 13
    out = _info(path, capsys)
    assert "format:   perf_script" in out
    p = profmagic.load(path)
    assert p.sample_count > 0
    assert f"samples:  {p.sample_count:,}" in out


def test_info_prints_the_summary(capsys):
    out = _info(EXAMPLE, capsys)
    lines = out.splitlines()
    assert lines[0] == "format:   folded"
    assert "samples:  190" in out
    assert "duration: unknown" in out
    by_self = out.split("by self")[1].split("by total")[0]
    # wait_for_worker is the leaf of 80 + 10 of 190 samples, in two stacks.
    assert by_self.splitlines()[1].split() == ["47.37%", "90", "wait_for_worker"]
    assert by_self.splitlines()[2].split() == ["44.74%", "85", "ioctl"]


def test_convert_both_ways_with_the_installed_command(tmp_path):
    ss = tmp_path / "worker.speedscope.json"
    r = subprocess.run([BIN, "convert", EXAMPLE, str(ss)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "wrote" in r.stdout and "190 samples" in r.stdout
    doc = json.loads(ss.read_bytes())
    assert doc["exporter"].startswith("profmagic@")
    assert {f["name"] for f in doc["shared"]["frames"]} >= {"ioctl", "wait_for_worker"}
    back = tmp_path / "worker.folded"
    assert cli.main(["convert", str(ss), str(back)]) == 0
    assert sorted(back.read_text().splitlines()) == sorted(open(EXAMPLE).read().splitlines())
    txt = tmp_path / "worker.txt"
    assert cli.main(["convert", str(ss), str(txt)]) == 0
    assert txt.read_text() == back.read_text()


def test_convert_time_ordered_speedscope_to_folded_and_back(tmp_path):
    src = tmp_path / "in.json"
    src.write_text(json.dumps({
        "shared": {"frames": [{"name": "main", "file": "a.py", "line": 1}, {"name": "f", "file": "a.py", "line": 2}]},
        "profiles": [{"type": "sampled", "name": "T", "unit": "milliseconds", "startValue": 0, "endValue": 4,
                      "samples": [[0, 1], [0], [0, 1]], "weights": [1, 1, 2]}]}))
    out = tmp_path / "out.folded"
    assert cli.main(["convert", str(src), str(out)]) == 0
    # Folded has no time unit: the wall weights in ms become seconds, written as decimals.
    assert out.read_text() == "main 0.001\nmain;f 0.003\n"
    again = tmp_path / "again.speedscope.json"
    assert cli.main(["convert", str(out), str(again)]) == 0
    assert profmagic.load(again).total() == pytest.approx(0.004)


def test_errors_go_to_stderr_with_status_2(tmp_path, capsys):
    bad = tmp_path / "bad.folded"
    bad.write_text("a;b 1\nnot a stack\n")
    assert cli.main(["info", "--format", "folded", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("profmagic: ") and "line 2" in err and "'not a stack'" in err
    assert cli.main(["convert", EXAMPLE, str(tmp_path / "out.svg")]) == 2
    assert "cannot tell the output format" in capsys.readouterr().err
    assert cli.main(["info", str(tmp_path / "missing.json")]) == 2

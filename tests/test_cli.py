"""The profmagic command: info on every corpus file, convert between speedscope and folded."""
from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
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


# -- record, view, convert (issue 18) ------------------------------------------------------------------
import base64
import html as html_mod
import re
import signal
import time

from faults.conftest import documented
from profmagic.backends import pyspy

# Main thread: busy (0.3 s of CPU), then nap (0.3 s); a "helper" thread: busy 0.15 s, nap 0.25 s. Each
# measures itself and the truth goes to argv[1]; it exits with status 5.
WORKLOAD = '''\
import json, sys, threading, time

def busy(s):
    t = time.thread_time()
    while time.thread_time() - t < s:
        pass

def nap(s):
    time.sleep(s)

def helper(out):
    w, c = time.perf_counter(), time.thread_time()
    out["helper"] = {"tid": threading.get_native_id()}
    busy(0.15)
    nap(0.25)
    out["helper"].update(wall=time.perf_counter() - w, cpu=time.thread_time() - c)

def main():
    out = {"main": {"tid": threading.get_native_id()}}
    w, c = time.perf_counter(), time.thread_time()
    t = threading.Thread(target=helper, args=(out,), name="helper")
    t.start()
    f = {}
    for name, fn, s in (("busy", busy, 0.3), ("nap", nap, 0.3)):
        a = time.perf_counter()
        fn(s)
        f[name] = time.perf_counter() - a
    t.join()
    out["main"].update(wall=time.perf_counter() - w, cpu=time.thread_time() - c, functions=f)
    with open(sys.argv[1], "w") as fh:
        json.dump(out, fh)

main()
sys.exit(5)
'''


def run_record(tmp_path, *opts, out_name="p.speedscope.json", timeout=180, **kw):
    script, truth, out = tmp_path / "wl.py", tmp_path / "truth.json", tmp_path / out_name
    script.write_text(WORKLOAD)
    r = subprocess.run([BIN, "record", *opts, "-o", str(out), "--", sys.executable, str(script), str(truth)],
                       capture_output=True, text=True, timeout=timeout, **kw)
    return r, profmagic.load(out), json.loads(truth.read_text())


def thread_rows(p, tid):
    t = p.thread_table
    labels = t.loc[t["tid"] == tid, "label"].tolist()
    assert len(labels) == 1, (tid, t)
    return (p.stacks["thread"] == labels[0]).to_numpy(), labels[0]


def seconds_in(p, rows, name, metric="wall"):
    names = p.frames["name"]
    hit = [any(names[f] == name for f in s) for s in p.stacks["stack"]]
    return float(p.stacks.loc[rows & hit, metric].sum())


@pytest.mark.timeout(240)
@pytest.mark.timed
def test_record_py_spy_timed_each_thread_keeps_its_own_seconds(tmp_path):
    """py-spy's timed format, nothing calibrated: each thread's seconds are its own. Bound: 5% per
    thread (within 1.5% in 4 runs under load 13 on 2 shared cores; 5.5% once in CI) and 10 points per
    share: py-spy's timed shares are off by up to 7.5 points at 100 Hz over 5 s (bench/RESULTS.md,
    groundtruth --timed), and this run is 0.8 s (7.4 points once in CI, busy under GIL contention)."""
    r, p, truth = run_record(tmp_path, "-b", "py-spy", "--mode", "wall")
    assert r.returncode == 5, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("profmagic: wrote ")   # no progress line off a TTY
    assert p.meta["timing"] == pyspy.TIMED and p.meta["exit_status"] == 5 and p.meta["backend"] == "py-spy"
    assert p.samples is not None and len(p.samples) > 0
    for th in ("main", "helper"):
        rows, label = thread_rows(p, truth[th]["tid"])
        assert label == f'Thread {truth[th]["tid"]} "{"MainThread" if th == "main" else "helper"}"'
        assert seconds_in(p, rows, th) == pytest.approx(truth[th]["wall"], rel=0.05), th   # what it measured
    rows, _ = thread_rows(p, truth["main"]["tid"])
    main = truth["main"]
    for fn in ("busy", "nap"):
        share = seconds_in(p, rows, fn) / main["wall"]
        assert abs(share - main["functions"][fn] / main["wall"]) < 0.1, fn


@pytest.mark.timeout(240)
@pytest.mark.timed
def test_record_default_is_py_spy_with_both_clocks(tmp_path):
    r, p, truth = run_record(tmp_path)
    assert r.returncode == 5, r.stderr
    assert p.meta["backend"] == "py-spy" and p.meta["mode"] == "both" and p.meta["timing"] == pyspy.TIMED
    assert {"wall", "cpu"} <= set(p.metrics)
    rows, _ = thread_rows(p, truth["main"]["tid"])
    assert seconds_in(p, rows, "main") == pytest.approx(truth["main"]["wall"], rel=0.05)
    # py-spy's idle detection: nap's samples are idle, busy's are not.
    assert seconds_in(p, rows, "busy", "cpu") > 0.1 > seconds_in(p, rows, "nap", "cpu")


@pytest.mark.timeout(240)
@pytest.mark.timed
def test_record_sampler_inside_the_command(tmp_path):
    """The built-in sampler starts inside the command (sitecustomize): CPU from thread clocks, so busy's
    CPU is its measured 0.3 s (10%: the sampler's pass boundaries)."""
    r, p, truth = run_record(tmp_path, "-b", "sampler")
    assert r.returncode == 5, r.stderr
    assert p.meta["backend"] == "sampler" and {"wall", "cpu"} <= set(p.metrics)
    rows, _ = thread_rows(p, truth["main"]["tid"])
    assert seconds_in(p, rows, "busy", "cpu") == pytest.approx(0.3, rel=0.1)
    assert seconds_in(p, rows, "main", "wall") == pytest.approx(truth["main"]["wall"], rel=0.05)
    hrows, label = thread_rows(p, truth["helper"]["tid"])
    assert label.endswith('"helper"')
    assert seconds_in(p, hrows, "busy", "cpu") == pytest.approx(0.15, rel=0.1)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("backend", ["py-spy", "sampler"])
@pytest.mark.timed
def test_record_ctrl_c_goes_to_the_command_and_the_profile_is_written(tmp_path, backend):
    script, out = tmp_path / "long.py", tmp_path / "l.speedscope.json"
    # The command says when it has waited its second inside waiting(): the signal follows that line,
    # not a sleep here that hopes the command got there.
    script.write_text("import time\ndef waiting():\n    time.sleep(1.0)\n    print('waited', flush=True)\n"
                      "    time.sleep(60)\nprint('started', flush=True)\nwaiting()\n")
    # No terminal: with one, record leaves SIGINT to the terminal (Ctrl-C reaches the command's group),
    # and a signal sent to record alone would not reach the command (the pty test covers that case).
    # SIGINT at its default: a shell's background job (make test &) inherits it ignored, and so would
    # the command, as under a real shell.
    proc = subprocess.Popen([BIN, "record", "-b", backend, "-o", str(out), "--", sys.executable, str(script)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert proc.stdout.readline() == "started\n"
        assert proc.stdout.readline() == "waited\n"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGINT, err      # Python died of the forwarded SIGINT
    assert "KeyboardInterrupt" in err
    p = profmagic.load(out)
    assert p.meta["exit_status"] == 130 and p.meta["ended_by"] == "SIGINT"
    assert p.meta["partial"].startswith("interrupted after")
    waited = p.functions().set_index("name").at["waiting", "total"]
    assert 0.9 <= waited <= p.meta["duration"] + 0.05


@pytest.mark.timeout(240)
def test_record_a_native_command_with_perf(tmp_path):
    out = tmp_path / "dd.speedscope.json"
    r = subprocess.run([BIN, "record", "-b", "perf", "-o", str(out), "--", "dd", "if=/dev/zero", "of=/dev/null",
                        "bs=64k", "count=20000"], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    p = profmagic.load(out)
    assert p.meta["backend"] == "perf" and p.metric == "cpu" and p.total("cpu") > 0
    assert list(p.thread_table["name"]) == ["dd"]
    # Stopped before exec: the recording starts with dd's own start-up, not the launcher's Python.
    assert not any("python" in str(f).lower() for f in p.frames["file"])


@pytest.mark.timeout(120)
def test_progress_line_on_a_terminal(tmp_path):
    import pty
    main_fd, sub_fd = pty.openpty()
    script = tmp_path / "s.py"
    script.write_text("import time\ntime.sleep(2.5)\n")
    try:
        r = subprocess.run([BIN, "record", "-b", "sampler", "-o", str(tmp_path / "s.speedscope.json"), "--",
                            sys.executable, str(script)], stderr=sub_fd, stdout=subprocess.DEVNULL, timeout=60)
        os.close(sub_fd)
        got = b""
        while True:
            try:
                chunk = os.read(main_fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            got += chunk
    finally:
        os.close(main_fd)
    assert r.returncode == 0
    lines = re.findall(rb"\rprofmagic: recording with the built-in sampler \(.*?\) \xc2\xb7 (\d+) s(?: \xc2\xb7 ([\d,]+) samples)?",
                       got)
    assert len(lines) >= 2, got
    assert [int(s) for s, _ in lines][:3] == sorted(int(s) for s, _ in lines[:3])
    assert int(lines[-1][1].replace(b",", b"")) > 0       # the child's samples so far


@pytest.mark.parametrize("argv,error_id", [
    (["record"], "record-nothing"),
    (["record", "--pid", "1", "--", "python"], "record-pid-and-command"),
    (["record", "--duration", "2", "--", "python"], "record-duration-without-pid"),
    (["record", "--", "no-such-command-xyz"], "command-not-found"),
    (["record", "-b", "sampler", "--", "true"], "command-not-python"),
    (["record", "-b", "py-spy", "--", "true"], "command-not-python"),
    (["record", "-b", "pyinstrument", "--", sys.executable, "-c", "pass"], "backend-cannot-run-command"),
    (["record", "--rate", "0", "--", sys.executable, "-c", "pass"], "bad-rate"),
    (["record", "--timing", "later", "--", sys.executable, "-c", "pass"], "unknown-timing"),
    (["record", "--mode", "cpu", "--timing", "timed", "-b", "py-spy", "--", sys.executable, "-c", "pass"],
     "timed-needs-wall"),
    (["record", "-o", "/tmp/x.svg", "--", sys.executable, "-c", "pass"], "unknown-output-format"),
    (["record", "-o", "/no/such/dir/p.json", "--", sys.executable, "-c", "pass"], "output-folder-missing"),
    (["record", "--bogus"], "cli-usage"),
    (["view"], "cli-usage"),
    (["view", "/no/such/file.json"], "cannot-read"),
    (["convert", EXAMPLE, "/tmp/out.svg"], "unknown-output-format"),
    (["convert", EXAMPLE, "/no/such/dir/out.folded"], "cannot-write"),
    (["convert", EXAMPLE, "out.json", "--to", "pdf"], "cli-usage"),
])
def test_cli_errors_are_one_line_exit_2_and_documented(argv, error_id):
    r = subprocess.run([BIN, *argv], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("profmagic: "), r.stderr
    documented(error_id, r.stderr)


def tricky_profile():
    """Two threads, frame names with markup and terminal control characters, wall and cpu."""
    from profmagic.model import StackBuilder
    b = StackBuilder()
    t1 = b.thread('Thread 7 "MainThread"', tid=7, pid=70, name="MainThread", python=True)
    t2 = b.thread('Thread 8 "w"', tid=8, pid=70, name="w", python=True)
    main = b.frame("main", "app.py", 1, "python")
    evil = b.frame("<script>alert(1)</script>\x1b[31m", "app.py", 5, "python")
    work = b.frame("work", "app.py", 9, "python")
    for i in range(10):
        b.add(b.stack(t1, (main, evil if i % 2 else work)), time=i * 0.01, wall=0.01, cpu=0.004 * (i % 2))
        b.add(b.stack(t2, (main, work)), time=i * 0.01, wall=0.01, cpu=0.01)
    return b.build(metric="wall", meta={"backend": "test", "rate": 100.0})


def test_view_writes_a_standalone_page_with_every_download(tmp_path):
    src = tmp_path / "t.speedscope.json"
    p = tricky_profile()
    profmagic.save(p, src)
    r = subprocess.run([BIN, "view", str(src)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    page = tmp_path / "t.html"
    assert r.stdout == f"{page}\n"
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    assert "<script" not in text and "http://" not in text.replace("http://www.w3.org", "")   # no script, no fetch
    assert html_mod.escape("<script>alert(1)</script>") in text
    links = dict(re.findall(r"download='([^']+)' href='data:[^;]+;base64,([^']+)'", text))
    names = sorted(links)
    assert [n.split(".", 1)[1] for n in names] == ["gecko.json", "raw.speedscope.json", "speedscope.json", "trace.json"]
    for name, b64 in links.items():
        q = profmagic.load(base64.b64decode(b64))
        assert q.sample_count == p.sample_count == 20, name
        assert q.total("wall") == pytest.approx(0.2) and q.total("cpu") == pytest.approx(p.total("cpu")), name
        assert sorted(q.threads) == sorted(p.threads), name
    out = tmp_path / "elsewhere.html"
    assert cli.main(["view", str(src), "-o", str(out)]) == 0 and out.read_text() == text


@pytest.mark.parametrize("to,fmt", [("speedscope", "speedscope"), ("folded", "folded"), ("gecko", "gecko"),
                                    ("chrome", "chrome_trace")])
def test_convert_to_every_format(tmp_path, to, fmt):
    src = tmp_path / "t.speedscope.json"
    p = tricky_profile()
    profmagic.save(p, src)
    out = tmp_path / "out.anything"
    assert cli.main(["convert", str(src), str(out), "--to", to]) == 0
    q = profmagic.load(out)
    assert q.meta["format"] == fmt
    assert q.total() == pytest.approx(p.total("wall"))   # folded: the wall seconds as its numbers
    if fmt != "folded":   # folded keeps one metric and no threads
        assert q.sample_count == p.sample_count and sorted(q.threads) == sorted(p.threads)
        assert q.total("cpu") == pytest.approx(p.total("cpu"))


@pytest.mark.timeout(300)
@pytest.mark.timed
def test_fresh_venv_record_and_view_from_a_shell(tmp_path):
    """The package as a wheel in a new venv, its commands run from a shell. The venv borrows this
    one's dependencies (a .pth line, and py-spy's binary linked beside its python): installing them
    from the index took 3 min here, the rest of this test takes seconds. Only profmagic is installed."""
    import shutil
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    src, wheels, venv = tmp_path / "src", tmp_path / "wheels", tmp_path / "venv"
    os.mkdir(src)   # a copy: building in the checkout would leave its build/ folder there
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(os.path.join(root, name), src)
    shutil.copytree(os.path.join(root, "profmagic"), src / "profmagic",
                    ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(src)],
                   check=True, timeout=240)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = next((venv / "lib").glob("python3*/site-packages"))
    import sysconfig
    (site / "borrowed-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    os.symlink(os.path.join(os.path.dirname(sys.executable), "py-spy"), venv / "bin" / "py-spy")
    (wheel,) = wheels.glob("profmagic-*.whl")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                    "--no-deps", "--ignore-installed", str(wheel)], check=True, timeout=240)
    script = tmp_path / "run.sh"
    script.write_text(
        "set -e\n"
        f"cd {tmp_path}\n"
        f"export PATH={venv / 'bin'}:/usr/bin:/bin\n"
        "profmagic record --mode wall -o run.speedscope.json -- python -c "
        "'import time\ndef spin(s):\n    t = time.perf_counter()\n    while time.perf_counter() - t < s: pass\n"
        "def idle(s):\n    time.sleep(s)\nspin(0.4)\nidle(0.4)\n'\n"
        "profmagic view run.speedscope.json\n")
    r = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=240, env={"HOME": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith(f"{tmp_path}/run.html"), r.stdout
    p = profmagic.load(tmp_path / "run.speedscope.json")
    assert p.meta["backend"] == "py-spy" and p.meta["timing"] == pyspy.TIMED
    assert str(venv) in " ".join(p.meta["command"]) or p.meta["command"][0] == "python"
    f = p.functions().set_index("name")
    assert f.at["spin", "total"] / p.total() == pytest.approx(0.5, abs=0.1)
    assert f.at["idle", "total"] / p.total() == pytest.approx(0.5, abs=0.1)
    page = (tmp_path / "run.html").read_text()
    assert ">spin<" in page and "profmagic-py-spy.gecko.json" in page and "profmagic-py-spy.trace.json" in page

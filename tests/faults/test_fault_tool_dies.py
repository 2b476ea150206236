"""Faults: the profiler dies or misbehaves while recording (issue 8). All produced for real."""
from __future__ import annotations

import os
import signal
import subprocess
import threading

import pytest
import tools
from conftest import PYSPY, descendants, documented, script, wait_for

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(120)]


@pytest.mark.requires("py-spy", "ptrace")
def test_pyspy_killed_mid_recording(clean, tmp_path):
    k = clean
    killed = []
    mark = str(tmp_path / "cell-started")

    def killer():
        # The cell runs only once py-spy has said it samples: the cell's first line marks that.
        if wait_for(lambda: os.path.exists(mark), timeout=120):
            pids = [p for p, n in descendants(k.pid) if n == "py-spy"]
            if pids:
                os.kill(pids[0], signal.SIGKILL)
                killed.append(pids[0])

    t = threading.Thread(target=killer)
    t.start()
    r = k.run(f"%%profile -b py-spy\nopen({mark!r}, 'w').close()\nbusy(1.5)\nprint('cell ran to its end')")
    t.join()
    assert killed, "py-spy was never seen running"
    assert r.error is None, r.error
    assert "cell ran to its end" in r.stdout
    documented("pyspy-killed", r.stderr)
    assert "SIGKILL" in r.stderr


@pytest.mark.requires("py-spy")
def test_pyspy_exits_early_wrong_pid(clean):
    k = clean
    r = k.run("import subprocess\n_gone = subprocess.Popen(['true']); _gone.wait()\n"
              "from profmagic.backends import pyspy\nfrom profmagic.backends.base import Options\n"
              "_rec = pyspy.Recorder(Options(pid=_gone.pid))\n"
              "try:\n    _rec.start()\nfinally:\n    _rec.close()")
    assert r.error is not None and r.error["ename"] == "ProfilerError", r.text()
    documented("pyspy-no-such-process", r.error["evalue"])


@pytest.mark.requires("py-spy", "ptrace", "prlimit")
def test_pyspy_output_truncated(clean, bindir, tmp_path):
    # Real truncation: py-spy runs under a 2000-byte file-size limit (prlimit), so its JSON is cut and
    # the kernel stops it with SIGXFSZ.
    wrapper = script(bindir, "py-spy-fsize", [f'exec prlimit --fsize=2000 -- {PYSPY} "$@"'])
    k = clean
    r = k.run(f"os.environ['PROFMAGIC_PYSPY'] = {wrapper!r}\n"
              "try:\n    get_ipython().run_cell_magic('profile', '-b py-spy -q', 'busy(0.5)')\n"
              "finally:\n    del os.environ['PROFMAGIC_PYSPY']")
    assert r.error is None, r.error
    documented("pyspy-killed", r.stderr)
    assert "SIGXFSZ" in r.stderr
    # The same truncation in a file handed to profmagic.load: a ProfileFormatError naming the offset.
    k.run("%profile -b py-spy -q busy(0.3)")
    cut = str(tmp_path / "cut.json")
    r = k.run(f"profmagic.save(_profile, {cut!r})\n_b = open({cut!r}, 'rb').read()\nopen({cut!r}, 'wb').write(_b[:len(_b) // 2])\n"
              f"profmagic.load({cut!r})")
    assert r.error is not None and r.error["ename"] == "ProfileFormatError", r.text()
    documented("format-error", r.error["evalue"])
    assert "cut.json" in r.error["evalue"] and "byte offset" in r.error["evalue"]


@pytest.mark.requires("py-spy", "ptrace", "root", "mount")
def test_disk_full_while_writing(clean, tmp_path):
    k = clean
    small = tmp_path / "small"
    small.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(small)], capture_output=True)
    if res.returncode != 0:
        tools.lacking(f"needs a tmpfs mount ({res.stderr.decode().strip()}); install: run as root with CAP_SYS_ADMIN")
    try:
        with open(small / "filler", "wb") as f:  # leave ~4 KB: py-spy's JSON does not fit
            f.write(b"\0" * 60 * 1024)
        r = k.run(f"import tempfile\ntempfile.tempdir = {str(small)!r}\n"
                  "try:\n    get_ipython().run_cell_magic('profile', '-b py-spy -q', 'busy(0.5)')\n"
                  f"finally:\n    tempfile.tempdir = {k.tmp!r}")
        assert r.error is None, r.error
        assert "No space left on device" in r.stderr, r.stderr
        documented("pyspy-write-failed", r.stderr)
        assert sorted(os.listdir(small)) == ["filler"], "the temp dir was left on the full disk"
    finally:
        subprocess.run(["umount", "-l", str(small)], check=False)

"""One recording engine (issue 26 item 1): the magic, attach() and `profmagic record` are configurations
of session.Session; they run the same declared processors (meta["processors"]) less the cell's own,
take their defaults from backends.base.defaults, and record's start-up hook leaves no frame."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import tools

import profmagic
from profmagic import backends, transforms
from profmagic.attaching import attach
from profmagic.backends import pyspy
from profmagic.backends.base import defaults
from profmagic.model import StackBuilder
from profmagic.session import make_options

BIN = tools.find("profmagic")
PACKAGE = os.path.dirname(os.path.abspath(profmagic.__file__)) + os.sep

# Spins 0.4 s in spin(), sleeps 0.2 s in nap(). Its own sitecustomize (on PYTHONPATH) spins 0.2 s in
# own_site(): the process's own start-up, which profmagic's hook runs after itself and which stays.
WORK = ("import time\n"
        "def spin(s):\n    t = time.perf_counter()\n    while time.perf_counter() - t < s: pass\n"
        "def nap(s):\n    time.sleep(s)\n"
        "spin(0.4)\nnap(0.2)\n")
OWN_SITE = ("import time\n"
            "def own_site(s):\n    t = time.perf_counter()\n    while time.perf_counter() - t < s: pass\n"
            "own_site(0.2)\n")

# The steps a cell has and nothing else has: its thread, its file, its awaits, the kernel's threads,
# and py-spy's calibration to the cell's measured clocks.
CELL_ONLY = ("only_users_threads", "live_thread_names", "attribute_awaits", "native_to_cell", "to_cell",
             "calibrate_to_cell")
COMMON = ("hide_profmagic", "clocks", "processes", "named_files")


def record(tmp_path, backend):
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(OWN_SITE)
    script, out = tmp_path / "work.py", tmp_path / f"{backend}.speedscope.json"
    script.write_text(WORK)
    env = {**os.environ, "PYTHONPATH": str(site)}
    r = subprocess.run([BIN, "record", "-b", backend, "-o", str(out), "--", sys.executable, str(script)],
                       capture_output=True, text=True, timeout=180, env=env, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    return profmagic.load(out)


def hook_or_ours(path: str) -> bool:
    base = os.path.basename(os.path.dirname(os.path.dirname(path)))
    return path.startswith(PACKAGE) or base.startswith(("profmagic-record-", "profmagic-children-"))


def total(p, name, metric="wall") -> float:
    names = p.frames["name"]
    hit = [any(names[f] == name for f in s) for s in p.stacks["stack"]]
    return float(p.stacks.loc[hit, metric].sum())


@pytest.mark.timed
@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["sampler", pytest.param("py-spy", marks=pytest.mark.requires("py-spy", "ptrace"))])
def test_record_leaves_no_frame_of_profmagic_or_its_hook(tmp_path, backend):
    """No frame of profmagic's package or of record's hook folders, in the stacks or the frame table;
    the command's own sitecustomize (run by the hook) and its script keep their time."""
    p = record(tmp_path, backend)
    files = [str(f) for f in p.frames["file"]]
    assert not [f for f in files if hook_or_ours(f)], files
    used = {f for s in p.stacks["stack"] for f in s}
    assert used == set(p.frames.index)
    assert tuple(p.meta["processors"]) == COMMON
    assert total(p, "spin") == pytest.approx(0.4, rel=0.25)
    assert total(p, "own_site") == pytest.approx(0.2, rel=0.35)
    assert str(tmp_path / "site" / "sitecustomize.py") in files
    # Under own_site, the frame that imported the hook (site's execsitecustomize), not the hook.
    names = p.frames["name"]
    for s in p.stacks["stack"]:
        chain = [names[f] for f in s]
        if "own_site" in chain:
            i = chain.index("own_site")
            assert chain[i - 1] == "<module>" and "frozen" not in str(p.frames["file"][s[i - 1]]), chain


def _frames_profile(stacks):
    """A profile of one thread whose stacks are (name, file) chains, one sample each."""
    b = StackBuilder()
    t = b.thread('Thread 5 "MainThread"', tid=5, pid=5, name="MainThread", python=True)
    for chain in stacks:
        b.add(b.stack(t, tuple(b.frame(n, f, 1, "python") for n, f in chain)), wall=0.01)
    return b.build(metric="wall")


def test_hide_profmagic_trims_a_start_up_hook_and_its_imports():
    hook = "/tmp/profmagic-record-1-x/hook/"
    site = [("<module>", "<frozen site>"), ("main", "<frozen site>"), ("execsitecustomize", "<frozen site>"),
            ("_find_and_load", "<frozen importlib._bootstrap>"), ("exec_module", "<frozen importlib._bootstrap_external>")]
    gate = site + [("<module>", hook + "sitecustomize.py"), ("gate_from_env", PACKAGE + "launch.py")]
    own = site + [("<module>", hook + "sitecustomize.py"), ("exec_module", "<frozen importlib._bootstrap_external>"),
                  ("<module>", "/home/u/site/sitecustomize.py"), ("own_site", "/home/u/site/sitecustomize.py")]
    work = [("<module>", "/home/u/work.py"), ("spin", "/home/u/work.py")]
    p = _frames_profile([gate, gate, own, work])
    cell = transforms.Cell(tid=5, thread_name="MainThread", hidden=("/tmp/profmagic-record-1-x/",))
    q = transforms.hide_profmagic(p, cell)
    names = q.frames["name"]
    chains = sorted(tuple(names[f] for f in s) for s in q.stacks["stack"])
    assert chains == [("<module>", "main", "execsitecustomize", "<module>", "own_site"), ("<module>", "spin")]
    assert q.meta["hook_samples_dropped"] == 2 and q.sample_count == 2
    assert sorted(set(q.frames["file"])) == ["/home/u/site/sitecustomize.py", "/home/u/work.py", "<frozen site>"]
    # Without a hook (the magic), the frame table is left as it was: only profmagic's frames fold.
    r = transforms.hide_profmagic(p, transforms.Cell(tid=5, thread_name="MainThread"))
    assert len(r.frames) == len(p.frames) and r.sample_count == 4


def test_defaults_are_decided_in_one_place_as_before():
    """The clock and timing each kind of recording took before issue 26 (attaching.py, cli.py and
    session.py each chose them): attach wall and timed (py-spy), perf's cpu; record both clocks; a
    cell both, its timing left to py-spy (calibrated up to 100 Hz)."""
    perf, sampler, memray = backends.get("perf"), backends.get("sampler"), backends.get("memray")

    def opts(**kw):
        return make_options(**{"mode": None, **kw})
    assert defaults(pyspy, "pids", opts()) == ("wall", "timed")
    assert defaults(pyspy, "pids", opts(mode="cpu")) == ("cpu", "calibrated")
    assert defaults(pyspy, "pids", opts(timing="calibrated")) == ("wall", "calibrated")
    assert defaults(perf, "pids", opts()) == ("cpu", "calibrated")
    assert defaults(pyspy, "command", opts(), auto=True) == ("both", "timed")
    assert defaults(sampler, "command", opts()) == ("both", "timed")
    assert defaults(perf, "command", opts()) == ("cpu", "calibrated")
    assert defaults(perf, "command", opts(), auto=True) == (("both", "timed") if perf.offcpu_available()[0]
                                                           else ("cpu", "calibrated"))
    assert defaults(pyspy, "cell", opts()) == ("both", None)
    assert defaults(pyspy, "cell", opts(gil=True)) == ("cpu", None)
    assert defaults(pyspy, "cell", opts(native=True)) == ("wall", None)
    assert defaults(perf, "cell", opts()) == ("cpu", None)
    assert defaults(memray, "cell", opts()) == (None, None)
    assert defaults(sampler, "cell", opts(mode="wall", timing="timed")) == ("wall", "timed")
    with pytest.raises(ValueError, match="unknown target 'file'"):
        defaults(pyspy, "file", opts())


TARGET = ("import sys, time\n"
          "def attached_spin(d):\n    t = time.perf_counter()\n    while time.perf_counter() - t < d: pass\n"
          "print('ready', flush=True)\nattached_spin(60)\n")


@pytest.mark.kernel
@pytest.mark.timed
@pytest.mark.timeout(600)
@pytest.mark.requires("py-spy", "ptrace")
def test_the_magic_attach_and_record_run_the_same_processors(tmp_path):
    """meta["processors"] is one list for %%profile, attach() and record, less exactly the cell's own
    steps; attach and record keep their default clock and timing (wall/both, timed)."""
    from kernel import Kernel
    k = Kernel()
    try:
        r = k.run("%load_ext profmagic\n")
        assert r.status == "ok", r.text()
        r = k.run("%%profile -b py-spy -q\nimport time\nt = time.perf_counter()\n"
                  "while time.perf_counter() - t < 0.3: pass\n")
        assert r.status == "ok", r.text()
        cell = tuple(k.value("_profile.meta['processors']"))
    finally:
        k.close()
    proc = subprocess.Popen([sys.executable, "-c", TARGET], stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"ready\n"
        attached = attach([proc.pid], 0.5)
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    recorded = record(tmp_path, "py-spy")
    assert cell == ("only_users_threads", "live_thread_names", "attribute_awaits", "native_to_cell", "to_cell",
                    "hide_profmagic", "clocks", "calibrate_to_cell", "processes", "named_files")
    assert tuple(attached.meta["processors"]) == tuple(recorded.meta["processors"]) == COMMON
    assert tuple(s for s in cell if s not in CELL_ONLY) == COMMON
    assert set(cell) - set(COMMON) == set(CELL_ONLY)
    assert (attached.meta["mode"], attached.meta["timing"]) == ("wall", pyspy.TIMED)
    assert (recorded.meta["mode"], recorded.meta["timing"]) == ("both", pyspy.TIMED)
    assert attached.functions().set_index("name").at["attached_spin", "total"] / attached.total() > 0.9
    (lab,) = attached.meta["processes"]
    assert attached.meta["processes"][lab]["ended"] is False

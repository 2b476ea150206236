"""A recording's temp dirs (tempdirs.Scope): every folder made while a recording runs goes when it ends,
even one whose maker a Ctrl-C stopped before it held it; one recording never removes another's; and
what a recording read from its folders (the profile, the raw-capture download) outlives them."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import threading

import pytest
from workloads import busy

import profmagic
from profmagic import childsampler, downloads, session, tempdirs
from profmagic.attaching import attach
from profmagic.backends import eustack, memray, pyspy
from profmagic.formats import memray as memray_format

pytestmark = pytest.mark.timeout(120)

OURS = re.compile(rf"^profmagic-(?:[a-z]+-)?{os.getpid()}-")


def ours() -> set[str]:
    """This process's profmagic folders in the temp folder."""
    where = tempfile.gettempdir()
    return {os.path.join(where, n) for n in os.listdir(where) if OURS.match(n)}


def alloc():
    return [bytearray(1000) for _ in range(20000)]


# -- Ctrl-C as a recorder's folder is made ---------------------------------------------------------
class CutShort(tempdirs.TempDir):
    """A fake, only to inject a fault: Ctrl-C right after the folder named ``prefix`` is made, before
    whoever made it holds it. A real SIGINT cannot be aimed there reliably: the window is the few
    bytecodes between the constructor's return and the assignment (microseconds), once per recording."""
    prefix = ""
    made: list[str] = []

    def __init__(self, prefix: str = "profmagic-"):
        super().__init__(prefix)
        if prefix == CutShort.prefix and not CutShort.made:
            CutShort.made.append(self.path)
            raise KeyboardInterrupt


@pytest.fixture
def cut_short(monkeypatch):
    """Every maker of a TempDir gets CutShort (the modules that import the name, and those that import
    it when they start)."""
    CutShort.made = []
    for mod in (tempdirs, childsampler, eustack, memray, pyspy):
        if hasattr(mod, "TempDir"):
            monkeypatch.setattr(mod, "TempDir", CutShort)
    return CutShort


def sleeper():
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def record_cell(backend, **options):
    ran = []
    session.run(backend, session.make_options(**options), lambda: ran.append(1))
    assert not ran   # the interrupt came before the code


def attach_eustack():
    p = sleeper()
    try:
        attach([p.pid], 1.0, backend="eu-stack")
    finally:
        p.kill()
        p.wait()


def record_command():
    # as `profmagic record -- cmd` runs it (cli.record_command)
    s = session.Session("sampler", session.make_options(), target=session.CommandTarget([sys.executable, "-c", "0"]))
    try:
        s.start()
    finally:
        s.close()


CASES = [
    # a cell's children's folder, made in Children.start (the Session holds Children, not its folder)
    pytest.param("profmagic-children-", lambda: record_cell("sampler", subprocesses=True), id="sampler-subprocesses"),
    # memray's folder, made in Recorder.start
    pytest.param("profmagic-memray-", lambda: record_cell("memray"), id="memray",
                 marks=pytest.mark.requires("memray")),
    # py-spy's folder, made in Recorder.start (wrapped in interrupts.deferred() before there was a Scope)
    pytest.param("profmagic-", lambda: record_cell("py-spy", mode="wall"), id="py-spy",
                 marks=pytest.mark.requires("py-spy")),
    # eu-stack's folder, made in its constructor: the Session never holds that recorder
    pytest.param("profmagic-eustack-", attach_eustack, id="attach-eu-stack", marks=pytest.mark.requires("eu-stack")),
    # `profmagic record -- cmd`'s own folder (session.CommandTarget.start)
    pytest.param("profmagic-record-", record_command, id="record-command"),
]


@pytest.mark.parametrize("prefix, record", CASES)
def test_ctrl_c_as_a_folder_is_made_leaves_nothing(cut_short, prefix, record):
    """A real recording through the Session, interrupted right after a recorder's folder exists and
    before the Session holds it (the interrupt's timing is injected: see CutShort): the recording's
    scope removes the folder, and no folder of this process is left."""
    before = ours()
    cut_short.prefix = prefix
    with pytest.raises(KeyboardInterrupt):
        record()
    assert len(cut_short.made) == 1 and os.path.basename(cut_short.made[0]).startswith(f"{prefix}{os.getpid()}-")
    assert not os.path.exists(cut_short.made[0])
    assert ours() - before == set()


class MkdirThenInterrupt:
    """A fake os, only to inject a fault: Ctrl-C as soon as mkdir has made the folder, inside the
    TempDir constructor (where mkdtemp would not yet have returned its name). A real SIGINT cannot be
    aimed at that one system call."""

    def __init__(self):
        self.made = []

    def __getattr__(self, name):
        return getattr(os, name)

    def mkdir(self, path, mode=0o777):
        os.mkdir(path, mode)
        self.made.append(path)
        raise KeyboardInterrupt


def test_ctrl_c_inside_the_constructor(monkeypatch):
    """Interrupted between making the folder and returning: the scope knew the path first."""
    fake = MkdirThenInterrupt()
    with tempdirs.Scope() as scope:
        monkeypatch.setattr(tempdirs, "os", fake)
        with pytest.raises(KeyboardInterrupt):
            tempdirs.TempDir("profmagic-test-")
        monkeypatch.undo()
        (path,) = fake.made
        assert os.path.isdir(path) and [d.path for d in scope.held] == [path]
    assert not os.path.exists(path)


# -- one recording's scope, not another's -----------------------------------------------------------
def test_two_scopes_in_two_threads_keep_to_their_own():
    """Scopes in two threads, and a folder made in a third with none (as the live view's or a cluster
    agent's thread has none): each scope's close() removes its own folders only, and the one made
    after the other closed is still its own."""
    got: dict[str, list] = {}
    a_made, b_closed, a_more = threading.Event(), threading.Event(), threading.Event()

    def a():
        with tempdirs.Scope() as scope:
            got["a"] = [tempdirs.TempDir("profmagic-test-")]
            a_made.set()
            b_closed.wait(30)
            got["a"].append(tempdirs.TempDir("profmagic-test-"))   # after b's scope closed
            got["a held"] = list(scope.held)
            a_more.set()

    def b():
        a_made.wait(30)
        with tempdirs.Scope() as scope:
            got["b"] = [tempdirs.TempDir("profmagic-test-")]
            got["b held"] = list(scope.held)
        got["a paths"] = [d.path for d in got["a"]]
        got["a alive after b"] = [os.path.isdir(p) for p in got["a paths"]]
        b_closed.set()

    alone = []
    t = threading.Thread(target=lambda: alone.append(tempdirs.TempDir("profmagic-test-")))
    ta, tb = threading.Thread(target=a), threading.Thread(target=b)
    for x in (t, ta, tb):
        x.start()
    for x in (t, ta, tb):
        x.join(60)
    try:
        assert got["a alive after b"] == [True] and got["b"][0].path is None
        assert got["a held"] == got["a"] and got["b held"] == got["b"]
        assert all(d.path is None for d in got["a"]) and not any(os.path.exists(p) for p in got["a paths"])
        assert os.path.isdir(alone[0].path)   # no scope was open in its thread: its maker removes it
    finally:
        alone[0].close()


def test_nested_scopes():
    """A recording inside a recording: the inner scope holds its own folders, closes them only, and
    gives the outer one back."""
    with tempdirs.Scope() as outer:
        first = tempdirs.TempDir("profmagic-test-")
        with tempdirs.Scope() as inner:
            second = tempdirs.TempDir("profmagic-test-")
        assert second.path is None and os.path.isdir(first.path)
        third = tempdirs.TempDir("profmagic-test-")
        assert outer.held == [first, third] and inner.held == []
    assert first.path is third.path is None


@pytest.mark.requires("py-spy", "ptrace")
def test_a_recording_in_another_thread_leaves_this_scope_alone():
    """A real py-spy recording in another thread, while a scope here is open: the recording's folder
    is its own (not in this scope) and goes when it ends; this scope's folder stays until it closes."""
    before = ours()
    seen = []
    with tempdirs.Scope() as mine:
        here = tempdirs.TempDir("profmagic-test-")

        def recording():
            try:
                p = session.record("py-spy", session.make_options(mode="wall"),
                                   lambda: (seen.append(ours() - before), busy(0.3)))
            except BaseException as e:  # noqa: BLE001 - shown by the assertion below
                p = e
            seen.append(p)

        t = threading.Thread(target=recording)
        t.start()
        t.join(60)
        assert len(seen) == 2, seen
        folders, p = seen
        assert here.path in folders and len(folders) == 2   # this scope's and py-spy's
        assert p.sample_count > 0 and bool((p.frames["name"] == "busy").any())
        assert mine.held == [here] and os.path.isdir(here.path)
        assert ours() - before == {here.path}
    assert ours() - before == set()


# -- a recording that ends normally --------------------------------------------------------------------
@pytest.mark.requires("memray")
def test_recording_reads_its_capture_and_leaves_nothing():
    """memray's capture is a file in its folder, read after the stop: the profile holds what the code
    allocated, the folder was there while it ran, and nothing is left."""
    before = ours()
    during = []
    p = session.record("memray", session.make_options(), lambda: (during.append(ours() - before), alloc()))
    assert [os.path.basename(f).startswith(f"profmagic-memray-{os.getpid()}-") for f in during[0]] == [True]
    assert "bytes" in p.metrics
    f = p.functions().set_index("name")
    assert f.at["alloc", "total"] >= 20000 * 1000
    assert ours() - before == set()


@pytest.mark.requires("memray")
def test_raw_download_after_the_folder_is_gone():
    """No recorder's folder outlives its recording (every Raw keeps its bytes): the raw capture is
    still offered for download, and loads back to the same profile."""
    before = ours()
    with profmagic.profile("memray", announce=lambda text: None) as rec:
        alloc()
    assert ours() - before == set()
    raw = downloads.files(rec.profile)[-1]
    assert raw.kind == "raw" and raw.note == "" and raw.path is None
    assert raw.data == rec.profile.raw.data and memray_format.sniff(raw.data[:64])
    again = profmagic.load(rec.profile.raw)
    assert again.functions().set_index("name").at["alloc", "total"] >= 20000 * 1000

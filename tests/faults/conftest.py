"""Shared fixtures of the fault suite (issue 8): one real kernel per module, and after every test the
checks every fault must pass: no profiler child left, no temp file left, the kernel answers.

The user-facing messages are asserted against docs/errors.md (``documented(id, text)``), so that the
page and what is actually printed cannot drift apart.
"""
from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile

import pytest
import tools
import workloads
from procs import descendants, wait_for  # noqa: F401  (the fault tests import them from here)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ERRORS_MD = os.path.join(ROOT, "docs", "errors.md")
PYSPY = tools.find("py-spy")  # next to the interpreter, then on PATH
PROFILERS = ("py-spy", "perf", "eu-stack", "stap", "staprun", "setpriv", "prlimit")
# Files the profilers may leave in the system temp dir.
TMP_PATTERNS = re.compile(r"^(profmagic-.*|py-spy.*|perf-\d+\.map|perf\.data.*|jit-\d+\.dump|jitted-\d+-\d+\.so)$")

SETUP = '''
%load_ext profmagic
import time, os, sys, threading, asyncio
import profmagic
''' + workloads.SOURCE


# -- docs/errors.md ------------------------------------------------------------------------------
def error_patterns() -> dict[str, re.Pattern]:
    """``### <id>`` sections of docs/errors.md -> the regex of their first ```text block (… = anything)."""
    with open(ERRORS_MD, encoding="utf-8") as f:
        text = f.read()
    out = {}
    for m in re.finditer(r"^### `([\w-]+)`[^\n]*\n```text\n(.*?)\n```", text, re.S | re.M):
        parts = [re.escape(p) for p in m.group(2).split("…")]
        out[m.group(1)] = re.compile(".*?".join(parts), re.S)
    return out


def documented(error_id: str, text: str) -> None:
    """The output contains the message docs/errors.md gives for ``error_id``."""
    pats = error_patterns()
    assert error_id in pats, f"docs/errors.md has no section ### `{error_id}`"
    assert pats[error_id].search(text), (f"the printed message does not match docs/errors.md `{error_id}`:\n"
                                         f"printed: {text!r}\ndocumented: {pats[error_id].pattern!r}")


# -- processes and files -------------------------------------------------------------------------
def profiler_children(pid: int) -> list[tuple[int, str]]:
    """Live descendants of ``pid`` (the kernel): a profiler or a zombie left unreaped."""
    return [(p, n) for p, n in descendants(pid) if n in PROFILERS or n == "<zombie>"]


def tmp_entries(k) -> set[str]:
    """Profiler files in the kernel's TMPDIR, and those in /tmp named after the kernel's pid (perf and
    CPython's perf support write there whatever TMPDIR says; other tests on the machine write there too)."""
    out = {os.path.join(k.tmp, n) for n in os.listdir(k.tmp) if TMP_PATTERNS.match(n)}
    pid = re.compile(rf"\D{k.pid}(\D|$)")
    return out | {os.path.join("/tmp", n) for n in os.listdir("/tmp") if TMP_PATTERNS.match(n) and pid.search(n)}


# -- the kernel ----------------------------------------------------------------------------------
def start_kernel(python: str | None = None):
    from kernel import Kernel
    tmp = tempfile.mkdtemp(prefix="faults-tmp-")
    os.chmod(tmp, 0o1777)
    kw = {"extra_env": {"TMPDIR": tmp, "PYDEVD_DISABLE_FILE_VALIDATION": "1"}}
    if python:
        kw["python"] = python
    k = Kernel(**kw)
    k.tmp = tmp
    r = k.run(SETUP)
    assert r.status == "ok" and r.error is None, r.text() + str(r.error)
    return k


def stop_kernel(k) -> None:
    k.close()
    shutil.rmtree(k.tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def k():
    kern = start_kernel()
    yield kern
    stop_kernel(kern)


@pytest.fixture
def clean(k):
    """After the test: no profiler child, no temp file, and the kernel answers the next cell."""
    before = tmp_entries(k)
    yield k
    assert_clean(k, before)


def assert_clean(k, before: set[str]) -> None:
    left = wait_for(lambda: not profiler_children(k.pid), timeout=10) or profiler_children(k.pid)
    assert left is True or left == [], f"profiler processes left under the kernel: {left}"
    new = tmp_entries(k) - before
    assert new == set(), f"temp files left behind: {sorted(new)}"
    r = k.run("print(6 * 7)")
    assert r.error is None and r.stdout.strip() == "42", f"the kernel did not answer the next cell: {r.text()}"


@pytest.fixture
def bindir(tmp_path):
    """A folder for helper executables (made readable to the unprivileged users they switch to)."""
    os.chmod(tmp_path, 0o755)
    return tmp_path


def script(folder, name: str, lines: list[str]) -> str:
    """An executable /bin/sh script ``name`` in ``folder``; returns its path."""
    path = os.path.join(str(folder), name)
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + "\n".join(lines) + "\n")
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH | stat.S_IRGRP | stat.S_IROTH)
    return path

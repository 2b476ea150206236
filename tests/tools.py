"""What a test needs from the machine, where to find it, and the line that installs it.

Tools are found next to the running interpreter (the venv's bin/), then on PATH; nothing is looked
for at a fixed path. ``@pytest.mark.requires("eu-stack", "ptrace")`` (tests/conftest.py) checks the
names below before the test runs. When one is missing, the test fails under CI (``CI=true`` or
``PROFMAGIC_REQUIRE_TOOLS=1``) and is skipped elsewhere, with the same message either way.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys


def find(name: str) -> str | None:
    """``name`` next to ``sys.executable``, else on PATH, else None. A pyenv shim that would not run
    (its version is installed but not selected, as python3.13 beside a global 3.11) is resolved to
    the installed version's binary through ``pyenv whence`` and ``pyenv prefix``."""
    here = os.path.join(os.path.dirname(sys.executable), name)
    if os.path.isfile(here) and os.access(here, os.X_OK):
        return here
    found = shutil.which(name)
    if found and os.path.basename(os.path.dirname(found)) == "shims" and shutil.which("pyenv"):
        return _pyenv(name, found)
    return found


def _pyenv(name: str, shim: str) -> str | None:
    def ask(*args):
        r = subprocess.run(["pyenv", *args], capture_output=True, text=True, timeout=30)
        return r.stdout.split() if r.returncode == 0 else []
    if ask("which", name):
        return shim
    for version in reversed(ask("whence", name)):
        prefix = ask("prefix", version)
        path = os.path.join(prefix[0], "bin", name) if prefix else ""
        if os.access(path, os.X_OK):
            return path
    return None


def strict() -> bool:
    """A missing requirement fails the test (CI) instead of skipping it."""
    return (os.environ.get("CI", "").lower() in ("1", "true", "yes")
            or os.environ.get("PROFMAGIC_REQUIRE_TOOLS", "") not in ("", "0"))


def _tools(*names: str):
    def check():
        gone = [n for n in names if find(n) is None]
        return f"{' and '.join(gone)} not found next to {sys.executable} nor on PATH" if gone else None
    return check


def _root():
    return None if os.geteuid() == 0 else "not running as root"


def _ptrace():
    from profmagic.backends.base import ptrace_scope
    scope = ptrace_scope()
    if scope == 3:
        return "Yama ptrace_scope is 3: ptrace is disabled until reboot"
    if scope == 2 and os.geteuid() != 0:
        return "Yama ptrace_scope is 2 and not root: attaching needs CAP_SYS_PTRACE"
    return None


def _perf_event():
    from profmagic.backends import perf
    ok, why = perf.available()
    return None if ok else why


def _file(path: str):
    def check():
        return None if os.path.exists(path) else f"{path} does not exist"
    return check


def _python_module(module: str):
    def check():
        import importlib.util
        return None if importlib.util.find_spec(module) else f"the Python module {module} is not installed"
    return check


# name -> (check: () -> None or why it is missing, the line that installs or allows it)
REQUIREMENTS = {
    "py-spy": (_tools("py-spy"), "pip install py-spy"),
    "eu-stack": (_tools("eu-stack", "eu-addr2line"), "apt-get install elfutils"),
    "perf": (_tools("perf"), "apt-get install linux-perf"),
    "stap": (_tools("stap"), "apt-get install systemtap"),
    "gcc": (_tools("gcc"), "apt-get install gcc"),
    "g++": (_tools("g++"), "apt-get install g++"),
    "nm": (_tools("nm"), "apt-get install binutils"),
    "gcore": (_tools("gcore"), "apt-get install gdb"),
    "kernel312": (_file(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".venv312", "bin",
                                     "python")), "make setup (it builds .venv312 when python3.12 is installed)"),
    "chromium": (_tools("chromium"), "apt-get install chromium"),
    "setpriv": (_tools("setpriv"), "apt-get install util-linux"),
    "prlimit": (_tools("prlimit"), "apt-get install util-linux"),
    "unshare": (_tools("unshare"), "apt-get install util-linux"),
    "mount": (_tools("mount", "umount"), "apt-get install mount"),
    "python3.11": (_tools("python3.11"), "put a CPython 3.11 on PATH as python3.11"),
    "python3.12": (_tools("python3.12"), "put a CPython 3.12 on PATH as python3.12 (pyenv install 3.12)"),
    "python3.13": (_tools("python3.13"), "put a CPython 3.13 on PATH as python3.13 (pyenv install 3.13)"),
    "playwright": (_python_module("playwright"), "pip install -e '.[dev]'"),
    "npm": (_tools("npm"), "apt-get install nodejs npm"),
    "memray": (_python_module("memray"), "pip install -e '.[memory]'"),
    "dask": (_python_module("distributed"), "pip install -e '.[cluster]'"),
    "ray": (_python_module("ray"), "pip install -e '.[cluster]'"),
    "jupyter-lab": (_tools("jupyter-lab"), "pip install -e '.[dev]'"),
    "jupyter-notebook": (_tools("jupyter-notebook"), "pip install -e '.[dev]'"),
    "root": (_root, "run the tests as root (sudo make test)"),
    "ptrace": (_ptrace, "`sudo sysctl kernel.yama.ptrace_scope=1`, or run as root; in Docker add --cap-add SYS_PTRACE"),
    "perf_event": (_perf_event, "`sudo sysctl kernel.perf_event_paranoid=1`, or run as root; "
                                "in Docker add --cap-add PERFMON"),
}


def lacking(message: str) -> None:
    """The one policy for a requirement found missing: fail under CI, skip elsewhere, same message."""
    import pytest
    if strict():
        pytest.fail(message + " (under CI a missing tool or privilege fails)", pytrace=False)
    pytest.skip(message)


def missing(names) -> list[str]:
    """One message per requirement in ``names`` that this machine lacks: what, why, and the fix."""
    out = []
    for name in names:
        if name not in REQUIREMENTS:
            raise KeyError(f"requires({name!r}): unknown; known: {', '.join(sorted(REQUIREMENTS))}")
        check, fix = REQUIREMENTS[name]
        why = check()
        if why:
            out.append(f"needs {name} ({why}); install: {fix}")
    return out


def record_for(recorder, seconds: float):
    """Start ``recorder``, let it record ``seconds``, stop it and return its capture; closed either way."""
    import time
    try:
        recorder.start()
        time.sleep(seconds)
        return recorder.stop()
    finally:
        recorder.close()

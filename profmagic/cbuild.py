"""C extensions and C++ libraries compiled at first use with the system compiler, cached per
source, flags, compiler (and Python, for extensions).

The cache is ``$PROFMAGIC_CACHE`` or ``~/.cache/profmagic``, one folder per use; a build's name carries
a hash of its source, flags, compiler and Python, so a change rebuilds and builds never mix. Files are
written under a temporary name and renamed into place (concurrent builders never load half a file).
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

CFLAGS = ["-O2", "-g", "-fPIC", "-shared", "-fno-strict-aliasing", "-fvisibility=hidden"]


class BuildError(RuntimeError):
    """The compiler is missing or failed: the message says which and how to fix it."""


def _private(path: Path) -> bool:
    """Owned by this user and writable by no one else (a loaded library runs as this user's code)."""
    st = os.stat(path)
    return st.st_uid == os.getuid() and not st.st_mode & 0o022


def cache_dir(use: str) -> Path:
    base = os.environ.get("PROFMAGIC_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "profmagic")
    d = Path(base) / use
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not _private(d):
        raise BuildError(f"the build cache {d} is not private (another user owns it or may write to it): "
                         "set $PROFMAGIC_CACHE to a folder of your own")
    return d


def compiler(cxx: bool = False) -> str:
    """The C (or C++) compiler: $CC ($CXX), else gcc/cc (g++/c++)."""
    env, names, what = ("CXX", ("g++", "c++"), "a C++ compiler: install g++") if cxx else \
        ("CC", ("gcc", "cc"), "a C compiler: install gcc")
    found = os.environ.get(env) or shutil.which(names[0]) or shutil.which(names[1])
    if not found:
        raise BuildError(f"compiling profmagic's {'C++ library' if cxx else 'C extension'} needs {what} "
                         f"(apt-get install build-essential) or set ${env}")
    return found


def python_headers() -> str:
    inc = sysconfig.get_paths()["include"]
    if not os.path.exists(os.path.join(inc, "Python.h")):
        raise BuildError(f"compiling profmagic's C extension needs Python's headers, not found in {inc}: "
                         f"install them (apt-get install python{sys.version_info[0]}.{sys.version_info[1]}-dev)")
    return inc


def build_module(name: str, source: Path, use: str, extra: list[str] | None = None) -> Path:
    """Compile ``source`` into an extension module ``name`` importable by this Python; its path."""
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    return build(name, source, use, [*CFLAGS, "-I", python_headers(), *(extra or [])], suffix,
                 (sys.version + suffix).encode(), libs=["-lm"])


def build(name: str, source: Path, use: str, flags: list[str], suffix: str = ".so", salt: bytes = b"",
          cxx: bool = False, libs: list[str] | None = None, force: bool = False) -> Path:
    """Compile ``source`` with ``flags`` into ``<cache>/<use>/<name>-<key><suffix>``; its path."""
    cc = compiler(cxx)
    version = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout
    key = hashlib.sha256(source.read_bytes() + " ".join(flags).encode() + version.encode()
                         + salt).hexdigest()[:16]
    out = cache_dir(use) / f"{name}-{key}{suffix}"
    if out.exists() and not force:
        if not _private(out):
            raise BuildError(f"{out} is not private (another user owns it or may write to it): remove it")
        return out
    fd, tmp = tempfile.mkstemp(suffix=suffix, dir=out.parent)
    os.close(fd)
    try:
        r = subprocess.run([cc, *flags, "-o", tmp, str(source), *(libs or [])], capture_output=True, text=True)
        if r.returncode != 0:
            raise BuildError(f"compiling {source} failed:\n{r.stderr[-4000:]}")
        os.chmod(tmp, 0o755)   # whatever the umask: writable by this user only (``_private``)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


def load_module(name: str, path: Path):
    """Import the extension module ``name`` from ``path`` (once per process: later calls get it again)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, str(path))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sys.modules[name] = mod
    return mod

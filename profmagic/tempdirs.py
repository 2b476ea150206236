"""Private temporary directories for recorders, removed when closed; and the ones a dead process
left behind (a kernel killed mid-recording), removed at the next start."""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from typing import Callable

# profmagic-<pid>-..., profmagic-children-<pid>-...: the pid of the process that made it.
_OURS = re.compile(r"^profmagic-(?:[a-z]+-)?(\d+)-")


class TempDir:
    """A private temp directory that is removed on close(), whatever it holds. Its name carries the
    owner's pid, so that a later process can tell it was left behind."""

    def __init__(self, prefix: str = "profmagic-"):
        self.path = tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-")

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def close(self) -> None:
        if self.path and os.path.exists(self.path):
            shutil.rmtree(self.path, ignore_errors=True)
        self.path = None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # someone else's process: alive
        return True
    return True


def _remove_ours(where: str | None, dead: Callable[[int], bool]) -> list[str]:
    """Remove this user's temp dirs in ``where`` whose owning pid ``dead(pid)`` says go; their paths."""
    where = where or tempfile.gettempdir()
    removed = []
    try:
        entries = os.scandir(where)
    except OSError:
        return removed
    with entries:
        for e in entries:
            m = _OURS.match(e.name)
            if not m or not e.is_dir(follow_symlinks=False):
                continue
            try:
                if e.stat(follow_symlinks=False).st_uid != os.getuid() or not dead(int(m.group(1))):
                    continue
            except OSError:
                continue
            shutil.rmtree(e.path, ignore_errors=True)
            removed.append(e.path)
    return removed


def sweep(where: str | None = None) -> list[str]:
    """Remove the temp dirs that processes now gone left behind (this user's only); their paths."""
    return _remove_ours(where, lambda pid: not _alive(pid))


def remove_own(where: str | None = None) -> list[str]:
    """Remove every temp dir this process made (its pid in the name), whatever still holds it: for
    a command that ends abruptly (``profmagic record`` interrupted while it made one)."""
    return _remove_ours(where, lambda pid: pid == os.getpid())

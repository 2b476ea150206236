"""Private temporary directories for recorders, removed when closed; the ones a recording made,
removed when it ends (``Scope``); and the ones a dead process left behind (a kernel killed
mid-recording), removed at the next start."""
from __future__ import annotations

import itertools
import os
import re
import secrets
import shutil
import tempfile
from contextvars import ContextVar
from typing import Callable

# profmagic-<pid>-..., profmagic-children-<pid>-...: the pid of the process that made it.
_OURS = re.compile(r"^profmagic-(?:[a-z]+-)?(\d+)-")
_serial = itertools.count()


class Scope:
    """One recording's temp dirs: every TempDir made while it is open, in this thread or context
    (a contextvar: another thread's recording has its own), is closed by ``close()``, whether or not
    whoever made it got to hold it (a Ctrl-C as the constructor returned). Scopes nest; each closes
    only its own. ``close()`` is idempotent and may run in another context than ``open()``."""

    def __init__(self):
        self.held: list[TempDir] = []
        self.outer: Scope | None = None
        self.closed = False

    def open(self) -> Scope:
        self.outer = _current.get()
        _current.set(self)
        return self

    def close(self) -> None:
        self.closed = True
        if _current.get() is self:
            _current.set(self.outer)
        for d in self.held:   # interrupted, a second close() finishes: TempDir.close is idempotent
            d.close()
        self.held.clear()

    def __enter__(self) -> Scope:
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()


_current: ContextVar[Scope | None] = ContextVar("profmagic_tempdir_scope", default=None)


def _open_scope() -> Scope | None:
    """The innermost open scope of this context (one closed from another context is passed over)."""
    s = _current.get()
    while s is not None and s.closed:
        s = s.outer
    return s


class TempDir:
    """A private temp directory that is removed on close(), whatever it holds. Its name carries the
    owner's pid, so that a later process can tell it was left behind. It joins the open ``Scope``
    and learns its path before the folder exists, so a Ctrl-C at any point of the constructor
    leaves nothing that the scope's close() does not remove (no signal handling needed)."""

    def __init__(self, prefix: str = "profmagic-"):
        self.path: str | None = None
        scope = _open_scope()
        if scope is not None:
            scope.held.append(self)
        where = tempfile.gettempdir()
        while True:   # as mkdtemp (mode 0o700, a random name), with the path set first
            # The serial keeps this process's names apart, so a name that exists is no live folder's
            # (a dead process's with this pid): a Ctrl-C before the retry removes nothing in use.
            self.path = os.path.join(where, f"{prefix}{os.getpid()}-{next(_serial)}-{secrets.token_hex(4)}")
            try:
                os.mkdir(self.path, 0o700)
                return
            except FileExistsError:
                continue

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

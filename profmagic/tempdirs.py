"""Private temporary directories for recorders, removed when closed."""
from __future__ import annotations

import os
import shutil
import tempfile


class TempDir:
    """A private temp directory that is removed on close(), whatever it holds."""

    def __init__(self, prefix: str = "profmagic-"):
        self.path = tempfile.mkdtemp(prefix=prefix)

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def close(self) -> None:
        if self.path and os.path.exists(self.path):
            shutil.rmtree(self.path, ignore_errors=True)
        self.path = None

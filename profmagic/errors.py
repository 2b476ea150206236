"""Errors the user sees. Each says where and what was expected."""
from __future__ import annotations


class ProfileFormatError(ValueError):
    """Input that a reader cannot accept.

    The message names the source (file name or "<bytes>"), the place (line, byte
    offset, or a JSON path such as ``profiles[2].samples[17]``) and what was expected.
    """

    def __init__(self, message: str, *, source: str | None = None, line: int | None = None,
                 offset: int | None = None, where: str | None = None):
        self.reason = message
        self.source = source or "<input>"
        self.line = line
        self.offset = offset
        self.where = where
        place = []
        if line is not None:
            place.append(f"line {line}")
        if offset is not None:
            place.append(f"byte offset {offset}")
        if where is not None:
            place.append(where)
        loc = ", ".join(place)
        super().__init__(f"{self.source}: {loc + ': ' if loc else ''}{message}")


class ProfilerError(RuntimeError):
    """A profiler could not record. The message gives the cause, the fix and an alternative."""

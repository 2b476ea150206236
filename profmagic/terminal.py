"""Untrusted text on a terminal: frame names, paths and commands with their control characters
shown as escapes, so a name cannot move the cursor, recolour or retitle the terminal."""
from __future__ import annotations


def escape(text) -> str:
    """``text`` with every non-printable character (ESC, CR, newline, bidi controls...) as its
    backslash escape; printable text, spaces included, unchanged."""
    s = str(text)
    if s.isprintable():
        return s
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in s)

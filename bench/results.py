"""bench/RESULTS.md: each benchmark owns one "## " section and rewrites only that one."""
from __future__ import annotations

import os

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS.md")


def write_section(text: str, path: str = RESULTS) -> None:
    """Replace the section whose heading is ``text``'s first line (or add it at the end)."""
    heading = text.lstrip("\n").splitlines()[0]
    with open(path, encoding="utf-8") as f:
        old = f.read()
    start = old.find(heading + "\n")
    body = text.strip("\n") + "\n"
    if start < 0:
        new = old.rstrip("\n") + "\n\n" + body
    else:
        end = old.find("\n## ", start + len(heading))
        new = old[:start] + body + (old[end:] if end >= 0 else "")
    with open(path, "w", encoding="utf-8") as f:
        f.write(new)

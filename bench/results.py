"""bench/RESULTS.md: each benchmark owns one "## " section and rewrites only that one, through
``write_section``. Every bench goes through here.

Inside a section, a "### " subsection whose heading the new text does not have is a hand-written
note (a reading of the figures, findings): it is kept, placed before the new text's first "### "
(or at its end). The bench's own "### " subsections are replaced like the rest.

``$PROFMAGIC_BENCH_RESULTS`` names another file to write (``run_all.py --quick`` writes a scratch
copy, so quick figures never replace measured ones).
"""
from __future__ import annotations

import os

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS.md")


def results_path() -> str:
    return os.environ.get("PROFMAGIC_BENCH_RESULTS") or RESULTS


def _subsections(lines: list[str]) -> list[tuple[str, list[str]]]:
    """("### heading", its lines) for each ### subsection in ``lines``."""
    out = []
    for ln in lines:
        if ln.startswith("### "):
            out.append((ln.rstrip(), [ln]))
        elif out:
            out[-1][1].append(ln)
    return out


def write_section(text: str, path: str | None = None) -> str:
    """Replace the "## " section whose heading is ``text``'s first line (or add it at the end);
    return the file written."""
    path = path or results_path()
    new = text.strip("\n").split("\n")
    heading = new[0].rstrip()
    assert heading.startswith("## "), f"a section starts with '## ', not {heading!r}"
    old = open(path, encoding="utf-8").read() if os.path.exists(path) else "# Benchmark results\n"
    lines = old.rstrip("\n").split("\n")
    start = next((i for i, ln in enumerate(lines) if ln.rstrip() == heading), None)
    if start is None:
        body, before, after = new, lines, []
    else:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
        ours = {ln.rstrip() for ln in new if ln.startswith("### ")}
        kept = [sub for h, sub in _subsections(lines[start + 1:end]) if h not in ours]
        kept = [ln for sub in kept for ln in ("\n".join(sub).strip("\n").split("\n") + [""])]
        first = next((i for i, ln in enumerate(new) if ln.startswith("### ")), len(new))
        head = new[:first]
        if kept and head[-1:] != [""]:
            head = head + [""]
        body = head + kept + new[first:]
        before, after = lines[:start], lines[end:]
    while body and body[-1] == "":
        body.pop()
    while before and before[-1] == "":
        before.pop()
    out = before + [""] + body + ([""] + after if after else [])
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(out).rstrip("\n") + "\n")
    return path

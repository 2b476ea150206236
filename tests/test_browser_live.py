"""The live view in a real JupyterLab and Chromium (issue 19): while the cell runs, its output shows
the status and the top functions, updated in place; when it ends, the report takes that place."""
from __future__ import annotations

import re
import time

import pytest

import browser as B

pytestmark = [pytest.mark.timed, pytest.mark.browser, pytest.mark.timeout(300),
              pytest.mark.requires("chromium", "playwright", "jupyter-lab")]

CELLS = [
    "%load_ext profmagic\nimport time\n"
    "def phase_a(t):\n    end = time.perf_counter() + t\n    while time.perf_counter() < end:\n        pass\n"
    "def phase_b(t):\n    end = time.perf_counter() + t\n    while time.perf_counter() < end:\n        sum(range(50))\n",
    "%%profile -b sampler\nphase_a(3)\nphase_b(3)\n",
]


def test_live_view_changes_during_the_cell_then_the_report(tmp_path):
    root = str(tmp_path)
    B.write_notebook(str(tmp_path / "live.ipynb"), CELLS)
    with B.jupyter_lab(root) as lab, B.chromium() as browser:
        page = lab.open(browser, "live.ipynb")
        B.run_cell(page, 0)
        cell = page.locator(".jp-Notebook .jp-CodeCell").nth(1)
        cell.locator(".jp-InputPrompt").click()
        page.locator(".jp-NotebookPanel-toolbar [data-command='notebook:run-cell-and-select-next']").click()
        seen, end = [], time.monotonic() + 60
        while time.monotonic() < end:
            text = cell.locator(".jp-Cell-outputArea").inner_text(timeout=5_000) if cell.locator(".jp-Cell-outputArea").count() else ""
            if "● recording" in text and (not seen or seen[-1] != text):
                seen.append(text)
                if len(seen) == 2:
                    B.screenshot(page, "live-view-during.png", cell)
            if cell.locator(".profmagic-report").count():
                break
            time.sleep(0.25)
        B.screenshot(page, "live-view-after.png", cell)
        report = cell.locator(".profmagic-report").count()
        final = cell.locator(".jp-Cell-outputArea").inner_text(timeout=5_000)
    assert report >= 1 and "● recording" not in final      # the report took the live view's place
    counts = [int(re.search(r"([\d,]+) samples", t).group(1).replace(",", "")) for t in seen]
    assert len(seen) >= 2 and counts == sorted(counts) and counts[-1] > counts[0], seen
    assert "phase_a" in seen[0]
    assert any("phase_b" in t for t in seen[1:]), seen

"""Every teaching notebook runs to the end in a real kernel (nbclient), assert cells included,
and converts to HTML."""
import importlib.util
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("notebooks_run", ROOT / "notebooks" / "run.py")
run = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run)

NOTEBOOKS = run.notebooks()

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(400)]


def test_the_five_notebooks_are_there():
    assert [p.name for p in NOTEBOOKS] == ["01-wall-cpu-off-cpu.ipynb", "02-choosing-a-profiler.ipynb",
                                           "03-python-and-native-stacks.ipynb",
                                           "04-case-study-worker-thread.ipynb", "05-cluster.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_structure(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert any("assert" in c.metadata.get("tags", []) and "assert " in c.source for c in nb.cells)
    assert nb.cells[-1].cell_type == "markdown" and "What to remember" in nb.cells[-1].source
    # Stored without outputs: the numbers a reader sees are always computed on their machine.
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
@pytest.mark.requires("py-spy", "eu-stack", "perf", "g++", "ptrace", "perf_event")
@pytest.mark.timed
def test_executes_and_converts(path, tmp_path):
    r = run.execute(path, tmp_path)
    assert r["error"] is None, r["error"]
    assert r["html_error"] is None, r["html_error"]
    html = r["html"].read_text(encoding="utf-8")
    title = nbformat.read(path, as_version=4).cells[0].source.splitlines()[0].lstrip("# ").strip()
    assert title.split(":")[0] in html
    executed = nbformat.read(r["executed"], as_version=4)
    assert not [o for c in executed.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    # The HTML shows the profiles, drawn (static SVG, no script needed), not only tables of numbers.
    icicles = re.findall(r'<svg [^>]*class="profmagic-icicle( profmagic-diff)?"', html)
    assert len(icicles) >= 2, f"{path.name}: {len(icicles)} drawn profiles"
    if path.name.startswith("04"):
        lines = r["summary"].splitlines()
        assert len(lines) == 3 and lines[0].startswith("case study:") and "x faster" in lines[2]
        # One perf --mode both --system cell states the wait chain at the top of its report, down to
        # the other rank that held the lock; the worker's CPU icicle beside its wall icicle (off-CPU
        # hatched); the differential icicle.
        sentence = html[html.index('class="profmagic-chain-sentence"'):]
        sentence = sentence[:sentence.index("</")]
        assert "backend perf" in html and re.search(r"woken by cs-worker \(pid \d+\)", sentence), sentence
        assert 'class="profmagic-cpuwall"' in html and 'class="profmagic-offcpu"' in html
        assert ' profmagic-diff"' in html

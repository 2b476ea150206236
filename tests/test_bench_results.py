"""bench/results.py, the one writer of bench/RESULTS.md: a bench replaces its own section, keeps the
hand-written ### notes in it, and leaves every other section as it was."""
from __future__ import annotations

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from results import write_section  # noqa: E402

DOC = """# Benchmark results

## A (issue 1)

old A figures

### Reading (A)

hand-written note on A

### Generated table

| old | row |

## B (issue 2)

B stays
"""


def test_replaces_own_section_keeps_notes_and_other_sections(tmp_path):
    f = tmp_path / "RESULTS.md"
    f.write_text(DOC)
    write_section("\n## A (issue 1)\n\nnew A figures\n\n### Generated table\n\n| new | row |\n", str(f))
    assert f.read_text() == """# Benchmark results

## A (issue 1)

new A figures

### Reading (A)

hand-written note on A

### Generated table

| new | row |

## B (issue 2)

B stays
"""
    write_section("## C (issue 3)\n\nC figures\n", str(f))   # a new section goes at the end
    assert f.read_text().endswith("## B (issue 2)\n\nB stays\n\n## C (issue 3)\n\nC figures\n")
    write_section("## B (issue 2)\n\nB again\n", str(f))     # the last but one, by heading
    text = f.read_text()
    assert text.count("## B (issue 2)") == 1 and "B again\n\n## C (issue 3)" in text and "B stays" not in text


def test_env_names_another_file(tmp_path):
    f = tmp_path / "scratch.md"
    f.write_text(DOC)
    code = ("import sys; sys.path.insert(0, 'bench'); from results import write_section; "
            "print(write_section('## B (issue 2)\\n\\nfrom a child\\n'))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                         env={**os.environ, "PROFMAGIC_BENCH_RESULTS": str(f)}).stdout
    assert out.strip() == str(f) and "from a child" in f.read_text()


def test_every_bench_writes_through_results_py():
    """No bench opens RESULTS.md itself; run_all.py knows every bench script."""
    bench = os.path.join(ROOT, "bench")
    scripts = sorted(n[:-3] for n in os.listdir(bench) if n.endswith(".py") and n not in ("results.py", "run_all.py")
                     and not n.startswith("_"))   # _name.py: a helper module of a bench, not a bench
    sys.path.insert(0, bench)
    import run_all
    assert sorted(run_all.BENCHES) == scripts
    for name in scripts:
        src = open(os.path.join(bench, name + ".py"), encoding="utf-8").read()
        assert "write_section" in src, name
        assert not re.search(r"open\([^)]*RESULTS", src), f"{name} opens RESULTS.md itself"

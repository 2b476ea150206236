"""`make demo`: execute the five teaching notebooks headless, write HTML copies under
build/notebooks/, print their paths and a three-line summary of the case study."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

RUNNER = Path(__file__).resolve().parents[1] / "notebooks" / "run.py"


def main(argv=None) -> int:
    if not RUNNER.exists():
        print(f"profmagic demo: the notebooks are not here ({RUNNER}); run it from a source checkout.",
              file=sys.stderr)
        return 2
    spec = importlib.util.spec_from_file_location("profmagic_notebooks_run", RUNNER)
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    return run.main(argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""`make demo`: a short run of the pipeline on a bundled example (replaced by the notebooks later)."""
from __future__ import annotations

from pathlib import Path

from . import load
from .cli import summary

EXAMPLE = Path(__file__).parent / "examples" / "worker.folded"


def main() -> int:
    p = load(EXAMPLE)
    print(summary(p, top=5))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

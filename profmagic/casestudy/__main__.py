"""One case-study process, started by ``scaling()``: warm up, print ``ready``, wait for ``go``,
run the steps, print ``{"step_s": ...}``."""
from __future__ import annotations

import argparse
import json
import signal
import sys

from . import DEFAULT_HOLD_MS, DEFAULT_N, Engine, run


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m profmagic.casestudy")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--cache", action="store_true")
    ap.add_argument("--hold-ms", type=float, default=DEFAULT_HOLD_MS)
    ap.add_argument("--n", type=int, default=DEFAULT_N)
    ap.add_argument("--lock", default=None)
    ap.add_argument("--forever", action="store_true", help="run steps until terminated (a background rank)")
    a = ap.parse_args(argv)
    with Engine(cache=a.cache, hold_ms=a.hold_ms, n=a.n, lock_path=a.lock) as e:
        run(2, e)
        print("ready", flush=True)
        if sys.stdin.readline().strip() != "go":
            return 1
        if a.forever:
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
            while True:
                run(10, e)
        step = run(a.steps, e)
        print(json.dumps({"step_s": step, "props_calls": e.props_calls}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""What the read-only frames (model.FrozenFrame) cost: the same reads on a Profile's frozen stacks and
on a plain DataFrame copy of them, and building a Profile, on N stack rows (default 1,000,000).

    .venv/bin/python bench/bench_frozen.py [N] [--no-write]

Writes its section of bench/RESULTS.md through bench/results.py unless --no-write.
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np
import pandas as pd

from profmagic.model import FrozenFrame, Profile, make_frames


def best(fn, n=5):
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return min(out)


def main(n: int = 1_000_000, write: bool = True) -> None:
    rng = np.random.default_rng(1)
    frames = make_frames([f"f{i}" for i in range(200)], ["m.py"] * 200, list(range(200)), ["python"] * 200)
    stacks = pd.DataFrame({"thread": rng.integers(0, 8, n).astype(str),
                           "stack": pd.Series([tuple(rng.integers(0, 200, 3).tolist()) for _ in range(n)],
                                              dtype=object),
                           "samples": rng.integers(1, 5, n), "wall": rng.random(n)})
    build = best(lambda: Profile(frames, stacks), 3)
    p = Profile(frames, stacks)
    plain = pd.DataFrame(p.stacks)   # the same blocks, as an ordinary DataFrame
    wrap = best(lambda: FrozenFrame(plain))
    reads = {
        "groupby thread sum": lambda df: df.groupby("thread", observed=True)[["samples", "wall"]].sum(),
        "loc mask": lambda df: df.loc[df["samples"] > 2, "wall"].sum(),
        "iloc slice": lambda df: df.iloc[1000:200000]["wall"].mean(),
        "sort_values": lambda df: df.sort_values("wall").head(),
    }
    timed = {name: (best(lambda: fn(p.stacks)), best(lambda: fn(plain))) for name, fn in reads.items()}
    text = "\n".join([
        "## Read-only frames (issue 26)",
        "",
        f"`.venv/bin/python bench/bench_frozen.py {n}` (best of 5): a Profile's frames are `model.FrozenFrame`s, "
        f"a copy-on-write view of the frame it was built from. {n:,} stack rows: `Profile(frames, stacks)` "
        f"{build * 1e3:.1f} ms, of which freezing a frame {wrap * 1e6:.0f} µs. The same reads on the frozen stacks "
        "and on an ordinary DataFrame over the same blocks:",
        "",
        "| read | frozen (ms) | plain (ms) |",
        "|---|---|---|",
        *(f"| {name} | {a * 1e3:.1f} | {b * 1e3:.1f} |" for name, (a, b) in timed.items()),
    ])
    print(text)
    if write:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from results import write_section
        print("wrote", write_section(text))

if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--no-write"]
    main(int(args[0]) if args else 1_000_000, write="--no-write" not in sys.argv[1:])

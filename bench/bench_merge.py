"""Issue 9 bench: merging 64 per-process profiles of 100k samples each (time, peak memory), and the
start-of-child gap: py-spy -s against children that sample themselves (childsampler).

    .venv/bin/python bench/bench_merge.py            # both; writes its section of bench/RESULTS.md
    .venv/bin/python bench/bench_merge.py --no-write # print only
    .venv/bin/python bench/bench_merge.py --quick    # 8 ranks of 10,000 samples, one gap run each
"""
from __future__ import annotations

import multiprocessing as mp
import os
import resource
import sys
import time
import tracemalloc

import numpy as np
import pandas as pd

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from profmagic import multi  # noqa: E402
from profmagic.model import Profile, make_frames  # noqa: E402

RANKS, SAMPLES, STACKS, FRAMES, DEPTH = 64, 100_000, 2_000, 600, 30


def rank_profile(r: int, rng) -> Profile:
    """A synthetic rank: FRAMES frames (shared names across ranks), STACKS distinct stacks of up to
    DEPTH frames, SAMPLES time-ordered samples at 100 Hz on 4 threads."""
    frames = make_frames([f"fn_{i}" for i in range(FRAMES)], [f"mod_{i % 40}.py" for i in range(FRAMES)],
                         [i for i in range(FRAMES)], ["python"] * FRAMES)
    stacks = [tuple(rng.integers(0, FRAMES, rng.integers(5, DEPTH)).tolist()) for _ in range(STACKS)]
    threads = np.array([f'Thread {1000 * r + t} "worker-{t}"' for t in range(4)], dtype=object)
    sid = rng.integers(0, STACKS, SAMPLES)
    thread_of_stack = threads[np.arange(STACKS) % 4]
    counts = np.bincount(sid, minlength=STACKS)
    st = pd.DataFrame({"thread": pd.Series(thread_of_stack, dtype=object), "stack": pd.Series(stacks, dtype=object),
                       "samples": counts, "wall": counts * 0.01, "cpu": counts * 0.007})
    sm = pd.DataFrame({"time": np.arange(SAMPLES) * 0.01, "stack": sid, "thread": thread_of_stack[sid],
                       "wall": np.full(SAMPLES, 0.01), "cpu": np.full(SAMPLES, 0.007)})
    return Profile(frames, st, sm, {"backend": "synthetic", "rate": 100.0, "rank": r}, None, "wall")


def configure(quick: bool) -> None:
    global RANKS, SAMPLES
    if quick:
        RANKS, SAMPLES = 8, 10_000


def bench_merge() -> list[str]:
    rng = np.random.default_rng(9)
    profiles = [rank_profile(r, rng) for r in range(RANKS)]
    inputs_bytes = sum(int(p.samples.memory_usage(deep=True).sum() + p.stacks.memory_usage(deep=True).sum())
                       for p in profiles)
    rows = []
    tracemalloc.start()
    t0 = time.perf_counter()
    floor = pd.concat([p.samples for p in profiles], ignore_index=True)   # the samples alone, no remap
    t_floor = time.perf_counter() - t0
    _, peak_floor = tracemalloc.get_traced_memory()
    del floor
    tracemalloc.reset_peak()
    t0 = time.perf_counter()
    m = multi.concat(profiles, key="rank")
    t_concat = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert m.sample_count == RANKS * SAMPLES and len(m.samples) == RANKS * SAMPLES
    out_bytes = int(m.samples.memory_usage(deep=True).sum() + m.stacks.memory_usage(deep=True).sum())
    t0 = time.perf_counter()
    per = multi.by_process(m)
    t_by = time.perf_counter() - t0
    assert len(per) == RANKS
    rows.append(f"| concat ({RANKS} × {SAMPLES:,} samples, {STACKS:,} stacks each) | {t_concat:.2f} s | "
                f"{peak / 2**20:,.0f} MiB | {out_bytes / 2**20:,.0f} MiB result, "
                f"{out_bytes / (RANKS * SAMPLES):.0f} B/sample |")
    rows.append(f"| pd.concat of the samples tables only (floor) | {t_floor:.2f} s | {peak_floor / 2**20:,.0f} MiB | |")
    rows.append(f"| by_process (the ranks bars) on the result | {t_by:.2f} s | | |")
    rows.append(f"| inputs held in memory before merging | | {inputs_bytes / 2**20:,.0f} MiB | |")
    rows.append(f"| process max RSS after all | | {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MiB | |")
    return rows


def spin(d):
    t = time.perf_counter()
    while time.perf_counter() - t < d:
        pass


def bench_gap(children: str, spins=(0.4, 0.8, 1.2, 1.6)) -> str:
    import profmagic
    from profmagic.analysis import process_profile
    with profmagic.profile("py-spy", idle=True, subprocesses=True, children=children,
                           announce=lambda t: None) as rec:
        ws = [mp.get_context("fork").Process(target=spin, args=(d,), name=f"w{d}") for d in spins]
        for w in ws:
            w.start()
        for w in ws:
            w.join()
    p = rec.profile
    got = []
    for d in spins:
        labs = [lab for lab in multi.processes(p) if lab.endswith(f"w{d}")] or \
            [lab for lab, v in p.meta["processes"].items() if v.get("pid") == ws[spins.index(d)].pid]
        f = process_profile(p, labs[0]).functions("wall") if labs else None
        got.append(float(f.loc[f["name"] == "spin", "total"].sum()) if f is not None else 0.0)
    return (f"| {'py-spy -s (polling)' if children == 'py-spy' else 'childsampler (fork hook)'} | "
            + " | ".join(f"{g:.2f}" for g in got) + " | "
            + f"{max(abs(g - d) for g, d in zip(got, spins)):.2f} |")


def main():
    write = "--no-write" not in sys.argv
    quick = "--quick" in sys.argv
    configure(quick)
    merge = bench_merge()
    gap = [bench_gap("py-spy"), bench_gap("hook")] * (1 if quick else 2)
    runs = "one run each" if quick else "two runs each, interleaved"
    text = ["## Many processes (issue 9)", "",
            f"`.venv/bin/python bench/bench_merge.py{' --quick' if quick else ''}` ({os.cpu_count()} cores, "
            f"load average {os.getloadavg()[0]:.1f} at the end; {time.strftime('%Y-%m-%d')}).", "",
            "Merging per-process profiles with `multi.concat` (pandas "
            f"{pd.__version__}; peak = tracemalloc peak during the call):", "",
            "| step | time | peak memory | size |", "|---|---|---|---|", *merge, "",
            "Start-of-child gap: 4 fork workers spinning 0.4 / 0.8 / 1.2 / 1.6 s, `%%profile --subprocesses`"
            f" with py-spy, wall seconds recorded in `spin` per worker ({runs}):", "",
            "| children recorded by | 0.4 s | 0.8 s | 1.2 s | 1.6 s | worst error (s) |",
            "|---|---|---|---|---|---|", *gap, ""]
    print("\n".join(text))
    if write:
        from results import write_section
        write_section("\n".join(text))


if __name__ == "__main__":
    main()

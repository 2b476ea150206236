"""Small files that ask a reader for a lot of work (issue 28): prefix chains, nesting, counts and many
threads, each built at a given size. ``python tests/hostile.py SHAPE N [AS_MB]`` reads one in this
process under an address-space cap and prints the time, peak RSS and outcome (the bound tests and the
figures in the report use it)."""
from __future__ import annotations

import json


def gecko_chain(n: int, sample_every: bool = True) -> bytes:
    """A stackTable of ``n`` rows, each the previous one plus a frame: a stack ``n`` deep."""
    stack = [[None, 0]] + [[i - 1, 0] for i in range(1, n)]
    rows = range(n) if sample_every else [n - 1]
    samples = [[s, float(k)] for k, s in enumerate(rows)]
    th = {"name": "t", "tid": 1, "pid": 1, "stringTable": ["f (a.py:1)"],
          "frameTable": {"schema": {"location": 0}, "data": [[0]]},
          "stackTable": {"schema": {"prefix": 0, "frame": 1}, "data": stack},
          "samples": {"schema": {"stack": 0, "time": 1}, "data": samples}}
    return json.dumps({"meta": {"version": 29, "interval": 1.0}, "threads": [th]},
                      separators=(",", ":")).encode()


def chrome_nested(n: int) -> bytes:
    """``n`` nested B events, then their E events: the stack grows to ``n``."""
    ev = [{"ph": "B", "name": "f", "ts": i, "pid": 1, "tid": 1} for i in range(n)]
    ev += [{"ph": "E", "ts": n + i, "pid": 1, "tid": 1} for i in range(n)]
    return json.dumps({"traceEvents": ev}, separators=(",", ":")).encode()


def chrome_frames(n: int) -> bytes:
    """A stackFrames ``parent`` chain ``n`` long, one P sample on each of its frames."""
    frames = {str(i): ({"name": "f", "parent": str(i - 1)} if i else {"name": "f"}) for i in range(n)}
    ev = [{"ph": "P", "ts": i, "pid": 1, "tid": 1, "sf": str(i)} for i in range(n)]
    return json.dumps({"traceEvents": ev, "stackFrames": frames}, separators=(",", ":")).encode()


def chrome_unordered_ends(n: int, depth: int = 10_000) -> bytes:
    """``n`` slices nested ``depth`` deep in groups; each group's B events share one timestamp and its E
    events the next, outermost first: every end must be paired with a later one by name."""
    ev = []
    for g in range(0, n, depth):
        k = min(depth, n - g)
        ev += [{"ph": "B", "name": f"f{i}", "ts": 2 * g, "pid": 1, "tid": 1} for i in range(k)]
        ev += [{"ph": "E", "name": f"f{i}", "ts": 2 * g + 1, "pid": 1, "tid": 1} for i in range(k)]
    return json.dumps({"traceEvents": ev}, separators=(",", ":")).encode()


def speedscope_deep(n: int) -> bytes:
    """An evented profile that opens one frame ``n`` times, then closes it ``n`` times."""
    ev = [{"type": "O", "frame": 0, "at": i} for i in range(n)]
    ev += [{"type": "C", "frame": 0, "at": n + i} for i in range(n)]
    doc = {"$schema": "https://www.speedscope.app/file-format-schema.json", "shared": {"frames": [{"name": "f"}]},
           "profiles": [{"type": "evented", "name": "t", "unit": "seconds", "startValue": 0, "endValue": 2 * n,
                         "events": ev}]}
    return json.dumps(doc, separators=(",", ":")).encode()


def eu_stack_threads(n: int, sampled: bool = True) -> bytes:
    """One snapshot of a process with ``n`` threads (the recorder's sampled form: each thread's CPU
    delta has no on-CPU stack to go to)."""
    out = []
    if sampled:
        out += ["# profmagic eu-stack sampler pid=1 interval=0.01 duration=1.0 snapshots=1", "# t=0.5"]
    out.append("PID 1 - process")
    for t in range(n):
        out.append(f"TID {t + 1}:" + (" state=S cpu_ns=1000" if sampled else ""))
        out.append(f"#0  0x0000000000001000 f{t % 7} - /lib/x.so")
    return ("\n".join(out) + "\n").encode()


def gecko_threads(n: int) -> bytes:
    """``n`` threads of one sample each, in ``n`` processes."""
    th = [{"name": "t", "tid": i + 1, "pid": i + 1, "stringTable": ["f"], "frameTable": {"schema": {"location": 0},
           "data": [[0]]}, "stackTable": {"schema": {"prefix": 0, "frame": 1}, "data": [[None, 0]]},
           "samples": {"schema": {"stack": 0, "time": 1}, "data": [[0, 1.0]]}} for i in range(n)]
    return json.dumps({"meta": {"version": 29, "interval": 1.0}, "threads": th}, separators=(",", ":")).encode()


def chrome_threads(n: int) -> bytes:
    """``n`` threads of one slice each, in ``n`` processes."""
    ev = [{"ph": "X", "name": "f", "ts": i, "dur": 1, "pid": i + 1, "tid": i + 1} for i in range(n)]
    return json.dumps({"traceEvents": ev}, separators=(",", ":")).encode()


def speedscope_threads(n: int) -> bytes:
    """``n`` profiles (threads), all of one name."""
    prof = {"type": "sampled", "name": "t", "unit": "none", "startValue": 0, "endValue": 1, "samples": [[0]],
            "weights": [1]}
    return json.dumps({"$schema": "https://www.speedscope.app/file-format-schema.json",
                       "shared": {"frames": [{"name": "f"}]}, "profiles": [prof] * n}, separators=(",", ":")).encode()


SHAPES = {"gecko_chain": gecko_chain, "chrome_nested": chrome_nested, "chrome_frames": chrome_frames,
          "chrome_unordered_ends": chrome_unordered_ends, "speedscope_deep": speedscope_deep,
          "eu_stack_threads": eu_stack_threads, "gecko_threads": gecko_threads, "chrome_threads": chrome_threads,
          "speedscope_threads": speedscope_threads}


def main(argv):
    import resource
    import time
    shape, n = argv[0], int(argv[1])
    cap = int(argv[2]) if len(argv) > 2 else 0
    data = SHAPES[shape](n)
    if cap:
        resource.setrlimit(resource.RLIMIT_AS, (cap << 20, cap << 20))
    import profmagic
    ru = resource.getrusage(resource.RUSAGE_SELF)
    cpu0 = ru.ru_utime + ru.ru_stime
    t = time.perf_counter()
    try:
        p = profmagic.load(data)
        what = f"profile: {len(p.stacks)} stacks, {p.sample_count} samples, depth {max(map(len, p.stacks['stack']))}"
    except profmagic.ProfileFormatError as e:
        what = f"ProfileFormatError: {e}"[:300]
    except MemoryError:
        what = "MemoryError"
    dt = time.perf_counter() - t
    ru = resource.getrusage(resource.RUSAGE_SELF)
    cpu = ru.ru_utime + ru.ru_stime - cpu0
    print(f"{shape} n={n} bytes={len(data)}: {dt:.2f} s ({cpu:.2f} s CPU), peak RSS {ru.ru_maxrss >> 10} MB; {what}")


if __name__ == "__main__":
    import sys
    main(sys.argv[1:])

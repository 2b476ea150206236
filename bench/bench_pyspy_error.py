"""Where py-spy's timed error comes from (issue 25 item 4): its samples against a logged truth.

The main thread cycles through three functions whose entries it logs with time.monotonic_ns()
(CLOCK_MONOTONIC; py-spy stamps its chrometrace with Rust's Instant, the same clock, counted from
when its recorder was made): ``spin`` (busy over three lines, so nearly every sample on it is an
event: py-spy writes events only where the stack, line included, changes), ``nap`` (time.sleep)
and ``wait`` (Event.wait). py-spy records it through ``backends.pyspy.Recorder`` in its timed
format, with ``--idle`` and without, at each rate, quiet and beside N spinning processes.

Per recording, with the trace put on time.monotonic() as the recorder does (``trace_options``):

* zero: the span ``pyspy.trace_zero`` bounds the trace's zero to, and the error of the one taken
  against the offset that best fits the truth (the fewest events disagreeing);
* shift: the smallest lag (an event can only follow the change it shows; below 0 the mapping is early);
* disagree: events whose function is not the truth's at their timestamp (and with the best-fitting zero);
* lag: from a change to py-spy's first event showing it (a call no event shows is "missed");
* gaps: between consecutive events inside one spin call (every sample there is an event, bar a
  repeat of the same line): the longest, and those over 5 intervals (pauses);
* idle: without --idle, events in nap or wait (py-spy called the thread active while it slept),
  and spin calls with no event (called idle while running);
* error: each function's seconds as ``chrome_trace.read`` reads them, minus the truth, in points of
  the window; "ends" is what the reading loses at the window's ends (first event late, last cut).

Run:  .venv/bin/python bench/bench_pyspy_error.py [--recordings 3] [--seconds 4] [--load 2] [--no-write]
      [--json FILE] [--report-from FILE]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from results import write_section  # noqa: E402

FUNCS = ("spin", "nap", "wait")
LENGTHS = {"spin": 0.0413, "nap": 0.0297, "wait": 0.0231}   # odd, so no rate aliases with the cycle
IDLE = {"nap", "wait"}
DEPTHS = 7      # spin's stack depths: 6 in 7 of its samples differ from the one before
BUNCHED = 20e-6   # s: events closer than this were stamped together (queued), not sampled so
SLACK = 0.02   # s: how far before a change an event may show it (the mapping's error) and after a call
_event = threading.Event()


def _deep(k):
    """k frames deeper, then a few µs of work: a sample's depth changes from one sample to the next."""
    if k:
        return _deep(k - 1)
    return sum(range(40))


def spin(s):
    end = time.perf_counter() + s
    k = 0
    while time.perf_counter() < end:
        _deep(k % DEPTHS)
        k += 1


def nap(s):
    time.sleep(s)


def wait(s):
    _event.wait(s)


def run_workload(seconds, log):
    """Each entry is logged just before the call, so the truth's change comes before py-spy can see it."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for f in (spin, nap, wait):
            log.append((time.monotonic_ns(), f.__name__))
            f(LENGTHS[f.__name__])
            log.append((time.monotonic_ns(), "loop"))


def record(rate: float, idle: bool, seconds: float):
    """One recording: (truth log, the capture's trace, its reader options, the recorder)."""
    from profmagic.backends import pyspy
    from profmagic.backends.base import Options
    o = Options(rate=rate, mode="wall" if idle else "cpu", extra={"timing": "timed"})
    rec = pyspy.Recorder(o)
    rec.timed = True   # without --idle too: the same chrometrace, to see what py-spy calls idle
    log: list = []
    try:
        rec.start()
        t0 = time.monotonic()
        run_workload(seconds, log)
        rec.bounds(start=t0, end=time.monotonic())
        cap = rec.stop()
    finally:
        rec.close()
    return log, cap, rec


def events_of(trace: bytes):
    """The workload thread's events: [(ts µs, leaf function, line)], one per distinct timestamp."""
    doc = json.loads(trace)
    stacks: dict = {}
    per: dict = {}
    for ev in doc:
        if ev.get("ph") not in ("B", "E"):
            continue
        st = stacks.setdefault(ev["tid"], [])
        if ev["ph"] == "B":
            st.append((ev["name"], (ev.get("args") or {}).get("line")))
        elif st:
            st.pop()
        per.setdefault(ev["tid"], {})[ev["ts"]] = tuple(st)
    for tid, by_ts in per.items():
        if any(any(n == "run_workload" for n, _ in s) for s in by_ts.values()):
            out = []
            for ts in sorted(by_ts):
                s = by_ts[ts]
                leaf = next((n for n, _ in reversed(s) if n in FUNCS), "loop" if s else None)
                out.append((float(ts), leaf, s[-1][1] if s else None))
            return out
    return []


def truth_at(changes, t):
    """The truth's function at monotonic second ``t`` (changes: sorted [(t, name)])."""
    import bisect
    i = bisect.bisect_right(changes, (t, "~")) - 1
    return changes[i][1] if i >= 0 else None


def analyse(log, cap, rec, rate, idle):
    from profmagic.formats import chrome_trace
    opts = cap.meta["reader_options"]
    lo_us, hi_us = opts["window"]
    trace = cap.data
    evs = events_of(trace)
    doc = json.loads(trace)
    first = min(float(e["ts"]) for e in doc if e.get("ph") == "B")

    last = max(float(e["ts"]) for e in doc)
    from profmagic.backends import pyspy
    zlo, zhi, zero = pyspy.trace_zero(rec.clock(), last)

    def to_mono(us):   # the inverse of trace_options' on_trace
        return zero + us * 1e-6
    changes = [(ns * 1e-9, name) for ns, name in log]
    start, end = changes[0][0], changes[-1][0]
    ev_t = [(to_mono(ts), leaf, line) for ts, leaf, line in evs]
    inside = [e for e in ev_t if start <= e[0] <= end]
    # Lags: each call's entry to the first event showing that function, before the next call ends.
    calls = [(t, n, (changes[i + 1][0] if i + 1 < len(changes) else end))
             for i, (t, n) in enumerate(changes) if n in FUNCS]
    import bisect
    times = [e[0] for e in ev_t]
    lags, missed = [], {f: 0 for f in FUNCS}
    for t, n, t_next in calls:
        # the first event showing n from just before the change (a mapping error) to just after the call
        # (an event is stamped after its stack was read)
        i = bisect.bisect_left(times, t - SLACK)
        seen = next((ev_t[k][0] for k in range(i, len(ev_t)) if ev_t[k][0] <= t_next + SLACK and ev_t[k][1] == n),
                    None) if i < len(ev_t) else None
        if seen is None:
            missed[n] += 1
        else:
            lags.append((n, seen - t))
    shift = min((lag for _, lag in lags), default=float("nan"))
    # The offset that best puts the events on the truth: how far the mapping is off, as a whole.
    best = min(((sum(1 for t, leaf, _ in inside if leaf != truth_at(changes, t + d * 1e-4)), abs(d), d)
                for d in range(-1000, 1001, 5)), default=(0, 0, 0))[::2]
    offset_ms = best[1] * 1e-1
    halves = [[e for e in inside if (e[0] < (start + end) / 2) == h] for h in (True, False)]
    offset_halves = [min(((sum(1 for t, leaf, _ in part if leaf != truth_at(changes, t + d * 1e-4)), abs(d), d)
                          for d in range(-1000, 1001, 5)), default=(0, 0, 0))[2] * 1e-1 for part in halves]
    disagree = sum(1 for t, leaf, _ in inside if leaf != truth_at(changes, t))
    # Gaps between events inside spin calls.
    gaps = []
    for t, n, t_next in calls:
        if n != "spin":
            continue
        ts = [e[0] for e in ev_t if t < e[0] < t_next and e[1] == "spin"]
        gaps += [b - a for a, b in zip(ts, ts[1:])]
    # Queued samples: py-spy stamps a sample when its main thread takes it from the sampling thread
    # (chrometrace.rs: Instant in increment), so samples that queued while that thread waited for a core
    # come out microseconds apart. An exponential interval that short is rare: 1 - exp(-rate x 20 µs).
    steps = [b[0] - a[0] for a, b in zip(ev_t, ev_t[1:])]
    bunched = sum(1 for d in steps if d < BUNCHED)
    idle_events = sum(1 for t, leaf, _ in inside if truth_at(changes, t) in IDLE and leaf in IDLE)
    spin_missed = missed["spin"]
    # The reading: chrome_trace.read as the backend reads it, per function, against the truth.
    p = chrome_trace.read(trace, source="bench", **opts)
    names = p.frames["name"].to_numpy()
    st = p.stacks
    got = {f: 0.0 for f in FUNCS}
    thread_total = 0.0
    for sid, w in zip(st["stack"], st["wall"]):
        ns = [names[k] for k in sid]
        if "run_workload" not in ns:
            continue
        thread_total += w
        leaf = next((n for n in reversed(ns) if n in FUNCS), None)
        if leaf:
            got[leaf] += w
    true = {f: 0.0 for f in FUNCS}
    for i, (t, n) in enumerate(changes[:-1]):
        if n in FUNCS:
            true[n] += changes[i + 1][0] - t
    span = end - start
    # What the reading gets before its first event and after its last one on this thread.
    first_ev = min((e[0] for e in ev_t), default=start)
    return {
        "rate": rate, "idle": idle, "events": len(ev_t), "calls": len(calls),
        "shift_ms": shift * 1e3, "offset_ms": offset_ms, "offset_halves_ms": offset_halves,
        "disagree_at_offset": best[0] / max(1, len(inside)),
        # the trace's zero after py-spy's start: its bounds, the one taken, and where the truth puts it
        "zero_ms": [(zlo - rec.spawned_at) * 1e3, (zhi - rec.spawned_at) * 1e3, (zero - rec.spawned_at) * 1e3],
        "zero_true_ms": (zero - rec.spawned_at) * 1e3 + offset_ms,
        "disagree": disagree / max(1, len(inside)),
        "lag_med_ms": statistics.median(l for _, l in lags) * 1e3 if lags else float("nan"),
        "lag_mean_ms": statistics.fmean(l for _, l in lags) * 1e3 if lags else float("nan"),
        "lag_sd_ms": statistics.pstdev(l for _, l in lags) * 1e3 if len(lags) > 1 else float("nan"),
        "lag_max_ms": max(l for _, l in lags) * 1e3 if lags else float("nan"),
        "missed": dict(missed), "calls_per_fn": {f: sum(1 for c in calls if c[1] == f) for f in FUNCS},
        "gap_max_ms": max(gaps) * 1e3 if gaps else float("nan"),
        "gap_mean_ms": statistics.fmean(gaps) * 1e3 if gaps else float("nan"),
        "pauses": sum(1 for g in gaps if g > 5 / rate),
        "bunched": bunched, "steps": len(steps),
        "idle_events": idle_events, "spin_missed": spin_missed,
        "error_pp": {f: (got[f] - true[f]) / span * 100 for f in FUNCS},
        "thread_pct": (thread_total / ((hi_us - lo_us) * 1e-6) - 1) * 100,
        "head_ms": (first_ev - start) * 1e3,
        "window_vs_truth_ms": ((hi_us - lo_us) * 1e-6 - span) * 1e3,
        "status": cap.meta.get("status", "")[-200:],
    }


def spinners(n):
    code = "while True: pass"
    return [subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL) for _ in range(n)]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recordings", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--rates", default="100,500")
    ap.add_argument("--load", type=int, default=2, help="spinning processes for the 'under load' runs")
    ap.add_argument("--json", help="also write every recording's figures here")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--report-from", metavar="JSON", help="write the section from a --json of an earlier run")
    a = ap.parse_args(argv)
    rates = [float(r) for r in a.rates.split(",")]
    if a.report_from:
        with open(a.report_from) as f:
            saved = json.load(f)
        text = report(saved["rows"], a, saved["load"], saved["when"])
        print(text)
        if not a.no_write:
            write_section(text)
        return 0
    load0 = os.getloadavg()[0]
    rows = []
    for loaded in (False, True):
        procs = spinners(a.load) if loaded else []
        try:
            for k in range(a.recordings):   # interleaved, so drift in the machine's load hits every config
                for rate in rates:
                    for idle in (True, False):
                        log, cap, rec = record(rate, idle, a.seconds)
                        r = analyse(log, cap, rec, rate, idle)
                        r["loaded"] = loaded
                        rows.append(r)
                        print(json.dumps({k: v for k, v in r.items() if k != "status"}), flush=True)
        finally:
            for p in procs:
                p.kill()
                p.wait()
    when = time.strftime('%Y-%m-%d %H:%M')
    load = [load0, os.getloadavg()[0]]
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "load": load, "when": when}, f)
    text = report(rows, a, load, when)
    print(text)
    if not a.no_write:
        write_section(text)
    return 0


def _agg(rs, key, fn=statistics.median):
    vals = [r[key] for r in rs if r[key] == r[key]]
    return fn(vals) if vals else float("nan")


def report(rows, a, load, when):
    cmd = "cd /work/main && nice -n 19 .venv/bin/python bench/bench_pyspy_error.py"
    if (a.recordings, a.seconds, a.rates, a.load) != (3, 4.0, "100,500", 2):
        cmd += f" --recordings {a.recordings} --seconds {a.seconds:g} --rates {a.rates} --load {a.load}"
    L = ["## py-spy's timed error, traced to its cause (issue 25 item 4)", "",
         f"Command: `{cmd}` ({when}; measured under load from other work on 2 shared "
         f"cores, load average {load[0]:.1f} at the start, {load[1]:.1f} at the end; py-spy "
         f"{_pyspy_version()}, python {sys.version.split()[0]}). {a.recordings} recordings of {a.seconds:g} s per "
         f"row, the rows interleaved; 'loaded' adds {a.load} spinning processes. The workload thread cycles spin "
         f"{LENGTHS['spin'] * 1e3:g} ms, nap (time.sleep) {LENGTHS['nap'] * 1e3:g} ms, wait (Event.wait) "
         f"{LENGTHS['wait'] * 1e3:g} ms, logging each entry with time.monotonic_ns(). Medians over the recordings; "
         "'worst' columns are over all of them. What each column means: the bench's docstring.", "",
         "| load | rate | --idle | events | zero: span / taken − truth, worst (ms) | shift (ms) | disagree / at the best zero | lag median / mean / sd (ms) | lag worst (ms) | "
         "missed calls | gap mean / worst (ms) | pauses > 5 intervals | idle events / spin calls unseen | "
         "bunched (< 20 µs apart) / by chance | error spin / nap / wait (pp, worst) | thread seconds vs window % | "
         "first event after start (ms) |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["loaded"], r["rate"], r["idle"]), []).append(r)
    for (loaded, rate, idle), rs in groups.items():
        worst = {f: max((r["error_pp"][f] for r in rs), key=abs) for f in FUNCS}
        shown = FUNCS if idle else ("spin",)   # without --idle py-spy drops nap's and wait's samples
        missed = sum(r["missed"][f] for r in rs for f in shown)
        calls = sum(r["calls_per_fn"][f] for r in rs for f in shown)
        bunched, steps = sum(r["bunched"] for r in rs), sum(r["steps"] for r in rs)
        L.append(
            f"| {'loaded' if loaded else 'quiet'} | {rate:g} Hz | {'yes' if idle else 'no'} | "
            f"{_agg(rs, 'events'):.0f} | {max(r['zero_ms'][1] - r['zero_ms'][0] for r in rs):.1f} / "
            f"{max((r['zero_ms'][2] - r['zero_true_ms'] for r in rs), key=abs):+.1f} | "
            f"{_agg(rs, 'shift_ms', min):+.1f} | {_agg(rs, 'disagree') * 100:.1f}% / "
            f"{_agg(rs, 'disagree_at_offset') * 100:.1f}% | "
            f"{_agg(rs, 'lag_med_ms'):.1f} / {_agg(rs, 'lag_mean_ms'):.1f} / {_agg(rs, 'lag_sd_ms'):.1f} | "
            f"{_agg(rs, 'lag_max_ms', max):.0f} | {missed}/{calls} | {_agg(rs, 'gap_mean_ms'):.1f} / "
            f"{_agg(rs, 'gap_max_ms', max):.0f} | {sum(r['pauses'] for r in rs)} | "
            f"{sum(r['idle_events'] for r in rs)} / {sum(r['spin_missed'] for r in rs)} | "
            f"{bunched}/{steps} / {steps * (1 - math.exp(-rate * BUNCHED)):.1f} | "
            + " / ".join(f"{worst[f]:+.1f}" for f in FUNCS)
            + f" | {_agg(rs, 'thread_pct', lambda v: max(v, key=abs)):+.2f} | {_agg(rs, 'head_ms'):.1f} |")
    return "\n".join(L) + "\n"


def _pyspy_version():
    from profmagic.backends import pyspy
    return (pyspy.version() or "?").replace("py-spy ", "")


if __name__ == "__main__":
    sys.exit(main())

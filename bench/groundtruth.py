"""Accuracy against ground truth (issue 6): workloads whose wall and CPU split is known by construction.

Each workload runs for DURATION seconds on three threads of one child process:
  main thread  main_loop:   spin (burns a set CPU time), nap (time.sleep), wait_lock (blocks on a lock
                            that the holder thread holds)
  holder       holder_loop: hold (takes the lock and sleeps while holding it); idle in wait_turn between
  C thread     c_worker:    c_busy (busy loop) and c_sleep (nanosleep), a pthread with no Python state
Every function measures its own wall (perf_counter / CLOCK_MONOTONIC) and CPU (thread_time /
CLOCK_THREAD_CPUTIME_ID) time: that is the truth. Each backend and mode records the same workload in a
fresh child; the error is the function's share of its thread's time (in the metric) minus the true
share, in percentage points, and each thread's seconds are compared with its measured wall (or CPU) time.

Run:  .venv/bin/python bench/groundtruth.py            (replaces its section of bench/RESULTS.md,
                                                         keeping the hand-written ### subsections)
      .venv/bin/python bench/groundtruth.py --no-write --scenarios balanced --backends sampler
      .venv/bin/python bench/groundtruth.py --timed   (issue 18: py-spy timed against calibrated, both
                                                         through backends.pyspy as `profmagic record` drives
                                                         it; its own section of bench/RESULTS.md)
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

DURATION = 5.0
TIMED = "py-spy --idle timed (chrometrace)"
CALIBRATED = "py-spy --idle calibrated to the main thread (same run as timed)"
RATE = 100.0
# name -> (spin, nap, lock) seconds per main-thread cycle, (c_busy, c_sleep) seconds per C-thread cycle.
# Odd lengths so that a 10 ms sampler does not alias with the cycle.
SCENARIOS = {
    "cpu-heavy": ((0.0613, 0.0171, 0.0193), (0.0143, 0.0051)),
    "balanced": ((0.0317, 0.0293, 0.0289), (0.0097, 0.0103)),
    "wait-heavy": ((0.0131, 0.0413, 0.0371), (0.0049, 0.0151)),
}
# Issue 25's known job, a few long phases (each function entered once or twice in 5 s): not run by
# default; bench_coverage.py --scenarios phases.
PHASES = {"phases": ((1.5, 0.9, 1.2), (0.5, 0.3))}
THREAD_ROOTS = {"main": "main_loop", "holder": "holder_loop", "c": "c_worker"}
PY313 = os.path.expanduser("~/.pyenv/versions/3.13.0/bin/python3.13")
FUNCTIONS = {"main": ["spin", "nap", "wait_lock"], "holder": ["hold", "wait_turn"], "c": ["c_busy", "c_sleep"]}


# ---------------------------------------------------------------------------------------------------
# The workload (runs in the child)
# ---------------------------------------------------------------------------------------------------
def build_cworker() -> str:
    out = HERE / "data" / "cworker.so"
    src = HERE / "cworker.c"
    if not out.exists() or out.stat().st_mtime < src.stat().st_mtime:
        out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["gcc", "-O1", "-g", "-fno-inline", "-fno-omit-frame-pointer", "-shared", "-fPIC",
                        "-pthread", str(src), "-o", str(out)], check=True)
    return str(out)


class Truth:
    def __init__(self):
        self.f: dict[str, list[float]] = {}

    def add(self, name, w, c):
        v = self.f.setdefault(name, [0.0, 0.0, 0])   # wall, cpu, calls
        v[0] += w
        v[1] += c
        v[2] += 1


def spin(seconds, t: Truth):
    w0, c0 = time.perf_counter(), time.thread_time()
    end = c0 + seconds
    x = 0
    while time.thread_time() < end:
        for i in range(200):
            x += i * i
    t.add("spin", time.perf_counter() - w0, time.thread_time() - c0)
    return x


def nap(seconds, t: Truth):
    w0, c0 = time.perf_counter(), time.thread_time()
    time.sleep(seconds)
    t.add("nap", time.perf_counter() - w0, time.thread_time() - c0)


def wait_lock(lock, go, held, t: Truth):
    w0, c0 = time.perf_counter(), time.thread_time()
    go.set()
    held.wait()
    held.clear()
    lock.acquire()
    lock.release()
    t.add("wait_lock", time.perf_counter() - w0, time.thread_time() - c0)


def wait_turn(go, t: Truth):
    w0, c0 = time.perf_counter(), time.thread_time()
    go.wait()
    go.clear()
    t.add("wait_turn", time.perf_counter() - w0, time.thread_time() - c0)


def hold(lock, held, seconds, t: Truth):
    w0, c0 = time.perf_counter(), time.thread_time()
    with lock:
        held.set()
        time.sleep(seconds)
    t.add("hold", time.perf_counter() - w0, time.thread_time() - c0)


def holder_loop(state, lock_s, out):
    t = Truth()
    w0, c0 = time.perf_counter(), time.thread_time()
    out["tid"] = threading.get_native_id()
    out["ident"] = threading.get_ident()  # the pthread id: py-spy's chrometrace names threads by it
    while True:
        wait_turn(state["go"], t)
        if state["stop"]:
            break
        hold(state["lock"], state["held"], lock_s, t)
    out["thread"] = [time.perf_counter() - w0, time.thread_time() - c0]
    out["functions"] = t.f


def main_loop(scenario: str, duration: float):
    (spin_s, nap_s, lock_s), (busy_s, sleep_s) = {**SCENARIOS, **PHASES}[scenario]
    lib = ctypes.CDLL(build_cworker())
    lib.cw_start.argtypes = [ctypes.c_double] * 3
    state = {"lock": threading.Lock(), "go": threading.Event(), "held": threading.Event(), "stop": False}
    holder_out: dict = {}
    th = threading.Thread(target=holder_loop, args=(state, lock_s, holder_out), name="holder")
    th.start()
    t = Truth()
    w0, c0 = time.perf_counter(), time.thread_time()
    lib.cw_start(busy_s, sleep_s, duration)
    while time.perf_counter() - w0 < duration:
        spin(spin_s, t)
        nap(nap_s, t)
        wait_lock(state["lock"], state["go"], state["held"], t)
    main = [time.perf_counter() - w0, time.thread_time() - c0]
    state["stop"] = True
    state["go"].set()
    th.join()
    res = (ctypes.c_double * 7)()
    lib.cw_join(res)
    return {
        "main": {"tid": threading.get_native_id(), "ident": threading.get_ident(), "thread": main, "functions": t.f},
        "holder": holder_out,
        "c": {"tid": int(res[6]), "thread": [res[4], res[5]],
              "functions": {"c_busy": [res[0], res[1]], "c_sleep": [res[2], res[3]]}},
    }



# ---------------------------------------------------------------------------------------------------
# Recording (in the child for in-process backends, in the parent for out-of-process ones)
# ---------------------------------------------------------------------------------------------------
def _options(spec: dict, **kw):
    from profmagic.backends.base import Options
    o = Options(rate=RATE, mode=spec.get("mode", "wall"), idle=spec.get("idle"),
                native=spec.get("native", False), all_threads=True, **kw)
    o.extra.update(spec.get("extra", {}))
    return o


def _backend(name: str):
    from profmagic import backends
    return backends.get(name)


def record_inprocess(spec: dict, work):
    mod = _backend(spec["backend"])
    opts = _options(spec)
    rec = mod.Recorder(opts)
    try:
        rec.start()
        truth = work()
        cap = rec.stop()
        prof = mod.read(cap, opts)
    finally:
        rec.close()
    return {"truth": truth, "profiles": {spec["label"]: prof}}


def run_config(spec: dict, scenario: str, duration: float, tmp: str) -> dict:
    """One fresh child per configuration. Returns {"truth", "profiles": {label: Profile}} or {"error"}."""
    out = os.path.join(tmp, "result.pkl")
    log = os.path.join(tmp, "threads.jsonl")   # the child logs its threads, as under `profmagic record`
    inproc = spec.get("inprocess", False)
    # A configuration may run the workload under another interpreter (argv prefix, e.g. perf's names
    # need Python 3.13 -X perf_jit), and stop its recorders only once the child has exited.
    argv = list(spec.get("child_python") or [sys.executable])
    argv += [str(Path(__file__).resolve()), "--child", scenario, str(duration), out, log]
    if inproc:
        argv.append(json.dumps(spec))
    child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=str(ROOT))
    recs = []
    try:
        pid = int(child.stdout.readline().split()[1])
        if inproc:
            child.wait(timeout=duration * 6 + 60)
            with open(out, "rb") as f:
                return pickle.load(f)
        from profmagic import backends
        for sub in spec["record"]:  # out-of-process recorders, all running at once
            mod = _backend(sub["backend"])
            opts = _options(sub, pid=pid, thread_native_id=pid)
            opts.extra["thread_log"] = log
            recs.append((sub, mod, opts, backends.recorder(mod, opts)))
        for _, _, _, r in recs:
            r.start()
        went = time.monotonic()
        child.stdin.write("go\n")
        child.stdin.flush()
        child.stdout.readline()  # "done"
        done = time.monotonic()
        for _, _, _, r in recs:   # the workload's run, as `profmagic record` gives it
            if hasattr(r, "bounds"):
                r.bounds(start=went, end=done)
        if spec.get("stop_after_exit"):
            child.stdin.write("exit\n")
            child.stdin.flush()
            child.wait(timeout=60)
        caps = [(sub, mod, opts, r.stop()) for sub, mod, opts, r in recs]
        if not spec.get("stop_after_exit"):
            child.stdin.write("exit\n")
            child.stdin.flush()
            child.wait(timeout=60)
        with open(out, "rb") as f:
            res = pickle.load(f)
        res["profiles"] = {sub["label"]: mod.read(cap, opts) for sub, mod, opts, cap in caps}
        return res
    finally:
        for _, _, _, r in recs:
            r.close()
        if child.poll() is None:
            child.kill()
        child.wait()
        for s in (child.stdin, child.stdout):
            if s:
                s.close()


CONFIGS = [
    {"name": "sampler", "inprocess": True, "backend": "sampler", "mode": "both", "label": "sampler"},
    {"name": "py-spy pair", "record": [
        {"backend": "py-spy", "idle": True, "label": "py-spy --idle"},
        {"backend": "py-spy", "idle": False, "label": "py-spy (no --idle)"}]},
    {"name": "py-spy timed", "record": [
        {"backend": "py-spy", "idle": True, "extra": {"timing": "timed"}, "label": TIMED},
        {"backend": "py-spy", "idle": True, "label": "py-spy --idle (same run as timed)"}]},
    {"name": "py-spy native", "record": [
        {"backend": "py-spy", "idle": True, "native": True, "label": "py-spy --idle --native"}]},
    {"name": "eu-stack", "record": [{"backend": "eu-stack", "mode": "both", "label": "eu-stack"}]},
    # perf names Python functions only through CPython's perf support: 3.13's -X perf_jit gives whole
    # mixed stacks (3.12's trampoline stops the unwind at the innermost Python frame), and its jitdump
    # is complete once the child exits, so perf is stopped after that.
    {"name": "perf both", "child_python": [PY313, "-X", "perf_jit"], "stop_after_exit": True,
     "record": [{"backend": "perf", "mode": "both", "label": "perf --mode both (3.13 -X perf_jit)"}]},
    {"name": "pyinstrument wall", "inprocess": True, "backend": "pyinstrument", "mode": "wall",
     "label": "pyinstrument wall"},
    {"name": "pyinstrument cpu", "inprocess": True, "backend": "pyinstrument", "mode": "cpu",
     "label": "pyinstrument cpu"},
    {"name": "cProfile wall", "inprocess": True, "backend": "cprofile", "mode": "wall", "label": "cProfile wall"},
    {"name": "cProfile cpu", "inprocess": True, "backend": "cprofile", "mode": "cpu", "label": "cProfile cpu"},
]


def calibrated(p, truth: dict, metric: str):
    """As recording.py does for py-spy: every sample weighs the main thread's measured seconds (wall
    with --idle, CPU without) over its sample count, counting only samples inside main_loop."""
    import numpy as np
    sel = _thread_rows(p, "main", truth["main"]["tid"])
    names = p.frames["name"]
    has = np.array([any(_name_is(names[f], "main_loop") for f in s) for s in p.stacks["stack"]], bool)
    n = float(p.stacks["samples"].to_numpy()[sel & has].sum())
    if not n:
        return None
    seconds = truth["main"]["thread"][0 if metric == "wall" else 1]
    st = p.stacks.assign(**{metric: p.stacks["samples"].to_numpy(float) * seconds / n})
    return p.replace(stacks=st, meta=p.meta.replace(**calibration_meta(p, n, seconds, metric)), metric=metric)


def calibration_meta(p, n: float, seconds: float, metric: str) -> dict:
    """The meta calibrate_to_cell writes: the thread's reached rate, the asked one and (wall) its seconds."""
    asked = float(p.meta.get("requested_rate") or p.meta.get("rate") or RATE)
    return dict(calibrated=True, rate=n / seconds, requested_rate=asked,
                **({"calibrated_wall": float(seconds)} if metric == "wall" else {}))


def derived(profiles: dict, truth: dict) -> dict:
    """Add the two py-spy CPU methods: (a) combine two recordings, (b) classify native leaves; and
    py-spy calibrated to the measured time of the main thread, as the magic does for the cell."""
    from _native_leaves import classify_native
    from profmagic.transforms import combine_idle
    out = dict(profiles)
    w, c = profiles.get("py-spy --idle"), profiles.get("py-spy (no --idle)")
    if w is not None and c is not None:
        wc, cc = calibrated(w, truth, "wall"), calibrated(c, truth, "cpu")
        if wc is not None and cc is not None:
            out["py-spy both (a), calibrated as in %%profile"] = combine_idle(wc, cc)
    same = profiles.get("py-spy --idle (same run as timed)")
    if same is not None:
        sc = calibrated(same, truth, "wall")
        if sc is not None:
            out[CALIBRATED] = sc
    nat = profiles.get("py-spy --idle --native")
    if nat is not None:
        nc = calibrated(nat, truth, "wall")
        if nc is not None:
            out["py-spy both (b), calibrated as in %%profile"] = classify_native(nc)
    if "py-spy --idle" in profiles and "py-spy (no --idle)" in profiles:
        out["py-spy both (a: two recordings)"] = combine_idle(
            profiles["py-spy --idle"], profiles["py-spy (no --idle)"])
    if "py-spy --idle --native" in profiles:
        out["py-spy both (b: native leaves)"] = classify_native(profiles["py-spy --idle --native"])
    return out


# ---------------------------------------------------------------------------------------------------
# Scoring
# ---------------------------------------------------------------------------------------------------
def _name_is(name: str, fn: str) -> bool:
    n = str(name)
    return n == fn or n.endswith("." + fn) or n.endswith("(" + fn + ")") or n.split(" ", 1)[0] == fn


def _thread_rows(p, th: str, tid: int):
    t = p.thread_table
    labels = t.loc[t["tid"] == tid, "label"].tolist()
    if not labels and th == "main":
        labels = [t for t in p.threads if "MainThread" in str(t)] or (p.threads if len(p.threads) == 1 else [])
    if not labels and th == "holder":
        labels = [t for t in p.threads if '"holder"' in str(t) or str(t) == "holder"]
    return p.stacks["thread"].isin(labels).to_numpy()


def score(p, truth: dict, metric: str) -> list[dict]:
    import numpy as np
    if metric not in p.metrics:
        return []
    w = p.weights(metric).fillna(0.0).to_numpy(float)
    names = p.frames["name"]
    col = 0 if metric == "wall" else 1
    out = []
    for th, root in THREAD_ROOTS.items():
        t = truth[th]
        sel = _thread_rows(p, th, t["tid"])
        has = np.array([any(_name_is(names[f], root) for f in s) for s in p.stacks["stack"]], bool)
        rows = sel & has
        tw = t["thread"][col]
        if not rows.any():
            out.append({"thread": th, "function": "(thread)", "truth": tw, "est": float(w[sel].sum()) if sel.any() else float("nan"),
                        "note": "thread not seen" if not sel.any() else f"no {root} frame: whole recording"})
            continue
        est_tot = float(w[rows].sum())
        out.append({"thread": th, "function": "(thread)", "truth": tw, "est": est_tot, "note": ""})
        for fn in FUNCTIONS[th]:
            tf = t["functions"].get(fn, [0.0, 0.0])[col]
            hit = rows & np.array([any(_name_is(names[f], fn) for f in s) for s in p.stacks["stack"]], bool)
            ef = float(w[hit].sum())
            if metric == "wall":  # attribution: the function's share of the thread's estimated wall
                tru, est = 100.0 * tf / tw, (100.0 * ef / est_tot if est_tot else float("nan"))
            else:  # CPU seconds as a share of the thread's measured wall (a 4 ms CPU total is no base)
                tru, est = 100.0 * tf / t["thread"][0], 100.0 * ef / t["thread"][0]
            calls = t["functions"].get(fn, [0.0, 0.0, 0])[2:3]
            out.append({"thread": th, "function": fn, "truth": tru, "est": est, "note": "",
                        "calls": calls[0] if calls else None, "thread_wall": t["thread"][0]})
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--backends", default=",".join(c["name"] for c in CONFIGS))
    ap.add_argument("--duration", type=float, default=DURATION)
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--json", help="also dump every row here")
    ap.add_argument("--timed", action="store_true",
                    help="only py-spy timed against py-spy calibrated (issue 18), --repeat times per --rates; "
                         "writes its own section of RESULTS.md")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rates", default="100,250")
    ap.add_argument("--report-from", metavar="JSON", help="with --timed: write the section again from a run "
                                                           "saved with --json (its own command, date and load)")
    a = ap.parse_args(argv)
    if a.timed and a.report_from:
        with open(a.report_from) as f:
            saved = json.load(f)
        for k, v in saved["args"].items():
            setattr(a, k, v)
        text = timed_report(saved["rows"], a, saved["run"])
        print(text)
        if not a.no_write:
            from results import write_section as write_results
            write_results(text)
        return 0
    build_cworker()
    if a.timed:
        return timed_main(a)
    rows, missing = [], {}
    t0 = time.perf_counter()
    for scenario in a.scenarios.split(","):
        for cfg in CONFIGS:
            if cfg["name"] not in a.backends.split(","):
                continue
            subs = cfg.get("record") or [cfg]
            why = None
            for sub in subs:
                try:
                    ok, reason = _backend(sub["backend"]).available()
                except ModuleNotFoundError as e:
                    ok, reason = False, f"not built yet ({e.name})"
                if not ok:
                    why = f"{sub['backend']}: {reason}"
            if cfg.get("child_python") and not os.path.exists(cfg["child_python"][0]):
                why = f"no {cfg['child_python'][0]}"
            if why:
                missing[cfg["name"]] = why
                continue
            tmp = tempfile.mkdtemp(prefix="profmagic-gt-")
            try:
                res = run_config(cfg, scenario, a.duration, tmp)
            except Exception as e:  # one backend failing must not hide the others' figures
                missing[cfg["name"]] = f"{type(e).__name__}: {e}"
                continue
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            for label, p in derived(res["profiles"], res["truth"]).items():
                for metric in ("wall", "cpu"):
                    for r in score(p, res["truth"], metric):
                        r.update(scenario=scenario, backend=label, metric=metric,
                                 samples=p.sample_count, rate=p.meta.get("rate"))
                        rows.append(r)
            print(f"{scenario:11s} {cfg['name']:20s} done at {time.perf_counter() - t0:6.1f} s", flush=True)
    elapsed = time.perf_counter() - t0
    text = report(rows, missing, a, elapsed)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "missing": missing}, f, indent=1, default=str)
    partial = a.scenarios != ",".join(SCENARIOS) or a.backends != ",".join(c["name"] for c in CONFIGS)
    if partial and not a.no_write:
        print("A partial run is not written to RESULTS.md (it would replace the full tables); use --json.")
    elif not a.no_write:
        from results import write_section   # hand-written ### notes (findings) are kept
        write_section(text)
    return 0


def report(rows, missing, a, elapsed) -> str:
    import pandas as pd
    df = pd.DataFrame(rows)
    cmd = ".venv/bin/python bench/groundtruth.py"
    if a.scenarios != ",".join(SCENARIOS) or a.backends != ",".join(c["name"] for c in CONFIGS):
        cmd += f" --scenarios {a.scenarios} --backends '{a.backends}'"
    if a.duration != DURATION:
        cmd += f" --duration {a.duration}"
    L = ["## Accuracy against ground truth (issue 6)", "",
         f"Command: `{cmd}` ({elapsed:.0f} s; {time.strftime('%Y-%m-%d %H:%M')}, 2 shared cores, "
         f"python {sys.version.split()[0]}). Each workload runs {a.duration:g} s at {RATE:g} Hz requested "
         "in a fresh child per backend configuration; the truth is measured inside the workload "
         "(perf_counter/thread_time per call; CLOCK_MONOTONIC/CLOCK_THREAD_CPUTIME_ID in C).", "",
         "Scenarios, seconds per cycle: " + "; ".join(
             f"{k}: spin {v[0][0]*1e3:.1f} ms / nap {v[0][1]*1e3:.1f} ms / lock {v[0][2]*1e3:.1f} ms, "
             f"C thread busy {v[1][0]*1e3:.1f} ms / nanosleep {v[1][1]*1e3:.1f} ms" for k, v in SCENARIOS.items()), ""]
    if df.empty:
        L.append("No backend could record.")
    else:
        fn = df[df["function"] != "(thread)"].copy()
        fn["err"] = fn["est"] - fn["truth"]
        L += ["### Worst attribution error per backend and metric, over all scenarios (percentage points; wall: share "
              "of the thread's profiled wall time; cpu: CPU seconds as a share of the thread's measured wall time)", "",
              "| backend | metric | max abs error (pp) | mean abs error (pp) | functions scored |", "|---|---|---|---|---|"]
        g = fn.assign(a=fn["err"].abs()).groupby(["backend", "metric"], sort=False)["a"]
        for (b, m), s in g:
            L.append(f"| {b} | {m} | {s.max():.1f} | {s.mean():.1f} | {s.count()} |")
        th = df[df["function"] == "(thread)"].copy()
        th["pct"] = 100.0 * (th["est"] / th["truth"] - 1.0)
        L += ["", "### Each thread's seconds against its measured time (wall metric: wall; cpu metric: thread CPU)", "",
              "| scenario | backend | metric | thread | truth s | estimate s | diff % | note |", "|---|---|---|---|---|---|---|---|"]
        for r in th.itertuples():
            L.append(f"| {r.scenario} | {r.backend} | {r.metric} | {r.thread} | {r.truth:.3f} | "
                     f"{r.est:.3f} | {r.pct:+.1f} | {r.note} |")
        L += ["", "### Per function: truth, estimate and error (pp). wall: % of the thread's wall in the profile; "
              "cpu: the function's CPU seconds as % of the thread's measured wall", "",
              "| scenario | backend | metric | thread | function | truth % | estimate % | error pp |",
              "|---|---|---|---|---|---|---|---|"]
        for r in fn.itertuples():
            L.append(f"| {r.scenario} | {r.backend} | {r.metric} | {r.thread} | {r.function} | "
                     f"{r.truth:.1f} | {r.est:.1f} | {r.err:+.1f} |")
    if missing:
        L += ["", "Not measured: " + "; ".join(f"{k}: {v}" for k, v in missing.items())]
    return "\n".join(L) + "\n"


def timed_main(a) -> int:
    """py-spy timed (chrometrace, no calibration) against py-spy calibrated, both recording the same run."""
    global RATE
    cfg = next(c for c in CONFIGS if c["name"] == "py-spy timed")
    rows = []
    t0 = time.perf_counter()
    for rate in [float(r) for r in a.rates.split(",")]:
        RATE = rate
        for rep in range(a.repeat):
            for scenario in a.scenarios.split(","):
                tmp = tempfile.mkdtemp(prefix="profmagic-gt-")
                try:
                    res = run_config(cfg, scenario, a.duration, tmp)
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
                profiles = derived(res["profiles"], res["truth"])
                eff = float(profiles[TIMED].meta.get("rate") or rate)   # py-spy's own count over its seconds
                for label, p in profiles.items():
                    if label not in (TIMED, CALIBRATED):
                        continue
                    for r in score(p, res["truth"], "wall"):
                        if r["thread"] != "c":  # a C thread without Python state: py-spy does not see it
                            r.update(scenario=scenario, backend=label, rate=rate, run=rep, samples=p.sample_count,
                                     eff_rate=eff, timing=p.meta.get("timing"))
                            rows.append(r)
                print(f"{rate:g} Hz run {rep + 1}/{a.repeat} {scenario:11s} done at "
                      f"{time.perf_counter() - t0:6.1f} s", flush=True)
    run = {"elapsed": time.perf_counter() - t0, "when": time.strftime("%Y-%m-%d %H:%M"), "load": os.getloadavg()[0],
           "python": sys.version.split()[0]}
    text = timed_report(rows, a, run)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "run": run, "args": {"repeat": a.repeat, "rates": a.rates,
                                                          "duration": a.duration}}, f, indent=1, default=str)
    if not a.no_write:
        from results import write_section as write_results
        write_results(text)
    return 0


def expected_sd(r) -> float:
    """The share error (pp) that py-spy's sampling alone gives, one standard deviation. py-spy samples
    at exponentially distributed intervals (a Poisson process, its timer.rs), mean 1/rate:
    timed: each of the function's n calls starts and ends at the first sample after the true edge, each
    edge off by an Exp(1/rate) delay, so its seconds are off by sqrt(2n)/rate; calibrated: its sample
    count is Poisson, so its share p of N = wall x rate samples is off by sqrt(p(1-p)/N)."""
    import math
    rate, wall, p = float(r["eff_rate"]), float(r["thread_wall"]), float(r["truth"]) / 100.0
    if r["method"] == "timed":
        return 100.0 * math.sqrt(2.0 * float(r["calls"])) / rate / wall
    return 100.0 * math.sqrt(p * (1.0 - p) / (wall * rate))


def timed_report(rows, a, run: dict) -> str:
    import numpy as np
    import pandas as pd
    df = pd.DataFrame(rows)
    df["method"] = df["backend"].map({TIMED: "timed", CALIBRATED: "calibrated"})
    fn = df[df["function"] != "(thread)"].assign(err=lambda d: d["est"] - d["truth"])
    fn = fn.assign(sd=[expected_sd(r) for r in fn.to_dict("records")])
    th = df[df["function"] == "(thread)"].assign(pct=lambda d: 100.0 * (d["est"] / d["truth"] - 1.0))
    cmd = (f"cd /work/main && .venv/bin/python bench/groundtruth.py --timed --repeat {a.repeat} --rates {a.rates}"
           + (f" --duration {a.duration:g}" if a.duration != DURATION else ""))
    timings = sorted(set(df.loc[df["method"] == "timed", "timing"].dropna()))
    L = ["## py-spy timed (chrometrace) against py-spy calibrated (issue 18)", "",
         f"Command: `{cmd}` ({run['elapsed']:.0f} s; {run['when']}, 2 cores shared with other "
         f"test runs, load average {run['load']:.1f} at the end, python {run['python']}"
         + ("; this text written from its --json by `--timed --report-from`" if getattr(a, "report_from", None) else "")
         + "). "
         f"Each run records the ground-truth workload ({a.duration:g} s, see the accuracy section) in a fresh "
         "child with two py-spy at once, both `--idle`, through the real backend as `profmagic record` uses it "
         "(the child logs its threads, the recorders get the run's bounds): `backends.pyspy` with "
         f"`timing=\"timed\"` (labelled {', '.join(repr(t) for t in timings)}: chrometrace, each sample weighing "
         "the time to the next one on its thread, nothing calibrated), and the default speedscope recording, "
         "every sample weighing the main thread's measured seconds over its sample count (as `%%profile` "
         "calibrates to the cell). Metric wall; the C thread has no Python state and py-spy does not see it.", "",
         "### Summary per method and rate", "",
         "| rate | method | max abs share error (pp) | mean abs (pp) | RMS (pp) | sampling alone, 1 sd (pp, RMS) "
         "| thread seconds: max abs diff % | within 1% | rate reached (median) | runs |",
         "|---|---|---|---|---|---|---|---|---|---|"]
    for (rate, method), g in fn.groupby(["rate", "method"], sort=True):
        t = th[(th["rate"] == rate) & (th["method"] == method)]["pct"]
        L.append(f"| {rate:g} Hz | {method} | {g['err'].abs().max():.1f} | {g['err'].abs().mean():.2f} | "
                 f"{np.sqrt((g['err'] ** 2).mean()):.2f} | {np.sqrt((g['sd'] ** 2).mean()):.2f} | "
                 f"{t.abs().max():.2f} | {int((t.abs() <= 1.0).sum())}/{len(t)} | {g['eff_rate'].median():.0f} Hz | "
                 f"{g['run'].nunique()} |")
    verdict = []
    for rate, g in fn[fn["method"] == "timed"].groupby("rate", sort=True):
        t = th[(th["rate"] == rate) & (th["method"] == "timed")]["pct"]
        worst, inside = g["err"].abs().max(), int((t.abs() <= 1.0).sum())
        miss = [f"shares by {worst - 3:.1f} pp" if worst > 3 else "",
                f"thread seconds in {len(t) - inside} of {len(t)} (worst {t.abs().max():.2f}%)" if inside < len(t) else ""]
        miss = [m for m in miss if m]
        verdict.append(f"{rate:g} Hz: worst share {worst:.1f} pp, thread seconds within 1% in {inside}/{len(t)} "
                       f"(worst {t.abs().max():.2f}%): " + ("met" if not miss else "missed: " + ", ".join(miss)))
    sd100 = fn[(fn["method"] == "timed") & (fn["rate"] == fn["rate"].min())]["sd"]
    hold = th[th["thread"] == "holder"]
    hold_by = {k: f"{int((g['pct'].abs() <= 1.0).sum())}/{len(g)}" for k, g in hold.groupby(["rate", "method"])}
    holder_worst = {m: float(g["pct"].abs().max()) for m, g in hold.groupby("method")}
    worst_t = fn[fn["method"] == "timed"].loc[lambda d: d["err"].abs().idxmax()]
    worst_c = fn[fn["method"] == "calibrated"].loc[lambda d: d["err"].abs().idxmax()]
    L += ["", "Targets (issue 18), for py-spy timed without calibrating: share error ≤ 3 pp for every function in "
          "every mix, and each thread's seconds within 1% of its measured wall time. " + "; ".join(verdict) + ".", "",
          "Where the error comes from:", "",
          "- Sampling alone. py-spy samples at exponentially distributed intervals (its timer.rs: a Poisson "
          "process of mean 1/rate, against aliasing). Timed, each call of a function starts and ends at the first "
          "sample after its true edges, each edge late by an Exp(1/rate) delay, so a function of n calls is off "
          "by sqrt(2n)/rate seconds; calibrated, its share is a Poisson count's, off by sqrt(p(1-p)/N). The "
          f"columns `sd` give this one standard deviation: {sd100.min():.1f}-{sd100.max():.1f} pp for timed at "
          f"{fn['rate'].min():g} Hz over {a.duration:g} s. The worst of 45 scored shares (3 runs x 15) falls "
          "near 2.5-3 sd by chance, so ≤ 3 pp everywhere needs an sd near 1 pp: more samples (a higher rate, "
          "or a longer run), not another reading of them.",
          "- A bias of about 1 pp that keeps its sign across runs (hold and wait_lock mostly +, wait_turn -), "
          "seen where sampling alone is small (the higher rates): py-spy stamps a sample when its main thread "
          "takes it from the sampler thread (`Instant::now()` in chrometrace's `increment`), not when the stack "
          "was read, and on two cores shared with the workload and other test runs that hand-over waits for a "
          "core. That this explains the signs is a reading, not measured directly.",
          f"- Outliers. The worst timed share here, {worst_t['function']} {worst_t['err']:+.1f} pp ({worst_t['scenario']}, "
          f"{worst_t['rate']:g} Hz, run {int(worst_t['run']) + 1}), is {abs(worst_t['err']) / worst_t['sd']:.1f} sd of "
          "sampling alone, with other functions of the same run moved the other way: a few hundred ms on the wrong "
          "side of some edges, more than sampling gives. Its cause is not identified. A candidate, not measured: "
          "when py-spy gets no core for a while, its next sample comes late and the stack before the stall gets "
          "the stall's whole length (counts only lose those samples, and calibrating hides the loss in the "
          "thread's total). Calibrated has outliers of a like size "
          f"(worst {worst_c['function']} {worst_c['err']:+.1f} pp, {worst_c['scenario']}, {worst_c['rate']:g} Hz).",
          "- Thread seconds. A thread's timed stretches follow each other, so their sum is exact up to its two ends: "
          "the run's bounds and a thread's end (from its thread log) are put on py-spy's clock through when py-spy "
          "was started and when it said it samples (see \"py-spy's timed trace on this process's clock\": a few ms, "
          "at most 12 ms in the runs measured; 1% of 5 s is 50 ms). Calibrating scales every thread by the main "
          "thread's factor, which does not fit the others: the holder thread was within 1% in " + ", ".join(
              f"{r:g} Hz {hold_by[(r, 'timed')]} timed / {hold_by[(r, 'calibrated')]} calibrated"
              for r in sorted(hold["rate"].unique())) + f" (worst {holder_worst['timed']:.2f}% timed, "
          f"{holder_worst['calibrated']:.2f}% calibrated).", "",
          "### Per function: share error (pp) of each run, timed / calibrated; 1 sd from sampling alone", "",
          "| rate | scenario | thread | function | truth % | calls | timed, per run | sd | calibrated, per run | sd |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    key = ["rate", "scenario", "thread", "function"]
    for k, g in fn.groupby(key, sort=False):
        runs = {m: " ".join(f"{e:+.1f}" for e in g[g["method"] == m].sort_values("run")["err"])
                for m in ("timed", "calibrated")}
        sd = {m: g.loc[g["method"] == m, "sd"].mean() for m in ("timed", "calibrated")}
        L.append(f"| {k[0]:g} Hz | {k[1]} | {k[2]} | {k[3]} | {g['truth'].mean():.1f} | {g['calls'].mean():.0f} | "
                 f"{runs['timed']} | {sd['timed']:.1f} | {runs['calibrated']} | {sd['calibrated']:.1f} |")
    L += ["", "### Each thread's seconds against its measured wall time: diff % of each run, timed / calibrated", "",
          "| rate | scenario | thread | truth s (mean) | timed, per run | calibrated, per run |", "|---|---|---|---|---|---|"]
    for k, g in th.groupby(["rate", "scenario", "thread"], sort=False):
        runs = {m: " ".join(f"{e:+.2f}" for e in g[g["method"] == m].sort_values("run")["pct"])
                for m in ("timed", "calibrated")}
        L.append(f"| {k[0]:g} Hz | {k[1]} | {k[2]} | {g['truth'].mean():.3f} | {runs['timed']} | {runs['calibrated']} |")
    return "\n".join(L) + "\n"


def child_main(argv):
    """--child SCENARIO DURATION OUT THREAD_LOG [BACKEND_JSON]: run the workload; with a backend, record
    it in-process. Its threads go to THREAD_LOG (py-spy's timed format names them by pthread id)."""
    scenario, duration, out = argv[0], float(argv[1]), argv[2]
    inproc = json.loads(argv[4]) if len(argv) > 4 else None
    from profmagic.threads import log_threads
    log_threads(argv[3])
    print("ready", os.getpid(), flush=True)
    if inproc is None:
        sys.stdin.readline()  # the parent's out-of-process profiler is sampling
        truth = main_loop(scenario, duration)
        result = {"truth": truth}
    else:
        result = {"truth": None}
        result.update(record_inprocess(inproc, lambda: main_loop(scenario, duration)))
    with open(out, "wb") as f:
        pickle.dump(result, f)
    print("done", flush=True)
    if inproc is None:
        sys.stdin.readline()  # stay alive until the profiler has stopped


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "--child":
    child_main(sys.argv[2:])
    sys.exit(0)


if __name__ == "__main__":
    sys.exit(main())

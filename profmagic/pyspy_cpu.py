"""CPU and off-CPU time from py-spy, whose record formats never mark idle samples (issue 6).

Two ways, both pure functions over Profiles (measured in bench/groundtruth.py, see RESULTS.md):

- ``combine_idle(wall, cpu)`` (chosen): two py-spy recordings of the same run, one with ``--idle``
  (every sample: wall) and one without (idle samples dropped: on-CPU). Per (thread, stack): wall
  from the first, cpu from the second's sample count times the first's seconds per sample.
- ``classify_native(profile)``: one ``--idle --native`` recording; a sample whose leaf native frame
  is a blocking call (clock_nanosleep, futex, poll...) is off-CPU, others on-CPU. Leaves that py-spy
  cannot symbolise (bare addresses) cannot be classified; they count as on-CPU and are reported.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from .profile import Profile, StackBuilder

# Leaf functions (libc/kernel entry points) where a thread sleeps or blocks.
BLOCKING = {
    "clock_nanosleep", "nanosleep", "__clock_nanosleep", "__GI___clock_nanosleep", "usleep", "sleep",
    "futex", "futex_wait", "__futex_abstimed_wait_common", "__futex_abstimed_wait_common64",
    "futex_abstimed_wait_cancelable", "__lll_lock_wait", "pthread_cond_wait", "pthread_cond_timedwait",
    "___pthread_cond_wait", "___pthread_cond_timedwait", "__pthread_cond_wait", "sem_wait",
    "sem_timedwait", "sem_clockwait", "do_futex_wait", "__new_sem_wait_slow64",
    "epoll_wait", "epoll_pwait", "poll", "ppoll", "__poll", "select", "pselect", "__select",
    "read", "__libc_read", "recv", "recvfrom", "recvmsg", "__libc_recv", "accept", "accept4",
    "wait4", "waitpid", "__waitpid", "waitid", "pause", "sigwait", "sigtimedwait", "connect",
}
_ADDRESS = re.compile(r"^(0x)?[0-9a-f]{6,}$", re.I)


def _key_frames(p: Profile):
    fr = p.frames
    return {fid: (n, f, None if pd.isna(l) else int(l), str(k))
            for fid, n, f, l, k in zip(fr.index, fr["name"], fr["file"], fr["line"], fr["kind"])}


def _per_sample_seconds(p: Profile) -> dict[str, float]:
    """Seconds one sample stands for, per thread: its wall (or cpu) weight over its sample count."""
    col = "wall" if "wall" in p.metrics else ("cpu" if "cpu" in p.metrics else None)
    rate = float(p.meta.get("rate") or 100.0)
    out = {}
    for th, g in p.stacks.groupby("thread", sort=False):
        n = float(g["samples"].sum())
        w = float(g[col].sum()) if col else n / rate
        out[th] = w / n if n else 1.0 / rate
    return out


def combine_idle(wall: Profile, cpu: Profile, cpu_weights: bool | None = None) -> Profile:
    """One Profile with ``wall``, ``cpu`` (and so ``off_cpu``) per stack, from a py-spy ``--idle``
    recording (``wall``) and one without ``--idle`` (``cpu``) of the same run.

    A cpu recording calibrated to the cell's measured CPU time (``meta["calibrated"]``) keeps its
    weights; otherwise both count samples at the same rate, so its samples are weighted by the wall
    recording's seconds per sample of the same thread. A stack seen only by the cpu recording is
    kept with wall = cpu. ``cpu_weights=True`` keeps the cpu profile's own weights (merge_runs).
    """
    sps = _per_sample_seconds(wall)
    rate = float(wall.meta.get("rate") or 100.0)
    b = StackBuilder()
    for th in list(wall.threads) + [t for t in cpu.threads if t not in set(wall.threads)]:
        b.thread(th)
    acc: dict[tuple, list[float]] = {}
    wall_col = "wall" if "wall" in wall.metrics else None
    # A cpu recording calibrated to the cell's measured CPU time (recording.py) keeps its own weights.
    if cpu_weights is None:
        cpu_weights = bool(cpu.meta.get("calibrated"))
    cpu_col = "cpu" if cpu_weights and "cpu" in cpu.metrics else None
    for which, p in ((0, wall), (1, cpu)):
        frames = _key_frames(p)
        col = wall_col if which == 0 else cpu_col
        ws = p.stacks[col].to_numpy(float) if col else None
        for i, (th, st, n) in enumerate(zip(p.stacks["thread"], p.stacks["stack"], p.stacks["samples"])):
            key = (th, tuple(frames[f] for f in st))
            v = acc.setdefault(key, [0.0, 0.0, 0.0, False])  # wall s, cpu s, wall samples, seen in wall
            if which == 0:
                v[0] += ws[i] if ws is not None else n * sps.get(th, 1.0 / rate)
                v[2] += n
                v[3] = True
            else:
                v[1] += ws[i] if ws is not None else n * sps.get(th, 1.0 / rate)
    cpu_only = 0.0
    for (th, frames), (w, c, n, seen) in acc.items():
        if not seen:  # the wall recording missed this stack: it ran, so its wall is at least its cpu
            cpu_only += c
            w = c
        sid = b.stack(th, [b.frame(*f) for f in frames])
        b.add(sid, samples=n if seen else max(1, int(round(c / sps.get(th, 1.0 / rate)))), wall=w, cpu=c)
    meta = {k: v for k, v in wall.meta.items() if k not in ("threads", "metric")}
    meta.update(mode="both", metric="wall", cpu_method=(
        "two py-spy recordings at once, --idle (wall) and without (cpu)"
        + ("; cpu calibrated to the cell's CPU time" if cpu_col else
           "; cpu = non-idle samples x the --idle recording's seconds per sample")),
        cpu_only_seconds=cpu_only, cpu_samples=int(cpu.stacks["samples"].sum()),
        approximate="py-spy's idle detection decides on/off-CPU")
    return b.build(metric="wall", meta=meta, raw=wall.raw)


def merge_runs(wall: Profile, cpu: Profile) -> Profile:
    """``--mode both --rerun`` for one-clock backends: wall from the first run, cpu from the second,
    matched by (thread, stack). A stack seen only in the cpu run keeps wall = cpu."""
    p = combine_idle(wall, cpu, cpu_weights=True)
    meta = {k: v for k, v in wall.meta.items() if k not in ("threads", "metric", "message")}
    meta.update(mode="both", metric="wall", runs=2, cell_cpu=cpu.meta.get("cell_cpu"),
                cpu_run={k: cpu.meta.get(k) for k in ("cell_wall", "cell_cpu", "sample_count", "timer")},
                cpu_method=("two runs of the code: wall time from the first run, CPU time from the second, "
                            "matched by stack"),
                approximate="wall and CPU time come from two separate runs of the code (--rerun)",
                cpu_only_seconds=p.meta.get("cpu_only_seconds"))
    if "calls" in wall.stacks:
        meta["calls_note"] = "call counts are in each run's own profile; the merged one keeps samples"
    return p.replace(meta=meta)


def is_blocking(name: str) -> bool | None:
    """True for a blocking leaf, False for another named leaf, None for a bare address."""
    n = str(name).split(" (", 1)[0].strip()
    if _ADDRESS.match(n):
        return None
    return n in BLOCKING or n.lstrip("_") in BLOCKING


def classify_native(profile: Profile, strip_native: bool = False) -> Profile:
    """cpu = wall for samples whose leaf is not a blocking call, 0 for those whose leaf is.

    ``profile`` is a py-spy ``--idle --native`` recording. With ``strip_native``, native frames are
    dropped after classification (Python frames only, as without --native).
    """
    w = profile.weights("wall" if "wall" in profile.metrics else "samples").to_numpy(float)
    frames = _key_frames(profile)
    b = StackBuilder()
    for th in profile.threads:
        b.thread(th)
    unknown = 0.0
    for th, st, n, x in zip(profile.stacks["thread"], profile.stacks["stack"], profile.stacks["samples"], w):
        leaf = frames[st[-1]] if st else None
        blocking = is_blocking(leaf[0]) if leaf and leaf[3] != "python" else False
        if blocking is None:
            unknown += x
        keep = [f for f in st if not (strip_native and frames[f][3] == "native")]
        sid = b.stack(th, [b.frame(*frames[f]) for f in keep])
        b.add(sid, samples=n, wall=x, cpu=0.0 if blocking else x)
    meta = {k: v for k, v in profile.meta.items() if k not in ("threads", "metric")}
    total = float(np.nansum(w)) or 1.0
    meta.update(mode="both", metric="wall", cpu_method="py-spy --idle --native; leaf frame classified",
                unclassified_share=unknown / total,
                approximate="leaf-frame classification; unsymbolised leaves count as on-CPU")
    return b.build(metric="wall", meta=meta, raw=profile.raw)


def runnable_seconds(cpu: float, wall: float, delay: float | None) -> float:
    """Time a thread was in state R (on a core or waiting for one): CPU + run-queue wait, at most wall."""
    return wall if delay is None else min(wall, cpu + delay)


def calibrate_both(profile: Profile, thread: str, wall_s: float, cpu_s: float,
                   requested: float | None = None, run_delay: float | None = None) -> Profile:
    """Scale the wall and cpu columns so that ``thread`` (the cell's) sums to its measured ``wall_s``
    and ``cpu_s``, as recording.py calibrates one-metric py-spy profiles. Raw counts stay.

    The --idle recording samples the thread at every tick, so its samples over ``wall_s`` are the
    per-thread effective rate (``meta["rate"]``). The cpu column gets its own factor only when the
    thread has 5 or more on-CPU samples over at least 5 sampling periods of CPU, at no more than 4x
    that rate over the time it was runnable: py-spy counts a thread waiting for a core as active, so
    the bound is over CPU + ``run_delay`` (its run-queue seconds, recording.run_delay), or over
    ``wall_s`` when that is unknown. Otherwise (a cell thread that mostly waits for threads it
    started) the wall factor, as both py-spy tick together."""
    st = profile.stacks.copy()
    mine = (st["thread"] == thread).to_numpy()
    meta = dict(profile.meta)
    requested = float(requested or meta.get("requested_rate") or meta.get("rate") or 100.0)
    n_wall = float(st.loc[mine, "samples"].sum())
    have_wall = float(np.nansum(st.loc[mine, "wall"]))
    have_cpu = float(np.nansum(st.loc[mine, "cpu"]))
    meta.update(requested_rate=requested, calibrated=False, calibrated_against=thread)
    if n_wall < 5 or have_wall <= 0 or not wall_s or wall_s <= 0:
        meta.update(rate=requested, calibration_note=(
            f"not calibrated: the cell's thread has {n_wall:.0f} samples (under 5); weights are 1/requested rate"))
        return profile.replace(stacks=st, meta=meta)
    k_wall = wall_s / have_wall
    n_cpu = have_cpu * n_wall / have_wall   # cpu weights are samples x the wall recording's s/sample
    eff = n_wall / wall_s
    runnable = runnable_seconds(cpu_s or 0.0, wall_s, run_delay)
    if n_cpu >= 5 and cpu_s and cpu_s >= 5 / requested and n_cpu / runnable <= 4 * eff:
        k_cpu = cpu_s / have_cpu
        meta["calibrated_cpu"] = float(cpu_s)
    else:
        k_cpu = k_wall
        meta["cpu_calibration_note"] = (
            f"cpu weighted at the wall rate: the cell's thread has {n_cpu:.0f} on-CPU samples for "
            f"{cpu_s:.3f} s of CPU, too few or too many to calibrate on")
    st["wall"] = st["wall"] * k_wall
    st["cpu"] = st["cpu"] * k_cpu
    meta.update(calibrated=True, calibrated_wall=float(wall_s), rate=eff, calibrated_rate=eff)
    return profile.replace(stacks=st, meta=meta)


class PairRecorder:
    """The Recorder interface (backends/base.py) over two py-spy recorders run at once: one with
    ``--idle`` and one without. ``stop()`` returns one Capture holding both; ``read_pair`` combines."""

    def __init__(self, options):
        from dataclasses import replace
        from .backends import pyspy
        self.options = options
        self.wall_options = replace(options, idle=True, gil=False, native=False, extra=dict(options.extra))
        self.cpu_options = replace(options, idle=False, gil=False, native=False, extra=dict(options.extra))
        self.recorders = [pyspy.Recorder(self.wall_options), pyspy.Recorder(self.cpu_options)]

    def start(self) -> None:
        try:
            for r in self.recorders:
                r.start()
        except BaseException:
            self.close()
            raise

    def stop(self):
        from .backends.base import Capture
        wall, cpu = (r.stop() for r in self.recorders)
        return Capture(None, "py-spy-pair", {"wall": wall, "cpu": cpu})

    def close(self) -> None:
        for r in self.recorders:
            r.close()


def read_pair(capture, options) -> Profile:
    """The Profile of a PairRecorder capture: wall, cpu and off_cpu per stack (method a)."""
    from dataclasses import replace
    from .backends import pyspy
    wall = pyspy.read(capture.meta["wall"], replace(options, idle=True, gil=False, native=False))
    cpu = pyspy.read(capture.meta["cpu"], replace(options, idle=False, gil=False, native=False))
    return combine_idle(wall, cpu)

"""Worker payloads (cluster/worker.py) into one multi-process Profile: one rank per worker plus the
driver. Knows pandas and the model; knows no engine, no plotly, no IPython.

Every stack row of a worker carries a ``task`` column (the task prefix its thread was running, or
None); ``rank`` and ``process`` name the worker. ``meta["processes"][label]`` says per rank: role
(driver/worker), engine, pid, host, status (``ok``, ``ended``, ``unreachable``, ``error``) and the
engine's error where there is one. A rank that could not be reached has no rows, only that entry.
"""
from __future__ import annotations

import json
import math
import zlib

from ..errors import ProfileFormatError, ProfilerError
from ..multi import concat, process_label, with_process
from ..profile import Profile, StackBuilder
from ..threads import thread_label
from .worker import PAYLOAD_VERSION

TASK = "task"
BACKEND = "cluster sampler"


def decode(data: bytes, source: str = "<worker>") -> dict:
    try:
        raw = zlib.decompress(data)
    except zlib.error as e:
        raise ProfileFormatError(f"expected a zlib-compressed worker payload ({e})", source=source, offset=0) from None
    try:
        doc = json.loads(raw)
    except ValueError as e:
        raise ProfileFormatError(f"expected JSON inside the worker payload ({e})", source=source,
                                 offset=getattr(e, "pos", None)) from None
    if not isinstance(doc, dict) or doc.get("v") != PAYLOAD_VERSION:
        raise ProfileFormatError(f"expected a worker payload with \"v\": {PAYLOAD_VERSION}", source=source, where="v")
    return doc


def read_payload(data: bytes, source: str = "<worker>", t0: float | None = None) -> Profile:
    """One worker's payload as a Profile: every row's weights as the worker summed them; the kept
    samples (every ``stride``-th pass) time-ordered, their times from ``t0`` (epoch seconds; default
    the worker's own start)."""
    doc = decode(data, source)
    b = StackBuilder()
    where = "frames"
    try:
        fids = [b.frame(str(n), str(f), int(ln) if ln is not None else None, "python") for n, f, ln in doc["frames"]]
        where = "threads"
        labels = [thread_label(nid, name) for nid, name in doc["threads"]]
        tasks = [str(t) for t in doc["tasks"]]
        where = "stacks"
        rows = []
        for th, task, stack, n, wall, cpu in doc["stacks"]:
            rows.append((b.stack(labels[th], [fids[i] for i in stack], task=tasks[task] if task >= 0 else None),
                         float(n), float(wall), float(cpu)))
        where = "samples"
        kept = [[0.0, 0.0, 0.0] for _ in rows]
        samples = []
        for t, row, wall, cpu in doc["samples"]:
            k = kept[row]
            k[0] += 1
            k[1] += wall
            k[2] += cpu or 0.0
            samples.append((float(t), row, float(wall), math.nan if cpu is None else float(cpu)))
        offset = 0.0 if t0 is None else float(doc["t0"]) - float(t0)
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise ProfileFormatError(f"expected the worker payload's {where} ({type(e).__name__}: {e})",
                                 source=source, where=where) from None

    def rest(total, part):   # float sums: what the kept samples do not account for, never below 0
        r = total - part
        return r if r > 1e-9 else 0.0
    for (sid, n, wall, cpu), (kn, kw, kc) in zip(rows, kept):
        if n > kn:
            b.add(sid, samples=n - kn, wall=rest(wall, kw), cpu=rest(cpu, kc))
        else:   # create the columns for a row whose samples are all in the list
            b.add(sid, samples=0, wall=0.0, cpu=0.0)
    for t, row, wall, cpu in samples:
        b.add(rows[row][0], samples=1, time=t + offset, wall=wall, cpu=cpu)
    info = doc.get("info") or {}
    meta = {"backend": BACKEND, "rate": doc.get("rate"), "pid": doc.get("pid"), "host": doc.get("host"),
            "duration": doc.get("duration"), "passes": doc.get("passes"), "threads_mode": doc.get("threads_mode"),
            "samples_kept_every": doc.get("stride"), "other_cpu": doc.get("other_cpu"),
            "task_keys": doc.get("task_keys") or {}, "ended": doc.get("ended"), "error": doc.get("error"),
            "engine": info.get("engine"), "worker": info, "t0": doc.get("t0"), "payload_bytes": len(data),
            "note": ("wall = time since the worker's previous sampling pass; cpu = the thread's CPU clock over it; "
                     "stack rows hold every sample, the time-ordered samples every "
                     f"{doc.get('stride', 1)}th pass")}
    return b.build(metric="wall", meta=meta, unknown_metrics=("wall", "cpu"))  # columns even when empty


def worker_label(result: dict, p: Profile | None = None) -> str:
    """``pid 123 · dask worker 0`` / ``pid 123 · ray node 10.0.0.2 · actor Counter``."""
    pid = result.get("pid") if result.get("pid") is not None else (p.meta.get("pid") if p is not None else None)
    return process_label(pid, result.get("label") or f"{result.get('engine', 'dask')} worker {result.get('name')}")


def assemble(results: list[dict], driver: Profile | None = None, *, engine: str, t0: float | None = None,
             driver_pid: int | None = None, driver_name: str = "driver") -> Profile:
    """One Profile: the driver (if recorded) and one rank per worker result.

    ``results``: dicts with ``status`` (ok, ended, unreachable, error), ``payload`` bytes where the
    worker sent or left one, ``error`` (the engine's words), and ``name``/``label``/``pid``/``host``.
    ``t0`` is the driver's start in epoch seconds: worker sample times are shifted onto it.
    """
    parts, labels, missing = [], [], {}
    if driver is not None:
        lab = process_label(driver_pid if driver_pid is not None else driver.meta.get("pid"), driver_name)
        parts.append(with_process(driver, lab, {"role": "driver", "pid": driver.meta.get("pid"),
                                                "backend": driver.meta.get("backend"), "status": "ok"}))
        labels.append(lab)
    for r in results:
        r = {**r, "engine": r.get("engine", engine)}
        p = None
        if r.get("payload") is not None:
            p = read_payload(r["payload"], source=f"{engine} worker {r.get('name')}", t0=t0)
        lab = worker_label(r, p)
        info = {"role": "worker", "engine": engine, "status": r.get("status", "ok"),
                "pid": r.get("pid", p.meta.get("pid") if p is not None else None),
                "host": r.get("host") or (p.meta.get("host") if p is not None else None),
                "name": r.get("name"), "address": r.get("address"), "backend": BACKEND}
        for k in ("node", "actor", "error"):
            if r.get(k) is not None:
                info[k] = r[k]
        if p is None:
            missing[lab] = info
            continue
        info.update(rate=p.meta.get("rate"), samples=p.sample_count, payload_bytes=p.meta["payload_bytes"],
                    other_cpu=p.meta.get("other_cpu"), task_keys=p.meta.get("task_keys"),
                    samples_kept_every=p.meta.get("samples_kept_every"), duration=p.meta.get("duration"))
        if r.get("status") == "ended":
            info["ended"] = True
        if p.meta.get("error"):
            info["sampler_error"] = p.meta["error"]
        parts.append(with_process(p, lab, info))
        labels.append(lab)
    if not parts:
        raise ProfilerError("profmagic: no worker could be recorded: "
                            + "; ".join(f"{k}: {v.get('error')}" for k, v in missing.items()))
    merged = concat(parts, key="rank", labels=labels)
    st = merged.stacks
    if TASK not in st:
        st = st.assign(**{TASK: None})
    st[TASK] = st[TASK].astype(object).where(st[TASK].notna(), None)
    procs = {**merged.meta["processes"], **missing}
    meta = {**merged.meta, "processes": procs, "engine": engine, "cluster": {
        "engine": engine, "workers": sum(1 for v in procs.values() if v.get("role") == "worker"),
        "unreachable": [k for k, v in procs.items() if v.get("status") in ("unreachable", "error")],
        "ended": [k for k, v in procs.items() if v.get("status") == "ended"]}}
    if driver is not None:
        for k in ("cell", "partial", "cell_wall", "cell_cpu"):
            if driver.meta.get(k) is not None:
                meta[k] = driver.meta[k]
    metric = driver.metric if driver is not None else "wall"
    return merged.replace(stacks=st, meta=meta, metric=metric)

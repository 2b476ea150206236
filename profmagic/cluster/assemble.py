"""Worker payloads (cluster/worker.py) into one multi-process Profile: one rank per worker plus the
driver. Knows pandas and the model; knows no engine, no plotly, no IPython.

Every stack row of a worker carries a ``task`` column (the task prefix its thread was running, or
None); ``rank`` and ``process`` name the worker. ``meta["processes"][label]`` says per rank: role
(driver/worker), engine, pid, host, status (``ok``, ``ended``, ``unreachable``, ``error``) and the
engine's error where there is one. A rank that could not be reached has no rows, only that entry.

The tables are built here in one pass (lists and numpy per rank), not with a Profile per worker
and ``multi.concat``: that path took 22 s for 1,000 workers, mostly pandas constructors (this one:
docs/scale.md). The result has the same columns ``concat(..., key="rank")`` gives.
"""
from __future__ import annotations

import json
import struct
import zlib

import numpy as np
import pandas as pd

from ..errors import ProfileFormatError, ProfilerError
from ..multi import process_label
from ..model import Profile, make_frames, thread_table, unique_labels
from ..threads import thread_label
from .channel import TooLarge, inflate
from .worker import MAGIC, PAYLOAD_VERSION, SAMPLE_ARRAYS

TASK = "task"
BACKEND = "cluster sampler"
DRIVER_META = ("cell", "partial", "cell_wall", "cell_cpu", "cell_run_delay", "pid", "mode", "requested_rate",
               "backend_choice", "versions", "message", "warnings")


def decode(data: bytes, source: str = "<worker>") -> dict:
    """A worker payload (cluster/worker.py): its JSON, with ``samples`` as numpy arrays. Decompressed
    within channel.inflate's limits (size and ratio): a zlib bomb is refused, not expanded."""
    try:
        raw = inflate(data)
    except TooLarge as e:
        raise ProfileFormatError(f"{e}: refused", source=source, offset=0) from None
    except zlib.error as e:
        raise ProfileFormatError(f"expected a zlib-compressed worker payload ({e})", source=source, offset=0) from None
    if raw[:4] != MAGIC or len(raw) < 8:
        raise ProfileFormatError(f"expected a worker payload starting with {MAGIC!r}", source=source, offset=0)
    n = struct.unpack("!I", raw[4:8])[0]
    try:
        doc = json.loads(raw[8:8 + n])
    except ValueError as e:
        raise ProfileFormatError(f"expected the worker payload's JSON ({e})", source=source,
                                 offset=8 + getattr(e, "pos", 0)) from None
    except RecursionError:
        raise ProfileFormatError("expected the worker payload's JSON, found it nested deeper than Python's "
                                 "recursion limit", source=source, offset=8) from None
    if not isinstance(doc, dict) or doc.get("v") != PAYLOAD_VERSION:
        raise ProfileFormatError(f"expected a worker payload with \"v\": {PAYLOAD_VERSION}", source=source, where="v")
    try:
        k = int(doc["n_samples"])
        if k < 0:
            raise ValueError(k)
        order = "<" if doc["byteorder"] == "little" else ">"
    except (KeyError, TypeError, ValueError):
        raise ProfileFormatError("expected n_samples and byteorder in the worker payload", source=source,
                                 where="n_samples") from None
    offset, samples = 8 + n, {}
    for name, code in SAMPLE_ARRAYS:
        dt = np.dtype(order + {"d": "f8", "i": "i4", "f": "f4"}[code])
        end = offset + k * dt.itemsize
        if end > len(raw):
            raise ProfileFormatError(f"expected {k} {name} values, the payload ends first", source=source,
                                     offset=len(raw))
        samples[name] = np.frombuffer(raw, dtype=dt, count=k, offset=offset)
        offset = end
    doc["samples"] = samples
    return doc


class _Tables:
    """The merged tables, filled rank by rank: frames unified by (name, file, line, kind), stack
    rows with their weights, time-ordered samples pointing at global rows. Columns are gathered
    as lists and numpy arrays and made into DataFrames once, so the driver's work grows with rows
    and samples, not with a DataFrame per worker."""

    def __init__(self):
        self.frame_ids: dict[tuple, int] = {}
        self.frames: list[tuple] = []
        self.driver: pd.DataFrame | None = None          # the driver's rows, with its own columns
        self.threads: list[dict] = []                    # the thread table's rows, rank by rank
        self.cols = {"thread": [], "stack": [], TASK: []}
        self.weights = {"samples": [], "wall": [], "cpu": []}
        self.sm = {"time": [], "stack": [], "wall": [], "cpu": []}
        self.driver_samples: pd.DataFrame | None = None
        self.rows = 0

    def frame(self, name, file, line, kind) -> int:
        key = (name, file or "", None if line is None or line != line else int(line), kind)
        i = self.frame_ids.get(key)
        if i is None:
            i = self.frame_ids[key] = len(self.frames)
            self.frames.append(key)
        return i

    def add_driver(self, p: Profile, label: str) -> None:
        ids = np.full(int(p.frames.index.max()) + 1 if len(p.frames) else 0, -1, dtype=np.int64)
        for fid, row in zip(p.frames.index, p.frames.itertuples(index=False)):
            ids[fid] = self.frame(row.name, row.file, row.line, str(row.kind))
        for row in p.thread_table.to_dict("records"):
            self.threads.append({**{k: (None if v is pd.NA else v) for k, v in row.items()},
                                 "process": label, "rank": label})
        self.driver = p.stacks.drop(columns=[c for c in ("process", "rank") if c in p.stacks]).assign(
            thread=p.thread_ids(), stack=pd.Series([tuple(ids[list(s)].tolist()) for s in p.stacks["stack"]],
                                                   dtype=object, index=p.stacks.index), **{TASK: None})
        self.driver_samples = None if p.samples is None else p.samples.drop(columns=["thread"])
        self.rows = len(self.driver)

    def add_payload(self, doc: dict, label: str, source: str, offset: float) -> None:
        where = "frames"
        try:
            ids = np.array([self.frame(str(n), str(f), ln, "python") for n, f, ln in doc["frames"]] or [0],
                           dtype=np.int64)
            where = "threads"
            first = len(self.threads)
            self.threads += [{"label": thread_label(nid, name), "tid": nid, "name": name, "pid": doc.get("pid"),
                              "process": label, "rank": label, "backend": BACKEND, "python": True}
                             for nid, name in doc["threads"]]
            tasks = [str(t) for t in doc["tasks"]] + [None]          # index -1: no task
            where = "stacks"
            rows = doc["stacks"]
            c = self.cols
            c["thread"] += [first + r[0] for r in rows]
            c["stack"] += [tuple(ids[r[2]].tolist()) for r in rows]
            c[TASK] += [tasks[r[1]] for r in rows]
            for i, k in ((3, "samples"), (4, "wall"), (5, "cpu")):
                self.weights[k].append(np.array([r[i] for r in rows], dtype=np.float64))
            where = "samples"
            sm = doc["samples"]
            rowix = sm["stack"].astype(np.int64)
            if len(rowix) and (rowix.min() < 0 or rowix.max() >= len(rows)):
                raise IndexError(f"a sample points at stack row {int(rowix.max())} of {len(rows)}")
        except (KeyError, TypeError, ValueError, IndexError) as e:
            raise ProfileFormatError(f"expected the worker payload's {where} ({type(e).__name__}: {e})",
                                     source=source, where=where) from None
        self.sm["time"].append(sm["time"] + offset)
        self.sm["stack"].append(rowix + self.rows)
        self.sm["wall"].append(sm["wall"])
        self.sm["cpu"].append(sm["cpu"])
        self.rows += len(rows)

    def profile(self, meta: dict, metric: str) -> Profile:
        frames = make_frames([f[0] for f in self.frames], [f[1] for f in self.frames],
                             [f[2] for f in self.frames], [f[3] for f in self.frames])
        w = {k: np.concatenate(v) if v else np.zeros(0) for k, v in self.weights.items()}
        workers = pd.DataFrame({"thread": np.asarray(self.cols["thread"], dtype=np.int64),
                                "stack": pd.Series(self.cols["stack"], dtype=object),
                                "samples": w["samples"].astype(np.int64), "wall": w["wall"], "cpu": w["cpu"],
                                TASK: pd.Series(self.cols[TASK], dtype=object)})
        stacks = workers if self.driver is None else pd.concat([self.driver, workers], ignore_index=True)
        stacks[TASK] = stacks[TASK].astype(object).where(stacks[TASK].notna(), None)
        stacks["samples"] = stacks["samples"].fillna(0).astype(np.int64)
        parts = [] if self.driver_samples is None else [self.driver_samples]
        if self.sm["time"]:
            sm = {k: np.concatenate(v).astype(np.float64 if k != "stack" else np.int64) for k, v in self.sm.items()}
            parts.append(pd.DataFrame(sm, columns=["time", "stack", "wall", "cpu"]))
        samples = pd.concat(parts, ignore_index=True).sort_values("time", kind="stable", ignore_index=True) \
            if parts else None
        table = thread_table(self.threads)
        table["label"] = unique_labels(table["label"].tolist(), table["process"].tolist())
        return Profile(frames, stacks, samples, meta, None, metric, threads=table)


def assemble(results: list[dict], driver: Profile | None = None, *, engine: str, t0: float | None = None,
             driver_pid: int | None = None, driver_name: str = "driver", session: str | None = None,
             warnings: list[str] | None = None) -> Profile:
    """One Profile: the driver (if recorded) and one rank per worker result.

    ``results``: dicts with ``status`` (ok, ended, unreachable, error), ``payload`` bytes where the
    worker sent or left one, ``error`` (the engine's words), and ``name``/``label``/``pid``/``host``.
    ``t0`` is the driver's start in epoch seconds: worker sample times are shifted onto it.
    ``session``: the recording's id (its spill folders are named after it), kept in ``meta["cluster"]``.
    ``warnings``: the engine's (e.g. a client closed mid-recording), added to ``meta["warnings"]``;
    with them, no worker recorded and no driver is an empty profile that says why, not an error.
    """
    tables, procs, missing = _Tables(), {}, {}
    if driver is not None:
        lab = process_label(driver_pid if driver_pid is not None else driver.meta.get("pid"), driver_name)
        tables.add_driver(driver, lab)
        procs[lab] = {"role": "driver", "pid": driver.meta.get("pid"), "backend": driver.meta.get("backend"),
                      "rate": driver.meta.get("rate"), "status": "ok", "samples": driver.sample_count}
    rates, durations, sizes, recorded = set(), [], 0, 0
    for r in results:
        r = {**r, "engine": r.get("engine", engine)}
        source = f"{engine} worker {r.get('name')}"
        doc = decode(r["payload"], source) if r.get("payload") is not None else None
        pid = r.get("pid") if r.get("pid") is not None else (doc or {}).get("pid")
        lab = process_label(pid, r.get("label") or f"{engine} worker {r.get('name')}")
        info = {"role": "worker", "engine": engine, "status": r.get("status", "ok"), "pid": pid,
                "host": r.get("host") or (doc or {}).get("host"), "name": r.get("name"),
                "address": r.get("address"), "backend": BACKEND}
        info.update({k: r[k] for k in ("node", "actor", "error") if r.get(k) is not None})
        if doc is None:
            missing[lab] = info
            continue
        offset = 0.0 if t0 is None else float(doc.get("t0") or t0) - float(t0)
        tables.add_payload(doc, lab, source, offset)
        recorded += 1
        info.update(rate=doc.get("rate"), samples=int(sum(row[3] for row in doc["stacks"])),
                    payload_bytes=len(r["payload"]), other_cpu=doc.get("other_cpu"),
                    sampler_cpu=doc.get("sampler_cpu"),
                    task_keys=doc.get("task_keys") or {}, samples_kept_every=doc.get("stride"),
                    duration=doc.get("duration"), threads_mode=doc.get("threads_mode"))
        if r.get("status") == "ended":
            info["ended"] = True
        if doc.get("error"):
            info["sampler_error"] = doc["error"]
        procs[lab] = info
        rates.add(doc.get("rate"))
        durations.append(doc.get("duration") or 0.0)
        sizes += len(r["payload"])
    if driver is None and not recorded and not warnings:
        raise ProfilerError("profmagic: no worker could be recorded: "
                            + "; ".join(f"{k}: {v.get('error')}" for k, v in missing.items()))
    procs.update(missing)
    meta = {"backend": BACKEND if driver is None else f"{driver.meta.get('backend')} (driver) + {BACKEND} (workers)",
            "engine": engine, "processes": procs, "concat": {"key": "rank", "labels": list(procs)},
            "rate": rates.pop() if len(rates) == 1 else None,
            "duration": driver.duration if driver is not None and driver.duration is not None
            else max(durations, default=None),
            "note": ("workers: wall = time since the worker's previous sampling pass, cpu = the thread's CPU clock "
                     "over it; stack rows hold every sample, the time-ordered samples a bounded, evenly thinned "
                     "subset (samples_kept_every per rank)"),
            "cluster": {"engine": engine, "session": session, "workers": sum(1 for v in procs.values() if v.get("role") == "worker"),
                        "payload_bytes": sizes,
                        "unreachable": [k for k, v in procs.items() if v.get("status") in ("unreachable", "error")],
                        "ended": [k for k, v in procs.items() if v.get("status") == "ended"]}}
    if driver is not None:   # what the driver's session found out about the cell, and what to tell
        for k in DRIVER_META:
            if driver.meta.get(k) is not None:
                meta[k] = driver.meta[k]
    if warnings:
        meta["warnings"] = tuple(meta.get("warnings") or ()) + tuple(warnings)
    p = tables.profile(meta, driver.metric if driver is not None else "wall")
    if driver is not None and driver.meta.get("cell_thread") in set(p.thread_table["label"]):
        meta["cell_thread"] = driver.meta["cell_thread"]
    return p.replace(meta={**p.meta, **meta, "sample_count": p.sample_count})

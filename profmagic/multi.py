"""Many processes in one Profile: the ``process`` column, concat, load of a glob, child captures.

A multi-process Profile is an ordinary Profile whose ``stacks`` carry a ``process`` column (a
label such as ``pid 1234 · ForkPoolWorker-1``) and whose ``meta["processes"]`` maps each label
to what is known about it (pid, argv, backend, whether it ended during the recording).
Knows pandas; knows no profiler, no plotly, no IPython.
"""
from __future__ import annotations

import glob as _glob
import json
import math
import os
import re

import numpy as np
import pandas as pd

from .errors import ProfileFormatError
from .profile import METRICS, Profile, StackBuilder

PROCESS = "process"


def process_label(pid: int | None, name: str) -> str:
    return f"pid {pid} · {name}" if pid is not None else name


def processes(profile: Profile) -> list[str]:
    """Process labels in first-seen order (meta first); [] for a single-process profile."""
    seen = list((profile.meta.get("processes") or {}).keys())
    if PROCESS in profile.stacks:
        for p in pd.unique(profile.stacks[PROCESS].dropna()):
            if p not in seen:
                seen.append(p)
    return seen


def with_process(profile: Profile, label: str, info: dict | None = None) -> Profile:
    """Every row without a process gets ``label``; ``info`` goes to ``meta["processes"][label]``."""
    st = profile.stacks.copy()
    if PROCESS in st:
        st[PROCESS] = st[PROCESS].where(st[PROCESS].notna(), label).astype(object)
    else:
        st[PROCESS] = pd.Series([label] * len(st), dtype=object)
    meta = dict(profile.meta)
    procs = dict(meta.get("processes") or {})
    procs.setdefault(label, {}).update(info or {})
    meta["processes"] = procs
    return profile.replace(stacks=st, meta=meta)


def _label_for(p: Profile, i: int, key: str) -> str:
    if p.meta.get(key) is not None:
        return f"{key} {p.meta[key]}"
    src = p.meta.get("source") or p.meta.get("file")
    if src and src != "<input>":
        return os.path.basename(str(src))
    return f"{key} {i}"


def concat(profiles, key: str = "rank", labels=None) -> Profile:
    """One Profile from many, keeping which one each stack came from.

    Each input's label (``labels[i]``; else ``meta[key]`` as ``"<key> <value>"``; else its source
    file name; else ``"<key> <i>"``) goes into a column named ``key`` on every row of that input, and
    into ``process`` where a row has no process yet. Frames are unified by (name, file, line, kind);
    weights are not changed, so every total is the sum of the inputs' totals.
    """
    profiles = list(profiles)
    if not profiles:
        raise ValueError("concat() needs at least one profile")
    if labels is None:
        labels = [_label_for(p, i, key) for i, p in enumerate(profiles)]
    labels = [str(x) for x in labels]
    if len(labels) != len(profiles):
        raise ValueError(f"{len(labels)} labels for {len(profiles)} profiles")
    if len(set(labels)) != len(labels):
        raise ValueError(f"labels must be distinct to tell the profiles apart: {labels}")

    # Frames: union, one id per (name, file, line, kind).
    allf = pd.concat([p.frames.reset_index(drop=True) for p in profiles], ignore_index=True)
    line = allf["line"].astype("Int64")
    keys = pd.MultiIndex.from_arrays([allf["name"].astype(object), allf["file"].astype(object),
                                      line.fillna(-1).astype(np.int64),
                                      allf["kind"].astype(object)])
    codes, uniq = pd.factorize(keys)
    first = pd.Series(np.arange(len(codes))).groupby(codes, sort=True).first().to_numpy()
    frames = allf.iloc[first].reset_index(drop=True)
    frames["kind"] = pd.Categorical(frames["kind"].astype(object), categories=profiles[0].frames["kind"].cat.categories
                                    if hasattr(profiles[0].frames["kind"], "cat") else None)
    frames.index.name = "frame"

    parts, samples, off_f, off_s = [], [], 0, 0
    for p, lab in zip(profiles, labels):
        fmap = np.full(int(p.frames.index.max()) + 1 if len(p.frames) else 0, -1, dtype=np.int64)
        fmap[p.frames.index.to_numpy()] = codes[off_f:off_f + len(p.frames)]
        off_f += len(p.frames)
        st = p.stacks.copy()
        st["stack"] = pd.Series([tuple(fmap[list(s)].tolist()) if len(s) else () for s in st["stack"]],
                                dtype=object, index=st.index)
        st[key] = lab
        if PROCESS not in st:
            st[PROCESS] = lab
        else:
            st[PROCESS] = st[PROCESS].where(st[PROCESS].notna(), lab)
        parts.append(st)
        if p.samples is not None and len(p.samples):
            s = p.samples.copy()
            s["stack"] = s["stack"].to_numpy() + off_s
            samples.append(s)
        off_s += len(st)
    stacks = pd.concat(parts, ignore_index=True)
    for c in (key, PROCESS, "thread"):
        stacks[c] = stacks[c].astype(object)
    if "samples" in stacks and stacks["samples"].notna().all():
        s = stacks["samples"].to_numpy(dtype=np.float64)
        if np.all(s == np.round(s)):
            stacks["samples"] = s.astype(np.int64)
    samples_df = pd.concat(samples, ignore_index=True) if samples and len(samples) == len(profiles) else None

    meta = _merged_meta(profiles, labels, key)
    metric = _common_metric(profiles)
    return Profile(frames, stacks, samples_df, meta, None, metric)


def _common_metric(profiles) -> str:
    firsts = {p.metric for p in profiles}
    if len(firsts) == 1:
        return firsts.pop()
    for m in METRICS:
        if m != "samples" and all(m in p.metrics for p in profiles):
            return m
    return "samples"


def _merged_meta(profiles, labels, key) -> dict:
    def same(k):
        vals = {json.dumps(p.meta.get(k), sort_keys=True, default=str) for p in profiles}
        return profiles[0].meta.get(k) if len(vals) == 1 else None

    procs: dict = {}
    for p, lab in zip(profiles, labels):
        own = p.meta.get("processes") or {}
        if own:
            for k, v in own.items():
                procs.setdefault(k, {}).update(v, **({key: lab} if key != PROCESS else {}))
        else:
            procs.setdefault(lab, {}).update({k: p.meta.get(k) for k in ("pid", "backend", "rate", "source")
                                              if p.meta.get(k) is not None})
    threads = []
    for p in profiles:
        threads += [t for t in p.threads if t not in threads]
    durations = [p.duration for p in profiles if p.duration is not None]
    backends = {p.meta.get("backend", p.meta.get("format")) for p in profiles}
    meta = {
        "backend": backends.pop() if len(backends) == 1 else "mixed: " + ", ".join(sorted(map(str, backends))),
        "concat": {"key": key, "labels": labels},
        "processes": procs,
        "threads": threads,
        "sample_count": int(sum(p.sample_count for p in profiles)),
    }
    for k in ("rate", "requested_rate", "metric_note", "cell"):
        v = same(k)
        if v is not None:
            meta[k] = v
    if durations:
        meta["duration"] = max(durations)
    return meta


# -- many files ------------------------------------------------------------------------------
def _natural(s: str):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]


def load_many(pattern, key: str = "rank", format: str | None = None, **options) -> Profile:
    """Every file matching the glob ``pattern`` (sorted naturally: rank2 before rank10), one
    process each, concatenated. A file's label is ``"<key> <n>"`` when its path has ``<key><n>``
    (``rank3.json`` -> ``rank 3``), else its path relative to the glob's fixed part."""
    from . import load
    base = os.path.dirname(os.fspath(pattern).split("*")[0].split("?")[0].split("[")[0])
    rx = re.compile(rf"{re.escape(key)}[_-]?(\d+)", re.IGNORECASE)

    def number(path):
        m = rx.findall(os.path.relpath(path, base or "."))
        return int(m[-1]) if m else None

    paths = [p for p in _glob.glob(os.fspath(pattern), recursive=True) if os.path.isfile(p)]
    if not paths:
        raise FileNotFoundError(f"no file matches {os.fspath(pattern)!r}")
    # By rank number where the names have one, then naturally (rank2 before rank10).
    paths.sort(key=lambda p: (number(p) is None, number(p) or 0, _natural(p)))
    labels, profiles = [], []
    for path in paths:
        n = number(path)
        labels.append(f"{key} {n}" if n is not None else os.path.relpath(path, base or "."))
        p = load(path, format=format, **options)
        p.meta.setdefault("source", path)
        profiles.append(p)
    if len(set(labels)) != len(labels):   # two files with the same rank number in different runs
        labels = [os.path.relpath(p, base or ".") for p in paths]
    out = concat(profiles, key=key, labels=labels)
    out.meta["sources"] = paths
    return out


# -- per-process summary ------------------------------------------------------------------------
def by_process(profile: Profile) -> pd.DataFrame:
    """One row per process: samples, wall, cpu, off_cpu (NaN where unknown), ended, ended_at."""
    st = profile.stacks
    col = st[PROCESS] if PROCESS in st else pd.Series(["(one process)"] * len(st), dtype=object)
    order = processes(profile) or list(pd.unique(col))
    g = pd.DataFrame({"process": col.to_numpy(), "samples": st["samples"].to_numpy()})
    for m in ("wall", "cpu"):
        g[m] = st[m].to_numpy(dtype=np.float64) if m in st else np.nan
    agg = g.groupby("process", sort=False).agg(samples=("samples", "sum"),
                                               wall=("wall", lambda x: x.sum(min_count=1)),
                                               cpu=("cpu", lambda x: x.sum(min_count=1)))
    agg = agg.reindex([p for p in order if p in agg.index] + [p for p in agg.index if p not in order])
    agg["samples"] = agg["samples"].fillna(0).astype(np.int64)
    agg["off_cpu"] = (agg["wall"] - agg["cpu"]).clip(lower=0)
    info = profile.meta.get("processes") or {}
    agg["ended"] = [bool((info.get(p) or {}).get("ended")) for p in agg.index]
    agg["ended_at"] = [(info.get(p) or {}).get("ended_at") for p in agg.index]
    agg.index.name = "process"
    return agg


# -- child captures (childsampler.py's files) ------------------------------------------------------
def read_child(data: bytes, source: str = "<child>", t0: float = 0.0) -> Profile:
    """One child's ``<pid>.jsonl`` (``childsampler``) as a Profile: wall and cpu per sample, time
    from ``t0`` (the parent's start). A torn last line (the child was killed mid-write) is dropped
    and counted. Every other fault is a ProfileFormatError naming the line."""
    from .threads import thread_label

    def num(v) -> bool:
        return type(v) in (int, float) and math.isfinite(v)

    def valid(rec) -> bool:   # a frame, name or sample record with the types the child writes
        kind = rec[0] if type(rec) is list and rec else None
        if kind == "f":
            return len(rec) == 5 and type(rec[1]) is int and type(rec[2]) is str and type(rec[3]) is str \
                and type(rec[4]) is int
        if kind == "n":
            return len(rec) == 2 and type(rec[1]) is str
        return kind == "s" and len(rec) == 7 and num(rec[1]) and (rec[2] is None or type(rec[2]) is int) \
            and type(rec[3]) is str and num(rec[4]) and (rec[5] is None or num(rec[5])) \
            and type(rec[6]) is list and all(type(f) is int and f in ids for f in rec[6])

    b = StackBuilder()
    head = None
    ids: dict[int, int] = {}
    name = None
    torn = 0
    last_t = None
    lines = data.split(b"\n")
    while lines and not lines[-1]:
        lines.pop()
    offset = 0
    for n, raw in enumerate(lines, 1):
        here, offset = offset, offset + len(raw) + 1
        if not raw:
            continue
        try:
            rec = json.loads(raw)
        except (ValueError, RecursionError):
            if n == len(lines):
                torn += 1
                continue
            raise ProfileFormatError("expected one JSON record per line", source=source, line=n,
                                     offset=here) from None
        if head is None:
            argv = rec.get("argv", []) if isinstance(rec, dict) else None
            if not (isinstance(rec, dict) and rec.get("v") == 1 and type(rec.get("pid")) is int
                    and num(rec.get("t0", t0)) and num(rec.get("rate", 1)) and type(argv) is list
                    and all(type(a) is str for a in argv)):
                raise ProfileFormatError('expected the header {"v": 1, "pid": ..., "t0": ..., "rate": ..., '
                                         '"argv": [...]}', source=source, line=n)
            head = rec
            continue
        if not valid(rec):
            raise ProfileFormatError("expected a frame ['f', id, name, file, line], a name ['n', name] or a sample "
                                     "['s', time, tid, thread, wall, cpu, [frame ids]]", source=source, line=n)
        if rec[0] == "f":
            ids[rec[1]] = b.frame(rec[2], rec[3], rec[4], "python")
        elif rec[0] == "n":
            name = rec[1]
        else:
            _, t, nid, tname, wall, cpu, stack = rec
            sid = b.stack(thread_label(nid, tname), [ids[f] for f in stack])
            b.add(sid, samples=1, time=t - t0, wall=float(wall), cpu=float("nan") if cpu is None else float(cpu))
            last_t = t
    if head is None:
        raise ProfileFormatError("empty child capture: no header line", source=source, offset=0)
    meta = {"backend": "childsampler", "rate": head.get("rate"), "pid": head.get("pid"),
            "image": head.get("image", 0), "ppid": head.get("ppid"), "argv": head.get("argv"), "process_name": name,
            "started_at": head.get("t0", t0) - t0, "last_sample_at": None if last_t is None else last_t - t0,
            "torn_lines": torn}
    return b.build(metric="wall", meta=meta)


def child_name(p: Profile) -> str:
    """``ForkPoolWorker-1`` for a multiprocessing child, else its command line, shortened."""
    if p.meta.get("process_name") and p.meta["process_name"] != "MainProcess":
        return str(p.meta["process_name"])
    argv = [os.path.basename(a) if i == 0 else a for i, a in enumerate(p.meta.get("argv") or [])]
    text = " ".join(argv) or "?"
    text = " ".join(text.split())
    return text if len(text) <= 60 else text[:57] + "..."

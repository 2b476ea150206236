"""Many processes in one Profile: process labels, concat, the per-process summary.

A multi-process Profile is an ordinary Profile whose thread table gives each thread a ``process``
(a label such as ``pid 1234 · ForkPoolWorker-1``, shown as the stacks' ``process`` column) and
whose ``meta["processes"]`` maps each label to what is known about it (pid, argv, backend,
whether it ended during the recording). Knows pandas; knows no profiler, no plotly, no IPython.
"""
from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd

from .model import KINDS, METRICS, Profile, unique_labels

PROCESS = "process"


def process_label(pid: int | None, name: str) -> str:
    return f"pid {pid} · {name}" if pid is not None else name


def processes(profile: Profile) -> list[str]:
    """Process labels in first-seen order (meta first); [] for a single-process profile."""
    seen = list((profile.meta.get("processes") or {}).keys())
    for p in pd.unique(profile.thread_table[PROCESS].dropna()):
        if p not in seen:
            seen.append(p)
    return seen


def with_process(profile: Profile, label: str, info: dict | None = None) -> Profile:
    """Every thread without a process gets ``label``; ``info`` goes to ``meta["processes"][label]``."""
    t = profile.thread_table.copy()
    t[PROCESS] = t[PROCESS].where(t[PROCESS].notna(), label).astype(object)
    procs = dict(profile.meta.processes)   # a new entry: the input profile's meta stays as it was
    procs[label] = {**(procs.get(label) or {}), **(info or {})}
    return profile.replace(threads=t, meta=profile.meta.replace(processes=procs))


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
    file name; else ``"<key> <i>"``) goes into the thread table: as ``rank`` (key "rank") and as
    ``process`` where a thread has no process yet. Frames are unified by (name, file, line, kind);
    weights are not changed, so every total is the sum of the inputs' totals.
    """
    profiles = list(profiles)
    if not profiles:
        raise ValueError("concat() needs at least one profile")
    if key not in ("rank", PROCESS):
        raise ValueError(f"concat() labels profiles by 'rank' or 'process', not {key!r}")
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
                                      line.fillna(-1).astype(np.int64), allf["kind"].astype(object)])
    codes, _ = pd.factorize(keys)
    first = pd.Series(np.arange(len(codes))).groupby(codes, sort=True).first().to_numpy()
    frames = allf.iloc[first].reset_index(drop=True)
    frames["kind"] = pd.Categorical(frames["kind"].astype(object), categories=KINDS)
    frames.index.name = "frame"

    tables, parts, samples = [], [], []
    off_f = off_s = off_t = 0
    for p, lab in zip(profiles, labels):
        fmap = np.full(int(p.frames.index.max()) + 1 if len(p.frames) else 0, -1, dtype=np.int64)
        fmap[p.frames.index.to_numpy()] = codes[off_f:off_f + len(p.frames)]
        off_f += len(p.frames)
        t = p.thread_table.copy()
        t[PROCESS] = t[PROCESS].where(t[PROCESS].notna(), lab).astype(object)
        if key == "rank":
            t["rank"] = lab
        tables.append(t)
        st = p.stacks.drop(columns=[c for c in ("process", "rank") if c in p.stacks])
        st = st.assign(thread=p.thread_ids() + off_t,
                       stack=pd.Series([tuple(fmap[list(s)].tolist()) if len(s) else () for s in st["stack"]],
                                       dtype=object, index=st.index))
        parts.append(st)
        if p.samples is not None and len(p.samples):
            samples.append(p.samples.drop(columns=["thread"]).assign(stack=p.samples["stack"].to_numpy() + off_s))
        off_s += len(st)
        off_t += len(t)
    stacks = pd.concat(parts, ignore_index=True)
    if "samples" in stacks and stacks["samples"].notna().all():
        s = stacks["samples"].to_numpy(dtype=np.float64)
        if np.all(s == np.round(s)):
            stacks["samples"] = s.astype(np.int64)
    samples_df = pd.concat(samples, ignore_index=True) if samples and len(samples) == len(profiles) else None
    table = pd.concat(tables, ignore_index=True)
    table["label"] = unique_labels(table["label"].tolist(), table[PROCESS].tolist())
    return Profile(frames, stacks, samples_df, _merged_meta(profiles, labels, key), None,
                   common_metric(profiles), threads=table)


def common_metric(profiles) -> str:
    """The metric every profile shares: their common primary one, else the first all of them know."""
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
    durations = [p.duration for p in profiles if p.duration is not None]
    backends = {p.meta.get("backend", p.meta.get("format")) for p in profiles}
    meta = {
        "backend": backends.pop() if len(backends) == 1 else "mixed: " + ", ".join(sorted(map(str, backends))),
        "concat": {"key": key, "labels": labels},
        "processes": procs,
        "sample_count": int(sum(p.sample_count for p in profiles)),
    }
    for k in ("rate", "requested_rate", "metric_note", "cell"):
        v = same(k)
        if v is not None:
            meta[k] = v
    if durations:
        meta["duration"] = max(durations)
    return meta


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


def child_name(p: Profile) -> str:
    """``ForkPoolWorker-1`` for a multiprocessing child, else its command line, shortened."""
    if p.meta.get("process_name") and p.meta["process_name"] != "MainProcess":
        return str(p.meta["process_name"])
    argv = [os.path.basename(a) if i == 0 else a for i, a in enumerate(p.meta.get("argv") or [])]
    text = " ".join(argv) or "?"
    text = " ".join(text.split())
    return text if len(text) <= 60 else text[:57] + "..."


def forked_children(parent: Profile, children, note: str | None = None) -> Profile:
    """A recording of a process and of the children it forked (each recorded by itself, as memray's
    follow_fork does), one process each: ``pid N · parent`` and ``pid M · forked child``. The
    parent's meta is kept; ``meta["processes"]`` says what is known of each (a child's completeness)."""
    def label(p: Profile, role: str) -> str:
        return process_label(p.meta.get("pid"), role)

    parts = [with_process(parent, label(parent, "parent"), {"pid": parent.meta.get("pid"), "role": "parent"})]
    for c in children:
        info = {"pid": c.meta.get("pid"), "role": "forked child",
                "backend": c.meta.get("backend") or c.meta.get("format")}
        if c.meta.get("completeness"):
            info["completeness"] = c.meta["completeness"]
        parts.append(with_process(c, label(c, "forked child"), info))
    merged = concat(parts, key=PROCESS, labels=[processes(x)[0] for x in parts])
    meta = parent.meta.replace(processes=merged.meta.processes, children=note)
    return merged.replace(meta=meta, metric=parent.metric)

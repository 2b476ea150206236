"""The Firefox Profiler's formats: read gecko and processed profiles, write gecko.

Reading takes what the producers write:

* the *gecko* format (``meta.version``; per thread ``{schema, data}`` tables and a ``stringTable``;
  other processes under ``processes``), as ``perf script report gecko`` and this module write it, bare
  or inside the old DevTools envelope ``{"profile": …}``;
* the *processed* format (``meta.preprocessedProfileVersion``; per thread struct-of-arrays tables with
  ``funcTable`` and strings in ``shared.stringArray`` or the thread's ``stringArray``), as CPython
  3.15's ``profiling.sampling`` and samply write it.

Each sample weighs the time to the next sample of its thread (``weigh="interval"``); the last one
weighs ``meta.interval``. A sample without a stack only ends the one before it. CPU time comes from
``threadCPUDelta`` (the CPU a thread used since its previous sample) in µs or ns; the last sample of a
thread has no next delta and gets 0 s of CPU.

Writing gives the gecko format (version 29) inside the DevTools envelope, which the Firefox Profiler
opens and which speedscope recognises (speedscope keys on ``systemHost.name == "Firefox"``, and imports
one thread: the only one, or one named GeckoMain). Each sample carries its CPU delta, so the Firefox
Profiler draws the CPU graph and shows the off-CPU time; threads keep their names, pids and tids; every
process gets its own entry (the first at the top, the rest under ``processes``). A run of n equal
samples becomes n gecko samples spread over its time: the Firefox Profiler counts samples (it ignores a
gecko ``weight`` column), speedscope measures time, and both then agree with the profile. Counts that add
up to more than ``MAX_SAMPLES`` are drawn as proportionally fewer gecko samples (at least one a run), and
each sample's ``weight`` (``weightType`` "samples") carries its share of the exact count, which this
reader takes: a count of 10⁹ writes about 10⁵ samples, not 10⁹, and reads back exact.
"""
from __future__ import annotations

import json
import math
import re

import numpy as np
import pandas as pd

from ..errors import ProfileFormatError
from ..multi import process_label
from ..model import Profile, Raw, StackBuilder
from ..threads import thread_label
from . import layout
from ._common import MAX_THREADS, StackTree, checked_ext, parse_json, too_many_threads, version
from .speedscope import EXT, _jsonable, json_bytes
from .registry import Format

NAME = "gecko"
FORMAT = Format(NAME, __name__, suffixes=(".gecko.json",), mime="application/json", label="gecko JSON",
                opens="opens in the Firefox Profiler (profiler.firefox.com: Load a profile from file)")
VERSION = 29
MAX_SAMPLES = 100_000   # gecko samples a written file holds, about: larger counts are drawn scaled down
CATEGORIES = [{"name": n, "color": c, "subcategories": ["Other"]}
              for n, c in (("Python", "yellow"), ("Native", "blue"), ("Kernel", "orange"), ("Other", "grey"))]
_CATEGORY = {"python": 0, "native": 1, "kernel": 2, "other": 3}
_JS = re.compile(r"^(.*) \((.+?):(\d+)(?::\d+)?\)$")     # 'name (file:line[:col])'
_CPP = re.compile(r"^(.*) \(in (.*)\)(?: \+ \d+)?$")       # 'name (in library)'
_CPU_UNITS = {"µs": 1e-6, "us": 1e-6, "ns": 1e-9, "ms": 1e-3}


_KEY_META = re.compile(rb'[{,]\s*"meta"\s*:\s*\{')
_KEY_THREADS = re.compile(rb'[{,]\s*"threads"\s*:\s*\[')
_KEY_VERSION = re.compile(rb'[{,]\s*"(?:preprocessedProfileVersion|version)"\s*:\s*\d')


def sniff(head: bytes) -> bool:
    """An object with a "meta" object holding a version, and a "threads" list (maybe past the head)."""
    h = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    return (h.startswith(b"{") and _KEY_META.search(head) is not None and _KEY_VERSION.search(head) is not None
            and (_KEY_THREADS.search(head) is not None or len(head) >= 64 * 1024))


def _err(source, where, msg):
    return ProfileFormatError(msg, source=source, where=where)


def _parse(data: bytes, source: str):
    try:
        return parse_json(data)
    except UnicodeDecodeError as e:
        raise ProfileFormatError(f"not UTF-8 text: {e.reason}", source=source, offset=e.start) from None
    except json.JSONDecodeError as e:
        offset = len(e.doc[:e.pos].encode("utf-8", "surrogatepass"))
        raise ProfileFormatError(f"invalid JSON: {e.msg}", source=source, line=e.lineno, offset=offset) from None


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def split_location(loc: str, category: str | None = None) -> tuple[str, str | None, int | None, str]:
    """(name, file, line, kind) from a gecko location string."""
    m = _JS.match(loc)
    if m:
        return m.group(1), m.group(2), int(m.group(3)), "python"
    m = _CPP.match(loc)
    if m:
        lib = m.group(2)
        kind = "kernel" if "kallsyms" in lib or lib.endswith(("vmlinux", ".ko")) or category == "Kernel" else "native"
        return m.group(1), lib, None, kind
    return loc, None, None, _kind_of_category(category)


def _kind_of_category(category: str | None) -> str:
    c = (category or "").lower()
    return "python" if c == "python" else "kernel" if c == "kernel" else "native" if c in ("native", "user") else "other"


class _Table:
    """A gecko ``{schema, data}`` table or a processed struct-of-arrays table, read by column."""

    def __init__(self, obj, where: str, source: str, required: tuple[str, ...]):
        self.where, self.source = where, source
        if not isinstance(obj, dict):
            raise _err(source, where, "expected a table object")
        if "schema" in obj:
            schema, data = obj.get("schema"), obj.get("data")
            if not isinstance(schema, dict) or not isinstance(data, list):
                raise _err(source, where, "expected a 'schema' object and a 'data' list")
            self.n = len(data)
            self.cols = {}
            for name, idx in schema.items():
                if not _int(idx) or idx < 0:
                    raise _err(source, f"{where}.schema.{name}", f"expected a column index, got {idx!r}")
                self.cols[name] = (data, idx)
            for i, row in enumerate(data):
                if not isinstance(row, list):
                    raise _err(source, f"{where}.data[{i}]", "expected a row list")
            self.rows = True
        else:
            lengths = {k: len(v) for k, v in obj.items() if isinstance(v, list)}
            self.n = obj.get("length") if _int(obj.get("length")) else (max(lengths.values()) if lengths else 0)
            self.cols = {k: v for k, v in obj.items() if isinstance(v, list)}
            for k, ln in lengths.items():
                if ln < self.n:
                    raise _err(source, f"{where}.{k}", f"has {ln} entries; expected {self.n} (the table's length)")
            self.rows = False
        for c in required:
            if c not in self.cols:
                raise _err(source, where, f"expected a '{c}' column")

    def has(self, name):
        return name in self.cols

    def get(self, name, i):
        if self.rows:
            data, idx = self.cols[name]
            row = data[i]
            return row[idx] if idx < len(row) else None
        return self.cols[name][i]

    def column(self, name) -> list:
        if name not in self.cols:
            return [None] * self.n
        if self.rows:
            data, idx = self.cols[name]
            return [row[idx] if idx < len(row) else None for row in data]
        return list(self.cols[name][:self.n])


def read(data: bytes, source: str = "<input>", metric: str = "wall", weigh: str = "interval") -> Profile:
    """A Profile from a gecko or processed Firefox Profiler profile. metric: "wall" or "cpu" for the
    sample intervals; weigh: "interval" (seconds from timestamps) or "count" (counts only)."""
    if metric not in ("wall", "cpu"):
        raise ValueError(f"metric must be 'wall' or 'cpu', not {metric!r}")
    if weigh not in ("interval", "count"):
        raise ValueError(f"weigh must be 'interval' or 'count', not {weigh!r}")
    doc = _parse(data, source)
    root = "$"
    if isinstance(doc, dict) and isinstance(doc.get("profile"), dict):
        doc, root = doc["profile"], "profile"  # the DevTools envelope
    if not isinstance(doc, dict) or not isinstance(doc.get("meta"), dict) or not isinstance(doc.get("threads"), list):
        raise _err(source, root, "expected a profile object with 'meta' and a 'threads' list")
    ext = checked_ext(doc, source, f"{root}.{EXT}" if root != "$" else EXT)
    if ext.get("axis") in ("wall", "cpu"):  # written by us: the time axis says what the intervals are
        metric = ext["axis"]
    elif ext.get("axis") == "samples":
        weigh = "count"
    shift = float(ext["t0"]) if _num(ext.get("t0")) else 0.0
    processed = "preprocessedProfileVersion" in doc["meta"]
    b = StackBuilder()
    x_frames = ext.get("frames") if isinstance(ext.get("frames"), list) else None
    x_threads = ext.get("threads") if isinstance(ext.get("threads"), list) else []
    jobs = []  # (thread object, its process profile, where)

    def collect(prof, where, depth):
        if depth > 8:
            raise _err(source, where, "processes nest too deeply")
        for i, th in enumerate(prof.get("threads") or []):
            jobs.append((th, prof, f"{where}.threads[{i}]"))
            if len(jobs) > MAX_THREADS:
                raise too_many_threads(source, f"{where}.threads[{i}]")
        subs = prof.get("processes")
        if isinstance(subs, list):
            for i, sub in enumerate(subs):
                if not isinstance(sub, dict) or not isinstance(sub.get("threads"), list):
                    raise _err(source, f"{where}.processes[{i}]", "expected a process profile with a 'threads' list")
                collect(sub, f"{where}.processes[{i}]", depth + 1)
    collect(doc, root, 0)
    pids = set()   # two are enough to know
    for th, _, _ in jobs:
        if isinstance(th, dict) and len(pids) < 2:
            pid = th.get("pid")
            pids.add(pid if pid is None or isinstance(pid, (int, float, str)) else repr(pid))
    multi = len(pids) > 1
    shared = doc.get("shared") if isinstance(doc.get("shared"), dict) else {}
    meta_all = doc["meta"]
    units = meta_all.get("sampleUnits")
    # CPU deltas in µs unless sampleUnits says otherwise; "variable CPU cycles" cannot become seconds.
    cpu_unit = _CPU_UNITS.get(units.get("threadCPUDelta")) if isinstance(units, dict) else 1e-6
    categories = [c.get("name") if isinstance(c, dict) else None for c in meta_all.get("categories") or []]
    interval_ms = meta_all.get("interval") if _num(meta_all.get("interval")) and meta_all["interval"] > 0 else 1.0
    processes = {}
    frame_cache: dict = {}
    tree = StackTree(source, len(data))
    for k, (th, prof, where) in enumerate(jobs):
        if not isinstance(th, dict):
            raise _err(source, where, "expected a thread object")
        pmeta = prof.get("meta") if isinstance(prof.get("meta"), dict) else meta_all
        start_ms = pmeta.get("startTime") if _num(pmeta.get("startTime")) else 0.0
        x = x_threads[k] if k < len(x_threads) and isinstance(x_threads[k], dict) else {}
        strings = _strings(th, shared, processed, where, source)
        fids = _frames(b, th, strings, processed, categories, libs=doc.get("libs"), where=where, source=source,
                       x_frames=x_frames, x_ids=x.get("frame_ids"), cache=frame_cache)
        stacks = _stacks(th, fids, tree, where, source)
        times, stack_col, counts, cpu_delta, durs = _samples(th, processed, len(stacks), where, source)
        label, attrs = _labels(th, x, multi, processes)
        tid_ = b.thread(label, **attrs)
        n = len(times)
        if not n:
            continue
        t_abs = (np.asarray(times, dtype=np.float64) + start_ms) * 1e-3 + shift
        order = np.argsort(t_abs, kind="stable")
        t_abs = t_abs[order]
        nxt = np.append(t_abs[1:], t_abs[-1] + interval_ms * 1e-3)
        w = durs[order] * 1e-3 if durs is not None else nxt - t_abs
        cpu = None
        if cpu_delta is not None and cpu_unit:
            d = np.asarray([np.nan if v is None else v for v in cpu_delta], dtype=np.float64)[order] * cpu_unit
            cpu = np.nan_to_num(np.append(d[1:], 0.0))
        sid_of: dict[int, int] = {}   # stackTable row -> the builder's stack row
        for j, i in enumerate(order):
            sidx = stack_col[i]
            if sidx is None:
                continue
            sid = sid_of.get(sidx)
            if sid is None:
                sid = sid_of[sidx] = b.stack(tid_, tree.stack(stacks[sidx], f"{where}.stackTable[{sidx}]"))
            weights = {}
            if weigh == "interval":
                weights[metric] = float(w[j])
                if cpu is not None and metric == "wall":
                    weights["cpu"] = float(cpu[j])
            b.add(sid, samples=counts[i], time=float(t_abs[j]), **weights)
    meta = {"format": NAME, "source": source, "variant": "processed" if processed else "gecko",
            "product": meta_all.get("product"), "interval_ms": interval_ms, "weigh": weigh}
    if meta_all.get("importedFrom"):
        meta["imported_from"] = meta_all["importedFrom"]
    layout.carry_meta(meta, ext.get("meta"), NAME, source)
    if multi:
        meta.setdefault("processes", processes)
    meta["threads"] = list(b.threads)
    p = b.build(metric=None, meta=meta, raw=Raw(data, NAME),
                unknown_metrics=[m for m in ext.get("unknown_metrics") or () if m in ("wall", "cpu")])
    primary = ext.get("metric") if ext.get("metric") in ("wall", "cpu", "off_cpu", "samples") else \
        (metric if weigh == "interval" else "samples")
    return p.replace(metric=primary if primary in p.metrics else p.metric)


def _strings(th, shared, processed, where, source) -> list:
    for holder, key in ((th, "stringTable"), (th, "stringArray"), (shared, "stringArray")):
        s = holder.get(key)
        if isinstance(s, list):
            if not all(isinstance(x, str) for x in s):
                bad = next(i for i, x in enumerate(s) if not isinstance(x, str))
                raise _err(source, f"{where}.{key}[{bad}]", "expected a string")
            return s
    raise _err(source, where, "expected a 'stringTable' (gecko) or 'stringArray' (processed) of strings")


def _string(strings, idx, where, source):
    if not _int(idx) or not 0 <= idx < len(strings):
        raise _err(source, where, f"string index {idx!r} is not in the string table (0..{len(strings) - 1})")
    return strings[idx]


def _frames(b, th, strings, processed, categories, libs, where, source, x_frames, x_ids, cache) -> list[int]:
    """Frame id (in the builder) per row of the thread's frameTable."""
    ft = _Table(th.get("frameTable"), f"{where}.frameTable", source, ("func",) if processed else ("location",))
    out = []
    if x_frames is not None and isinstance(x_ids, list) and len(x_ids) == ft.n:
        for i, xi in enumerate(x_ids):
            fr = x_frames[xi] if _int(xi) and 0 <= xi < len(x_frames) else None
            if not (isinstance(fr, list) and len(fr) == 4 and isinstance(fr[0], str)
                    and (fr[1] is None or isinstance(fr[1], str)) and isinstance(fr[3], str)):
                break
            out.append(b.frame(fr[0], fr[1] or None, fr[2] if _int(fr[2]) else None,
                               fr[3] if fr[3] in _CATEGORY else "other"))
        else:
            return out
        out = []
    cat_col = ft.column("category")
    line_col = ft.column("line")
    if processed:
        fn = _Table(th.get("funcTable"), f"{where}.funcTable", source, ("name",))
        rt = th.get("resourceTable")
        res = _Table(rt, f"{where}.resourceTable", source, ()) if isinstance(rt, dict) else None
        func_col = ft.column("func")
        for i in range(ft.n):
            f = func_col[i]
            if not _int(f) or not 0 <= f < fn.n:
                raise _err(source, f"{where}.frameTable.func[{i}]", f"function index {f!r} is not in funcTable")
            name = _string(strings, fn.get("name", f), f"{where}.funcTable.name[{f}]", source)
            file = None
            fi = fn.get("fileName", f) if fn.has("fileName") else None
            if fi is not None:
                file = _string(strings, fi, f"{where}.funcTable.fileName[{f}]", source)
            elif res is not None and fn.has("resource") and _int(fn.get("resource", f)) and 0 <= fn.get("resource", f) < res.n:
                rn = res.get("name", fn.get("resource", f)) if res.has("name") else None
                file = strings[rn] if _int(rn) and 0 <= rn < len(strings) else None
            line = line_col[i] if _int(line_col[i]) else (fn.get("lineNumber", f) if fn.has("lineNumber") and _int(fn.get("lineNumber", f)) else None)
            cat = categories[cat_col[i]] if _int(cat_col[i]) and 0 <= cat_col[i] < len(categories) else None
            is_js = fn.get("isJS", f) if fn.has("isJS") else False
            kind = "python" if is_js is True else _kind_of_category(cat)
            if kind == "other" and file and not is_js:
                kind = "native"
            key = (name, file, line, kind)
            out.append(cache.get(key) if key in cache else cache.setdefault(key, b.frame(name, file, line, kind)))
        return out
    loc_col = ft.column("location")
    for i in range(ft.n):
        loc = _string(strings, loc_col[i], f"{where}.frameTable.data[{i}]", source)
        cat = categories[cat_col[i]] if _int(cat_col[i]) and 0 <= cat_col[i] < len(categories) else None
        name, file, line, kind = split_location(loc, cat)
        if _int(line_col[i]):
            line = line_col[i]
        key = (name, file, line, kind)
        out.append(cache.get(key) if key in cache else cache.setdefault(key, b.frame(name, file, line, kind)))
    return out


def _stacks(th, fids, tree: StackTree, where, source) -> list[int]:
    """The ``tree`` node of each row of the thread's stackTable (a prefix points to an earlier row):
    O(1) a row, whatever the depth; ``tree`` caps the depth."""
    st = _Table(th.get("stackTable"), f"{where}.stackTable", source, ("frame", "prefix"))
    frames, prefixes = st.column("frame"), st.column("prefix")
    out: list[int] = []
    for i in range(st.n):
        f, p = frames[i], prefixes[i]
        if not _int(f) or not 0 <= f < len(fids):
            raise _err(source, f"{where}.stackTable[{i}]", f"frame index {f!r} is not in frameTable (0..{len(fids) - 1})")
        if p is None:
            out.append(tree.push(-1, fids[f], f"{where}.stackTable[{i}]"))
        elif _int(p) and 0 <= p < i:
            out.append(tree.push(out[p], fids[f], f"{where}.stackTable[{i}]"))
        else:
            raise _err(source, f"{where}.stackTable[{i}]", f"prefix {p!r} must be null or an earlier stack (0..{i - 1})")
    return out


def _samples(th, processed, nstacks, where, source):
    """(time ms, stack index or None, count, CPU delta or None, duration ms or None) per sample."""
    sm = _Table(th.get("samples"), f"{where}.samples", source, ("stack",))
    stacks = sm.column("stack")
    for i, s in enumerate(stacks):
        if s is not None and (not _int(s) or not 0 <= s < nstacks):
            raise _err(source, f"{where}.samples[{i}]", f"stack index {s!r} is not in stackTable (0..{nstacks - 1})")
    if sm.has("time"):
        times = sm.column("time")
    elif sm.has("timeDeltas"):
        deltas = sm.column("timeDeltas")
        if not all(_num(d) for d in deltas):
            bad = next(i for i, d in enumerate(deltas) if not _num(d))
            raise _err(source, f"{where}.samples.timeDeltas[{bad}]", f"expected a number, got {deltas[bad]!r}")
        times = np.cumsum(deltas).tolist()
    else:
        raise _err(source, f"{where}.samples", "expected a 'time' or 'timeDeltas' column")
    for i, t in enumerate(times):
        if not _num(t):
            raise _err(source, f"{where}.samples[{i}]", f"expected a time in milliseconds, got {t!r}")
    counts = [1] * len(stacks)
    durs = None
    wtype = th["samples"].get("weightType") if isinstance(th.get("samples"), dict) else None
    if sm.has("weight") and isinstance(th["samples"].get("weight", []), list):
        wcol = sm.column("weight")
        if not all(_num(x) and x >= 0 for x in wcol):
            bad = next(i for i, x in enumerate(wcol) if not (_num(x) and x >= 0))
            raise _err(source, f"{where}.samples.weight[{bad}]", f"expected a number ≥ 0, got {wcol[bad]!r}")
        if wtype == "tracing-ms":
            durs = np.asarray(wcol, dtype=np.float64)
        elif wtype in (None, "samples"):
            counts = wcol
    cpu = sm.column("threadCPUDelta") if sm.has("threadCPUDelta") else None
    if cpu is not None and not all(v is None or (_num(v) and v >= 0) for v in cpu):
        bad = next(i for i, v in enumerate(cpu) if not (v is None or (_num(v) and v >= 0)))
        raise _err(source, f"{where}.samples.threadCPUDelta[{bad}]", f"expected a number ≥ 0 or null, got {cpu[bad]!r}")
    if cpu is not None and all(v is None for v in cpu):
        cpu = None
    return times, stacks, counts, cpu, durs


def _labels(th, x, multi, processes):
    name = th.get("name") if isinstance(th.get("name"), str) else None
    tid = th.get("tid")
    try:
        tid_i = int(tid)
    except (TypeError, ValueError):
        tid_i = None
    if isinstance(x.get("thread"), str):
        label = x["thread"]
    elif tid_i is not None and 0 <= tid_i < 2 ** 31:
        label = thread_label(tid_i, name)
    else:
        label = name or f"thread {tid}"
    try:
        pid_i = int(th.get("pid"))
    except (TypeError, ValueError):
        pid_i = None
    attrs = {"name": name, "tid": tid_i if tid_i is not None and 0 <= tid_i < 2 ** 31 else None, "pid": pid_i}
    if isinstance(x.get("process"), str):
        attrs["process"] = x["process"]
    elif multi:
        plabel = process_label(pid_i, th.get("processName") if isinstance(th.get("processName"), str) else "process")
        processes.setdefault(plabel, {"pid": pid_i})
        attrs["process"] = plabel
    return label, attrs


# -- writing --------------------------------------------------------------------------------------------
def to_dict(profile: Profile) -> dict:
    axis = layout.axis_metric(profile)
    rate = float(profile.meta.get("rate") or 0) or None
    unit = 1.0 / rate if (axis == "samples" and rate) else 1e-3
    fr = profile.frames
    names, files, kinds = fr["name"].tolist(), fr["file"].tolist(), [str(k) for k in fr["kind"]]
    lines = [None if pd.isna(x) else int(x) for x in fr["line"]]
    pos = {fid: i for i, fid in enumerate(fr.index)}
    stacks = profile.stacks["stack"].tolist()
    tracks = layout.tracks(profile)
    laid = [layout.runs(profile, t, axis, unit) for t in tracks]
    # The Firefox Profiler counts gecko samples (it ignores a gecko weight column): a run of n samples is
    # written as n samples, unless the counts add up to more than MAX_SAMPLES; then as proportionally
    # fewer (at least one a run), whose weights carry the exact counts for readers that take them.
    total = float(sum(float(np.sum(x.samples)) for x in laid))
    scale = min(1.0, MAX_SAMPLES / total) if total > 0 else 1.0
    t0 = min((float(x.start[0]) for x in laid if len(x.start)), default=0.0)
    intervals = np.concatenate([x.dur / np.maximum(x.samples, 1) for x in laid]) if laid else np.zeros(0)
    interval_ms = 1e3 / rate if rate else (float(np.median(intervals)) * 1e3 if len(intervals) else 1.0)
    threads_by_pid: dict[int, list] = {}
    x_threads = []
    end_ms = 0.0
    for t, runs in zip(tracks, laid):
        th, frame_ids, last = _thread(t, runs, t0, stacks, pos, names, files, lines, kinds, axis, scale)
        threads_by_pid.setdefault(t.pid, []).append(th)
        x_threads.append({"thread": str(t.thread), "process": t.process, "frame_ids": frame_ids})
        end_ms = max(end_ms, last)
    meta = {"version": VERSION, "interval": interval_ms, "startTime": 0, "shutdownTime": None,
            "processType": 0, "product": "profmagic", "stackwalk": 0, "debug": 0, "gcpoison": 0, "asyncstack": 0,
            "presymbolicated": True, "categories": CATEGORIES, "markerSchema": [],
            "sampleUnits": {"time": "ms", "eventDelay": "ms", "threadCPUDelta": "µs"},
            "profilingStartTime": 0, "profilingEndTime": end_ms}
    procs = []
    for pid, ths in threads_by_pid.items():
        procs.append({"meta": dict(meta), "libs": [], "pausedRanges": [], "threads": ths, "processes": []})
    top = procs[0] if procs else {"meta": meta, "libs": [], "pausedRanges": [], "threads": [], "processes": []}
    top["processes"] = procs[1:]
    # Threads in file order (top process first) line up with x-profmagic's list.
    order = [th for p in procs for th in p["threads"]]
    x_by_thread = {id(th): x for th, x in zip([th for ths in threads_by_pid.values() for th in ths], x_threads)}
    top[EXT] = {
        "metric": profile.metric, "axis": axis, "t0": t0,
        "frames": [[names[i], files[i] or None, lines[i], kinds[i]] for i in range(len(names))],
        "threads": [x_by_thread[id(th)] for th in order],
        "meta": _jsonable({k: v for k, v in profile.meta.items() if k != "threads"}),
        "unknown_metrics": [m for m in ("wall", "cpu") if m in profile.stacks and not profile.stacks[m].notna().any()],
        "exporter": f"profmagic@{version()}",
        **({"samples_note": f"the counts add up to {total:,.0f}: drawn as about {MAX_SAMPLES:,} gecko samples, "
                            "each weighing its share of the exact count (the Firefox Profiler counts samples, "
                            "not weights: its counts are scaled)"} if scale < 1 else {}),
        "time_axis": {"wall": "wall time", "cpu": "CPU time (sample times add up CPU seconds)",
                      "samples": "one sample interval per sample"}[axis],
    }
    # The DevTools envelope: the Firefox Profiler unwraps 'profile'; speedscope needs systemHost.
    return {"systemHost": {"name": "Firefox"}, "duration": end_ms, "profile": top}


def _location(name, file, line, kind) -> str:
    if file and kind == "python":
        return f"{name} ({file}:{line})" if line is not None else f"{name} ({file}:0)"
    return f"{name} (in {file or kind})"


def _thread(t, runs, t0, stacks, pos, names, files, lines, kinds, axis, scale=1.0):
    strings: list[str] = []
    sidx: dict[str, int] = {}
    frame_rows: list = []
    frame_of: dict[int, int] = {}
    frame_ids: list[int] = []
    stack_rows: list = []
    stack_of: dict[tuple, int] = {}   # (prefix row, frame row) -> stackTable row
    row_of: dict[int, int] = {}       # the profile's stack row -> its stackTable row

    def string(s):
        i = sidx.get(s)
        if i is None:
            i = sidx[s] = len(strings)
            strings.append(s)
        return i

    def frame(f):
        r = frame_of.get(f)
        if r is None:
            r = frame_of[f] = len(frame_rows)
            loc = _location(names[f], files[f], lines[f], kinds[f])
            frame_rows.append([string(loc), kinds[f] == "python", None, None, lines[f], None,
                               _CATEGORY.get(kinds[f], 3), 0])
            frame_ids.append(f)
        return r

    def stack(row):
        got = row_of.get(row)
        if got is not None:
            return got
        prefix = None
        for f in stacks[row]:
            fr = frame(pos[f])
            s = stack_of.get((prefix, fr))
            if s is None:
                s = stack_of[(prefix, fr)] = len(stack_rows)
                stack_rows.append([prefix, fr])
            prefix = s
        row_of[row] = prefix
        return prefix

    samples = []
    prev_cpu = 0.0   # CPU of the span that ends at the next sample, µs
    end = None
    for a, d, row, n, c in zip(runs.start, runs.dur, runs.row, runs.samples, runs.cpu):
        if d <= 0:
            continue
        if end is not None and a > end + 1e-12:  # a gap: a stackless sample ends the last span
            samples.append([None, (end - t0) * 1e3, None, prev_cpu, 0])
            prev_cpu = 0.0
        s = stack(row)
        k = max(1, int(round(n * scale)))
        if float(n).is_integer():   # integer weights that add up to n exactly
            base, extra = divmod(int(n), k)
            weights = [base + 1] * extra + [base] * (k - extra)
        else:
            weights = [float(n) / k] * k
        per = d / k
        cpu_each = per * 1e6 if axis == "cpu" else (c / k * 1e6 if axis == "wall" and c == c else 0.0)
        for j in range(k):
            samples.append([s, (a + j * per - t0) * 1e3, None, prev_cpu, weights[j]])
            prev_cpu = cpu_each
        end = a + d
    if end is not None:
        samples.append([None, (end - t0) * 1e3, None, prev_cpu, 0])
    th = {
        "name": t.name, "processType": "default", "processName": t.process_name, "pid": t.pid, "tid": t.tid,
        "registerTime": 0, "unregisterTime": None,
        "markers": {"schema": {"name": 0, "startTime": 1, "endTime": 2, "phase": 3, "category": 4, "data": 5},
                    "data": []},
        "samples": {"schema": {"stack": 0, "time": 1, "eventDelay": 2, "threadCPUDelta": 3, "weight": 4},
                    "weightType": "samples", "data": samples},
        "frameTable": {"schema": {"location": 0, "relevantForJS": 1, "innerWindowID": 2, "implementation": 3,
                                  "line": 4, "column": 5, "category": 6, "subcategory": 7}, "data": frame_rows},
        "stackTable": {"schema": {"prefix": 0, "frame": 1}, "data": stack_rows},
        "stringTable": strings,
    }
    return th, frame_ids, (end - t0) * 1e3 if end is not None else 0.0


def write(profile: Profile) -> bytes:
    return json_bytes(to_dict(profile))

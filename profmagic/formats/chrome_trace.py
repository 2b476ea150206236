"""Chrome trace event JSON (Perfetto, chrome://tracing; py-spy ``--format chrometrace``, viztracer): read and write.

Reading takes the array form and the ``{"traceEvents": [...]}`` form, with

* ``B``/``E`` and ``X`` slices: per (pid, tid), the open slices form the stack; each stretch of time
  with one stack becomes one time-ordered sample weighing its length. py-spy writes events only where
  a thread's stack changes, so a stretch is one or more of its samples, and each sample weighs the time
  to the next one on its thread. py-spy closes every slice still open when it stops: **the last stack of
  each thread lasts until the recording's end**, also for a thread that exited before (py-spy writes no
  event for an exit), so that last stretch is an upper bound.
* ``P`` samples (with the top-level ``stackFrames``; also the top-level ``samples`` list): with
  ``weigh="interval"`` each sample weighs the time to the next sample of its thread; the last one
  weighs its thread's median interval. When a trace has samples, its slices are not counted again.
* ``C`` counters named ``CPU % …`` with category ``profmagic`` (what ``write`` emits): CPU time.
* ``M`` metadata: process and thread names. Other phases are counted in ``meta["ignored_events"]``.

``ts`` and ``dur`` are microseconds. Writing lays each thread's samples out as slices (see
``layout.runs``), with thread and process names and, where CPU time is known, one CPU counter track per
thread; an ``x-profmagic`` block lets a written profile read back equal. A run of n samples is one slice
whose count travels in that block: a count is never expanded into events.
"""
from __future__ import annotations

import heapq
import json
import math
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..errors import ProfileFormatError
from ..multi import process_label
from ..model import Profile, Raw, StackBuilder
from ..threads import thread_label
from . import layout
from ._common import MAX_THREADS, StackTree, checked_ext, parse_json, too_many_threads, version
from .speedscope import EXT, _jsonable, json_bytes, guess_kind
from .registry import Format

NAME = "chrome_trace"
FORMAT = Format(NAME, __name__, suffixes=(".trace.json",), mime="application/json", option="chrome",
                label="Chrome trace JSON", opens="opens in Perfetto (ui.perfetto.dev) and chrome://tracing")
US = 1e-6
CPU_PREFIX = "CPU % "
CAT = "profmagic"
_VIZTRACER = re.compile(r"^(.*) \((.+):(\d+)\)$")  # viztracer names frames 'func (file.py:12)'
_KINDS = ("python", "native", "kernel", "other")
_PYSPY_NAME = re.compile(r"^(\d+): ")  # newer py-spy: tids renumbered, the thread_name is '<pthread id>: <name>'

_SLICE_NOTE = ("slices between stack changes; the last one of each thread lasts until the recording "
               "stopped (py-spy writes no event when a thread exits)")


_KEY_EVENTS = re.compile(rb'[{,]\s*"traceEvents"\s*:\s*\[')
_KEY_PH = re.compile(rb'[{,]\s*"ph"\s*:\s*"')


def sniff(head: bytes) -> bool:
    h = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if h.startswith(b"{"):
        return _KEY_EVENTS.search(head) is not None
    return h.startswith(b"[") and h[1:].lstrip(b" \t\r\n")[:1] == b"{" and _KEY_PH.search(head) is not None


def _err(source, where, msg):
    return ProfileFormatError(msg, source=source, where=where)


def _load(data: bytes, source: str):
    """The parsed document and whether its array had to be closed (the format allows a missing ']')."""
    try:
        return parse_json(data), False
    except UnicodeDecodeError as e:
        raise ProfileFormatError(f"not UTF-8 text: {e.reason}", source=source, offset=e.start) from None
    except json.JSONDecodeError as e:
        first = e
    tail = data.rstrip(b" \t\r\n")
    if data.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] == b"[" and tail.endswith((b"}", b"},")):
        try:
            return parse_json(tail.rstrip(b",") + b"]"), True
        except (json.JSONDecodeError, UnicodeDecodeError):
            pass
    offset = len(first.doc[:first.pos].encode("utf-8", "surrogatepass"))
    raise ProfileFormatError(f"invalid JSON: {first.msg}", source=source, line=first.lineno, offset=offset)


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


_ID = (int, str)  # exact types: a bool is no pid


def _ident(v) -> bool:
    return type(v) in _ID


class _Frames:
    """Frames interned by what the events say about them: ``keys[i]`` is frame i's (name, file, line,
    kind), as ``StackBuilder.frame`` takes it, each once."""

    def __init__(self):
        self.keys: list[tuple] = []
        self._of_event: dict[tuple, int] = {}
        self._of_key: dict[tuple, int] = {}

    def frame(self, name: str, args) -> int:
        file = line = kind = None
        if isinstance(args, dict):
            f, ln, k = args.get("filename"), args.get("line"), args.get("kind")
            file = f if isinstance(f, str) and f else None
            line = ln if isinstance(ln, int) and not isinstance(ln, bool) else None
            kind = k if k in _KINDS else None
        if file is None:
            m = _VIZTRACER.match(name)
            if m:
                name, file, line = m.group(1), m.group(2), int(m.group(3))
        said = (name, file, line, kind)
        i = self._of_event.get(said)
        if i is None:
            key = (name, file, line, kind or guess_kind(name, file or ""))
            i = self._of_key.get(key)
            if i is None:
                i = self._of_key[key] = len(self.keys)
                self.keys.append(key)
            self._of_event[said] = i
        return i


@dataclass
class _Trace:
    """What ``parse`` reads: plain records, checked, with no Profile yet. Stacks are nodes of ``tree``
    over indices into ``frames``."""
    frames: list[tuple]              # (name, file, line, kind) of each frame index
    tree: StackTree
    stretches: dict                  # (pid, tid) -> [(start µs, end µs, stack node)], in time order
    sampled: bool                    # from P events or top-level samples; else from slices
    thread_names: dict               # (pid, tid) -> name (M events)
    process_names: dict              # pid -> name
    counters: dict                   # (pid, tid) -> [(µs, CPU %)] from our C events
    ignored: dict                    # phase -> count of events not read
    ext: dict                        # our x-profmagic block (checked)
    other_data: dict | None
    unclosed: bool                   # the event array had no closing ']'
    open_at_end: bool                # a 'B' never ended


def _ends_at(marks, k) -> tuple[int, dict]:
    """The run of E marks at marks[k]'s timestamp that follows k: (where it ends, name -> its positions)."""
    ts = marks[k][0]
    by_name: dict = {}
    j = k + 1
    while j < len(marks) and marks[j][0] == ts and marks[j][3] == "E":
        if marks[j][5] is not None:
            by_name.setdefault(marks[j][5], []).append(j)   # increasing: already a heap
        j += 1
    return j, by_name


def _pair_later(marks, k, want, run) -> bool:
    """Swap into place k the first later E of the same timestamp named ``want``, if there is one.
    ``run`` (from ``_ends_at``) keeps each name's positions in a heap: O(log n) a swap."""
    heap = run[1].get(want)
    while heap and heap[0] <= k:   # positions already walked
        heapq.heappop(heap)
    if not heap:
        return False
    j = heapq.heappop(heap)
    marks[k], marks[j] = marks[j], marks[k]
    heapq.heappush(run[1].setdefault(marks[j][5], []), j)   # the mark moved to j keeps its name
    return True


def _walk_slices(marks, where_of, source, end_ts, tree: StackTree):
    """(start, end, stack node) stretches of one thread from its sorted begin/end marks; the stacks are
    nodes of ``tree`` (O(1) a mark, whatever the depth)."""
    out = []
    open_: list[tuple[str, int]] = []  # (name, event index) of each open slice
    cur = -1                           # their stack's node
    last = None
    run = (0, {})                      # the run of E marks at one timestamp, while k is inside it
    for k in range(len(marks)):
        ts, _, _, kind, fid, name, idx = marks[k]
        if kind == "E" and open_ and name is not None and name != open_[-1][0]:
            if k >= run[0]:
                run = _ends_at(marks, k)
            if _pair_later(marks, k, open_[-1][0], run):
                ts, _, _, kind, fid, name, idx = marks[k]  # an end at this timestamp that fits the open slice
        if cur >= 0 and ts > last:
            out.append((last, ts, cur))
        last = ts
        if kind == "B":
            open_.append((name, idx))
            cur = tree.push(cur, fid, where_of(idx))
        elif not open_:
            raise _err(source, where_of(idx), "an end event with no open slice on its thread; expected a "
                                              "'B' event before it")
        elif kind == "X" and open_[-1][1] != idx:
            raise _err(source, where_of(idx), "complete ('X') events overlap on one thread without nesting")
        elif kind == "E" and name is not None and name != open_[-1][0]:
            raise _err(source, where_of(idx), f"end event for {name!r} but the open slice is "
                                              f"{open_[-1][0]!r}; expected slices to nest")
        else:
            open_.pop()
            cur = tree.parent[cur]
    if cur >= 0 and end_ts > last:  # a 'B' never ended lasts to the trace's end
        out.append((last, end_ts, cur))
    return out, bool(open_)


def read(data: bytes, source: str = "<input>", metric: str = "wall", weigh: str = "interval",
         rate: float | None = None, labels: dict | None = None, window: tuple | list | None = None,
         ends: dict | None = None, starts: dict | None = None) -> Profile:
    """A Profile from Chrome trace JSON.

    metric: where the seconds go, "wall" or "cpu". weigh: "interval" (seconds from timestamps) or
    "count" (sample counts only: every ``P`` sample, every stretch, counts one; no seconds).
    rate: the sampler's rate in Hz, when known: a stretch of slices then counts round(length × rate)
    samples (at least one) instead of one. labels: thread label per tid (or per (pid, tid)), e.g. from
    the profiled process, for traces whose tids are not native thread ids: py-spy 0.4 writes pthread ids
    as tids; later py-spy numbers threads from 0 and names each '<pthread id>: <name>', which is looked
    up too. A label key may be a string (labels kept in JSON); a value may be a mapping with the
    ``label`` and what else is known of the thread (``tid``: its native id, ``name``).

    window: (start, end) in the trace's microseconds: the stretches are cut to it and sample times
    count from its start (either may be None). ends: tid (or its string) -> the microsecond that
    thread ended, when the recorder knows it (a trace has no event for a thread's exit). starts: the
    same for when each thread was known alive: its first stretch is drawn back to it (or to the
    window's start), since a sampler's first sample of a thread comes after the thread began (py-spy:
    an exponential wait, more when it gets no core; bench/bench_pyspy_error.py)."""
    if metric not in ("wall", "cpu"):
        raise ValueError(f"metric must be 'wall' or 'cpu', not {metric!r}")
    if weigh not in ("interval", "count"):
        raise ValueError(f"weigh must be 'interval' or 'count', not {weigh!r}")
    return _build(parse(data, source), data, source, metric, weigh, rate, labels, window, ends, starts)


def parse(data: bytes, source: str = "<input>") -> _Trace:
    """The trace's events as plain records: each thread's stretches of one stack, its names and CPU
    counters. Every malformed event is a ProfileFormatError naming where it is (``traceEvents[i]``)."""
    doc, unclosed = _load(data, source)
    if isinstance(doc, list):
        events, frames_doc, top_samples, ext, key = doc, {}, [], {}, ""
    elif isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        events, key = doc["traceEvents"], "traceEvents"
        frames_doc = doc.get("stackFrames") if isinstance(doc.get("stackFrames"), dict) else {}
        top_samples = doc.get("samples") if isinstance(doc.get("samples"), list) else []
        ext = checked_ext(doc, source)
    else:
        raise _err(source, "$", "expected a JSON array of trace events or an object with a 'traceEvents' list")

    def where_of(i):
        return f"{key}[{i}]" if key else f"[{i}]"

    fr = _Frames()
    tree = StackTree(source, len(data))
    thread_names: dict = {}
    process_names: dict = {}
    marks: dict = {}
    psamples: dict = {}
    counters: dict = {}
    ignored: dict[str, int] = {}
    max_ts = -math.inf
    for i, ev in enumerate(events):
        if not isinstance(ev, dict) or not isinstance(ev.get("ph"), str):
            raise _err(source, where_of(i), "expected an event object with a string 'ph'")
        ph = ev["ph"]
        if ph == "M":
            args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
            nm = args.get("name")
            if isinstance(nm, str) and _ident(ev.get("pid")):
                if ev.get("name") == "thread_name" and _ident(ev.get("tid")):
                    thread_names[(ev["pid"], ev["tid"])] = nm
                elif ev.get("name") == "process_name":
                    process_names[ev["pid"]] = nm
            continue
        if ph not in ("B", "E", "X", "P", "C"):
            ignored[ph] = ignored.get(ph, 0) + 1
            continue
        ts = ev.get("ts")
        tt = type(ts)
        if not (tt is int or (tt is float and -math.inf < ts < math.inf)):
            raise _err(source, where_of(i), f"expected a finite number of microseconds in 'ts', got {ts!r}")
        tkey = (ev.get("pid"), ev.get("tid"))
        if (type(tkey[0]) not in _ID or type(tkey[1]) not in _ID) and ph != "C":
            raise _err(source, where_of(i), "expected 'pid' and 'tid' (numbers or strings) on a "
                                            f"'{ph}' event")
        if ts > max_ts:
            max_ts = ts
        name = ev.get("name")
        if ph == "C":
            if ev.get("cat") == CAT and isinstance(name, str) and name.startswith(CPU_PREFIX) \
                    and type(tkey[0]) in _ID and type(tkey[1]) in _ID:
                args = ev.get("args")
                val = next((v for v in args.values() if _num(v)), None) if isinstance(args, dict) else None
                if val is None or val < 0:
                    raise _err(source, where_of(i), "a CPU counter needs one number ≥ 0 in 'args'")
                counters.setdefault(tkey, []).append((ts, val))
            else:
                ignored["C"] = ignored.get("C", 0) + 1
            continue
        if ph == "P":
            psamples.setdefault(tkey, []).append((ts, ev.get("sf"), i, key))
            continue
        if ph == "E":
            if name is not None and not isinstance(name, str):
                raise _err(source, where_of(i), f"expected a string 'name', got {name!r}")
            marks.setdefault(tkey, []).append((ts, 1, (i,), "E", None, name, i))
            continue
        if not isinstance(name, str):
            raise _err(source, where_of(i), f"expected a string 'name' on a '{ph}' event, got {name!r}")
        fid = fr.frame(name, ev.get("args"))
        if ph == "B":
            marks.setdefault(tkey, []).append((ts, 1, (i,), "B", fid, name, i))
        else:
            dur = ev.get("dur")
            if not _num(dur) or dur < 0:
                raise _err(source, where_of(i), f"expected a number of microseconds ≥ 0 in 'dur', got {dur!r}")
            if dur == 0:
                ignored["X (zero length)"] = ignored.get("X (zero length)", 0) + 1
                continue
            max_ts = max(max_ts, ts + dur)
            lst = marks.setdefault(tkey, [])
            # Ends sort before begins at one time; inner ends (begun later) first; longer begins first.
            lst.append((ts, 2, (-dur, i), "B", fid, name, i))
            lst.append((ts + dur, 0, (-ts, -i), "X", None, None, i))
    for si, s in enumerate(top_samples):
        if not isinstance(s, dict) or not _num(s.get("ts")) or not _ident(s.get("tid")) \
                or not _ident(s.get("pid", 0)):
            raise _err(source, f"samples[{si}]", "expected a sample object with a numeric 'ts', a 'tid' (and maybe "
                                                 "a 'pid'): numbers or strings")
        psamples.setdefault((s.get("pid", 0), s["tid"]), []).append((s["ts"], s.get("sf"), si, "samples"))
        max_ts = max(max_ts, s["ts"])

    if len(psamples or marks) > MAX_THREADS:
        raise too_many_threads(source)
    stretches: dict = {}
    open_at_end = False
    if psamples:
        if marks:
            ignored["B/E/X (samples present)"] = sum(len(v) for v in marks.values())
        resolve = _stack_resolver(frames_doc, fr, tree, source)
        for tkey, lst in psamples.items():
            lst.sort(key=lambda x: x[0])
            ts = np.array([x[0] for x in lst], dtype=np.float64)
            gaps = np.diff(ts)
            last = float(np.median(gaps)) if len(gaps) else 0.0
            nexts = np.append(ts[1:], ts[-1] + last)
            stretches[tkey] = [(t0, t1, resolve(sf, f"{k}[{idx}]"))
                               for (t0, sf, idx, k), t1 in zip(lst, nexts)]
    else:
        for tkey, lst in marks.items():
            lst.sort()  # (ts, rank, tiebreak) is unique per mark: later fields are never compared
            got, still_open = _walk_slices(lst, where_of, source, max_ts, tree)
            stretches[tkey] = got
            open_at_end |= still_open

    other = doc.get("otherData") if isinstance(doc, dict) and isinstance(doc.get("otherData"), dict) else None
    return _Trace(fr.keys, tree, stretches, bool(psamples), thread_names, process_names, counters, ignored, ext,
                  other, unclosed, open_at_end)


def _build(tr: _Trace, data: bytes, source: str, metric: str, weigh: str, rate, labels, window, ends,
           starts=None) -> Profile:
    """The Profile of a parsed trace: threads labelled, stretches cut to ``window`` and weighed (see ``read``)."""
    b = StackBuilder()
    for k in tr.frames:   # in order, each distinct: frame i of the trace is the builder's frame i
        b.frame(*k)
    ext, stretches, thread_names, counters, ignored = tr.ext, tr.stretches, tr.thread_names, tr.counters, tr.ignored
    tree, psamples = tr.tree, tr.sampled
    if ext.get("axis") in ("wall", "cpu"):  # written by us: the time axis says what the lengths are
        metric = ext["axis"]
    elif ext.get("axis") == "samples":
        weigh = "count"
    # Thread and process labels.
    x_threads = {(t.get("pid"), t.get("tid")): t for t in ext.get("threads") or []
                 if _ident(t.get("pid")) and _ident(t.get("tid"))}
    pids = list(dict.fromkeys(k[0] for k in stretches))
    multi = len(pids) > 1
    procs = {}
    for pid in pids:
        procs[pid] = process_label(pid if isinstance(pid, int) else None,
                                   tr.process_names.get(pid) or (str(pid) if not isinstance(pid, int) else "process"))
    meta_processes = {procs[p]: {"pid": p} for p in pids if isinstance(p, int)} if multi else None
    pid_pos = {p: i for i, p in enumerate(pids)}
    order = sorted(stretches, key=lambda k: (pid_pos[k[0]], min((s[0] for s in stretches[k]), default=0)))
    lo, hi = (None, None) if window is None else (window[0], window[1])
    t0 = (float(ext["t0"]) if _num(ext.get("t0")) else 0.0) - (lo * US if lo is not None else 0.0)
    per_tick = 1.0 / rate if rate else None
    cols: dict[str, list] = {"stack": [], "time": [], "samples": [], "dur": [], "cpu": []}
    for tkey in order:
        pid, tid = tkey
        x = x_threads.get(tkey) or {}
        label = x.get("thread") if isinstance(x.get("thread"), str) else None
        known = {}
        if label is None and labels:
            m = _PYSPY_NAME.match(thread_names.get(tkey) or "")
            label = labels.get(tkey) or labels.get(tid) or labels.get(str(tid)) or \
                (labels.get(int(m.group(1))) or labels.get(m.group(1)) if m else None)
            if isinstance(label, dict):   # {"label", "tid" (native), "name"}
                known = {k: label.get(k) for k in ("tid", "name") if label.get(k) is not None}
                label = label.get("label") if isinstance(label.get("label"), str) else None
        if label is None:
            nm = thread_names.get(tkey)
            if isinstance(tid, int) and 0 <= tid < 2 ** 31:
                label = thread_label(tid, nm)
            elif isinstance(tid, int):  # py-spy 0.4: a pthread id, not the kernel's thread id
                label = f"pthread 0x{tid:x}" + (f' "{nm}"' if nm else "")
            else:
                label = f"Thread {tid}" + (f' "{nm}"' if nm else "")
        if multi:
            proc = x.get("process") if isinstance(x.get("process"), str) else procs[pid]
        else:
            proc = x.get("process") if isinstance(x.get("process"), str) else None
        th = b.thread(label, process=proc, pid=pid if isinstance(pid, int) and pid > 0 else None,
                        tid=known.get("tid", tid if isinstance(tid, int) and 0 <= tid < 2 ** 31 else None),
                        name=known.get("name", thread_names.get(tkey)))
        got = _cut(stretches[tkey], lo, _end_of(ends, tid, hi))
        if not got:
            continue
        begun = _begun(starts, tid, lo)
        if begun is not None and begun < got[0][0]:
            got[0] = (begun, got[0][1], got[0][2])
        a = np.fromiter((g[0] for g in got), np.float64, len(got))
        z = np.fromiter((g[1] for g in got), np.float64, len(got))
        local: dict = {}
        sid = np.fromiter((local[st] if st in local else local.setdefault(st, b.stack(th, tree.stack(st)))
                           if st >= 0 else -1 for _, _, st in got), np.int64, len(got))
        dur = (z - a) * US
        counts = x.get("runs") if isinstance(x.get("runs"), list) and len(x["runs"]) == len(got) else None
        if counts is not None and all(_num(c) and c >= 0 for c in counts):
            n = np.asarray(counts, dtype=np.float64)
        elif per_tick and not psamples:
            n = np.maximum(1.0, np.round(dur / per_tick))
        else:
            n = np.ones(len(got))
        keep = sid >= 0
        cols["stack"].append(sid[keep])
        cols["time"].append(t0 + a[keep] * US)
        cols["samples"].append(n[keep])
        cols["dur"].append(dur[keep])
        cpu = np.asarray(_cpu(counters[tkey], got)) if tkey in counters else np.full(len(got), np.nan)
        cols["cpu"].append(cpu[keep])
    cat = {k: (np.concatenate(v) if v else np.zeros(0)) for k, v in cols.items()}
    sids = cat["stack"].astype(np.int64)
    nst = int(sids.max(initial=-1)) + 1
    weights = {}
    if weigh == "interval":
        weights[metric] = cat["dur"]
        if metric == "wall" and counters:
            weights["cpu"] = cat["cpu"]
    # One add per stack with its totals; the time-ordered samples go in as a table below.
    tot_n = np.bincount(sids, weights=cat["samples"], minlength=nst)
    tot_w = {m: np.bincount(sids, weights=np.nan_to_num(v), minlength=nst) for m, v in weights.items()}
    for i in range(nst):
        b.add(i, samples=float(tot_n[i]), **{m: float(v[i]) for m, v in tot_w.items()})
    meta = {"format": NAME, "source": source, "weigh": weigh,
            "timing": "sample intervals" if psamples else _SLICE_NOTE}
    if weigh == "count":
        meta["metric_note"] = "counts only: the trace's timestamps were not used (weigh='count')"
    if per_tick and not psamples and weigh == "interval" and not x_threads:
        meta["approximate"] = "sample counts estimated as stretch length × rate"
    if ignored:
        meta["ignored_events"] = ignored
    if tr.unclosed:
        meta["truncated"] = "the event array was not closed (the format allows this)"
    if tr.open_at_end:
        meta["open_slices"] = "slices without an end event last until the trace's last timestamp"
    if tr.other_data is not None:
        meta["other_data"] = tr.other_data
    layout.carry_meta(meta, ext.get("meta"), NAME, source)
    if meta_processes:
        meta.setdefault("processes", meta_processes)
    meta["threads"] = list(b.threads)
    primary = metric if weigh == "interval" else "samples"
    if ext.get("metric") in ("wall", "cpu", "off_cpu", "samples"):
        primary = ext["metric"]
    unknown = [m for m in ext.get("unknown_metrics") or () if m in ("wall", "cpu")]
    p = b.build(metric=None, meta=meta, raw=Raw(data, NAME), unknown_metrics=unknown)
    order_ = np.argsort(cat["time"], kind="stable")
    samples = pd.DataFrame({"time": cat["time"][order_], "stack": sids[order_],
                            "thread": p.stacks["thread"].to_numpy()[sids[order_]] if len(sids) else
                            np.zeros(0, dtype=object)})
    for m, v in weights.items():
        samples[m] = v[order_]
    if len(samples) and not np.all(cat["samples"] == 1):   # a stretch of several of the sampler's samples
        samples["samples"] = cat["samples"][order_]
    return p.replace(samples=samples if len(samples) else None,
                     metric=primary if primary in p.metrics else p.metric)


def _end_of(ends, tid, hi):
    """When the thread's stretches end: its own end if known, else the window's."""
    mine = None if not ends else ends.get(tid, ends.get(str(tid)))
    if mine is None:
        return hi
    return mine if hi is None else min(mine, hi)


def _begun(starts, tid, lo):
    """Since when the thread is known alive inside the window (None: not known)."""
    mine = None if not starts else starts.get(tid, starts.get(str(tid)))
    if mine is None:
        return None
    return mine if lo is None else max(mine, lo)


def _cut(got, lo, hi):
    """Stretches clipped to [lo, hi] (None: open), the empty ones dropped."""
    if lo is None and hi is None:
        return got
    out = []
    for a, z, st in got:
        a = a if lo is None else max(a, lo)
        z = z if hi is None else min(z, hi)
        if z > a:
            out.append((a, z, st))
    return out


def _stack_resolver(frames_doc: dict, frames: _Frames, tree: StackTree, source: str):
    """sf id -> its stack's node in ``tree`` (-1: none), through the 'parent' chain of stackFrames: each
    frame is walked once, whatever the chain's length."""
    memo: dict = {}

    def resolve(sf, where):
        if sf is None:
            return -1
        key = str(sf)
        if key in memo:
            return memo[key]
        chain, seen = [], set()
        k = key
        while k is not None and k not in memo:
            if k in seen:
                raise _err(source, f"stackFrames[{k!r}]", "the 'parent' chain loops; expected it to end")
            seen.add(k)
            fr = frames_doc.get(k)
            if not isinstance(fr, dict) or not isinstance(fr.get("name"), str):
                raise _err(source, where if k == key else f"stackFrames[{k!r}]",
                           f"stack frame {k!r} is not in stackFrames (or has no string 'name')")
            chain.append((k, fr))
            par = fr.get("parent")
            k = None if par is None else str(par)
        node = memo[k] if k is not None else -1
        for kk, fr in reversed(chain):
            args = {"filename": fr.get("category")} if isinstance(fr.get("category"), str) else None
            node = memo[kk] = tree.push(node, frames.frame(fr["name"], args), f"stackFrames[{kk!r}]")
        return memo[key]
    return resolve


def _cpu(points, stretches) -> list[float]:
    """CPU seconds in each stretch from a step counter of CPU % (0 before the first point)."""
    pts = sorted(points)
    t = np.array([p[0] for p in pts], dtype=np.float64)
    v = np.array([p[1] for p in pts], dtype=np.float64) / 100.0
    area = np.concatenate(([0.0], np.cumsum(v[:-1] * np.diff(t))))

    def integral(x):
        i = np.searchsorted(t, x, side="right") - 1
        return np.where(i < 0, 0.0, area[np.maximum(i, 0)] + v[np.maximum(i, 0)] * (x - t[np.maximum(i, 0)]))
    a = np.array([s[0] for s in stretches], dtype=np.float64)
    z = np.array([s[1] for s in stretches], dtype=np.float64)
    return ((integral(z) - integral(a)) * US).tolist()


# -- writing --------------------------------------------------------------------------------------------
def to_dict(profile: Profile) -> dict:
    axis = layout.axis_metric(profile)
    unit = 1.0 / float(profile.meta.get("rate") or 1000.0) if axis == "samples" else 1.0
    fr = profile.frames
    names, files, kinds = fr["name"].tolist(), fr["file"].tolist(), fr["kind"].tolist()
    lines = [None if pd.isna(x) else int(x) for x in fr["line"]]
    pos = {fid: i for i, fid in enumerate(fr.index)}
    args_of = [{"filename": files[f] or None, "line": lines[f], "kind": str(kinds[f])} for f in range(len(names))]
    stacks = profile.stacks["stack"].tolist()
    tracks = layout.tracks(profile)
    laid = [layout.runs(profile, t, axis, unit) for t in tracks]
    t0 = min((float(x.start[0]) for x in laid if len(x.start)), default=0.0)
    ordered = all(x.ordered for x in laid)
    events: list[dict] = []
    for pid in dict.fromkeys(t.pid for t in tracks):
        pname = next(t.process_name for t in tracks if t.pid == pid)
        events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": pname}})
    x_threads = []
    for k, (t, runs) in enumerate(zip(tracks, laid)):
        events.append({"ph": "M", "name": "thread_name", "pid": t.pid, "tid": t.tid, "args": {"name": t.name}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": t.pid, "tid": t.tid, "args": {"sort_index": k}})
        base = {"pid": t.pid, "tid": t.tid}
        counter = f"{CPU_PREFIX}{t.name} ({t.tid})"
        has_cpu = axis == "wall" and bool(np.isfinite(runs.cpu).any())
        open_: list[int] = []
        end = None
        kept = []
        for a, d, row, n, c in zip(runs.start, runs.dur, runs.row, runs.samples, runs.cpu):
            if d <= 0:
                continue  # nothing to draw
            ts = (a - t0) / US
            frames = [pos[f] for f in stacks[row]]
            if end is not None and a > end:  # a gap: close everything where the last run ended
                _close(events, open_, 0, (end - t0) / US, base, names, args_of, frames)
                if has_cpu:
                    events.append({"ph": "C", "name": counter, "cat": CAT, "ts": (end - t0) / US, **base,
                                   "args": {"cpu": 0.0}})
            same = 0
            while same < min(len(open_), len(frames)) and open_[same] == frames[same]:
                same += 1
            _close(events, open_, same, ts, base, names, args_of, frames[same:])
            for f in frames[same:]:
                events.append({"ph": "B", "name": names[f], "cat": CAT, "ts": ts, **base, "args": args_of[f]})
                open_.append(f)
            if has_cpu:
                pct = 100.0 * c / d if c == c else 0.0
                events.append({"ph": "C", "name": counter, "cat": CAT, "ts": ts, **base, "args": {"cpu": pct}})
            end = a + d
            kept.append(float(n))
        if end is not None:
            _close(events, open_, 0, (end - t0) / US, base, names, args_of)
            if has_cpu:
                events.append({"ph": "C", "name": counter, "cat": CAT, "ts": (end - t0) / US, **base,
                               "args": {"cpu": 0.0}})
        x_threads.append({"pid": t.pid, "tid": t.tid, "thread": str(t.thread), "process": t.process,
                          "runs": kept})
    axis_note = {"wall": "wall time", "cpu": "CPU time (the time axis adds up CPU seconds)",
                 "samples": f"samples, {unit * 1e3:g} ms each"}[axis]
    other = {"exporter": f"profmagic@{version()}", "time axis": axis_note,
             "layout": "samples in time order" if ordered else
                       "aggregated stacks laid end to end: the time axis is not the recording's"}
    meta = _jsonable({k: v for k, v in profile.meta.items() if k != "threads"})
    unknown = [m for m in ("wall", "cpu") if m in profile.stacks and not profile.stacks[m].notna().any()]
    ext = {"metric": profile.metric, "axis": axis, "t0": t0,
           "threads": x_threads, "meta": meta, "unknown_metrics": unknown}
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other, EXT: ext}


def _close(events, open_, keep, ts, base, names, args_of, opening=()):
    """End the slices above depth ``keep``, innermost first, each E with its B's name and args
    (speedscope pairs them by both). One exception: at a timestamp where speedscope sees a B and an E of
    the same frame, it takes the B first; so when the frame about to begin is among those ending (it
    moves to another depth), its ends go last, and speedscope (like our reader) pairs the others by name
    within the timestamp."""
    closing = open_[keep:][::-1]
    del open_[keep:]
    first = opening[0] if len(opening) else None
    for f in [f for f in closing if f != first] + [f for f in closing if f == first]:
        events.append({"ph": "E", "name": names[f], "ts": ts, **base, "args": args_of[f]})


def write(profile: Profile) -> bytes:
    return json_bytes(to_dict(profile))

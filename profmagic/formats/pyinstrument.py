"""pyinstrument session JSON (``Session.to_json()`` / ``Session.save``, read by ``Session.load``).

``frame_records`` is a list of ``[stack, seconds]`` pairs in time order. A stack is a list of
frame strings, root first. The first is the thread, ``"<name>\\x00<thread>\\x00<ident>"``;
then ``"<function>\\x00<file>\\x00<first line>"`` optionally followed by attributes, each
``"\\x01"`` plus a marker letter: ``l`` the line running, ``c`` the class name, ``h`` hidden by
``__tracebackhide__``. Built-ins have file ``<built-in>``; ``[await]``, ``[self]`` and
``[out-of-context]`` are pyinstrument's synthetic leaves. ``seconds`` is the time since the
previous sample by pyinstrument's timer: wall time by default, CPU time when the recorder set a
CPU timer (recorded in our ``x-profmagic`` block, which pyinstrument ignores).
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import ProfileFormatError
from ._common import EXT, ext_block, load_json, thread_attrs
from ..model import Profile, Raw, StackBuilder
from .registry import Format

NAME = "pyinstrument"
FORMAT = Format(NAME, __name__, raw_suffix=".pyisession", mime="application/json")
_SYNTHETIC = ("[await]", "[self]", "[out-of-context]")


def sniff(head: bytes) -> bool:
    h = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    return h.startswith(b"{") and (b'"frame_records"' in head or
                                   (b'"start_call_stack"' in head and b'"sample_count"' in head))


def _err(source, where, msg):
    return ProfileFormatError(msg, source=source, where=where)


def _frame_args(info: str) -> tuple:
    ident, _, attrs = info.partition("\x01")
    if ident in _SYNTHETIC or "\x00" not in ident:
        return ident, "", None, "other"
    parts = ident.split("\x00")
    if len(parts) != 3:
        return None
    name, file, line = parts
    try:
        line = int(line)
    except ValueError:
        return None
    cls = next((a[1:] for a in attrs.split("\x01") if a.startswith("c")), "") if attrs else ""
    if cls and "." not in name:
        name = f"{cls}.{name}"
    if file == "<built-in>":
        return name, "", None, "native"
    return name, file, line, "python"


def _thread_key(info: str):
    parts = info.split("\x00")
    if len(parts) == 3 and parts[1] == "<thread>":
        return parts[0], parts[2]
    return None


def read(data: bytes, source: str = "<input>", metric: str | None = None,
         thread_labels: dict | None = None) -> Profile:
    """``metric``: what the seconds measure (wall or cpu); default from the x-profmagic block, else wall.
    ``thread_labels``: pyinstrument thread ident (str) -> label; default from the x-profmagic block."""
    doc = load_json(data, source)
    if not isinstance(doc, dict):
        raise _err(source, "$", "expected a pyinstrument session object")
    records = doc.get("frame_records")
    if not isinstance(records, list):
        raise _err(source, "frame_records", "expected a list of [stack, seconds] pairs under 'frame_records' "
                                            "(a session saved with include_frame_records)")
    for k in ("start_time", "duration"):
        if not (isinstance(doc.get(k), (int, float)) and not isinstance(doc.get(k), bool)):
            raise _err(source, k, f"expected a number in {k!r}, got {doc.get(k)!r}")
    ext = ext_block(doc)
    if metric is None and ext.get("metric", "wall") not in ("wall", "cpu"):
        raise _err(source, f"{EXT}.metric", f"expected 'wall' or 'cpu', got {ext['metric']!r:.80}")
    metric = metric or ext.get("metric") or "wall"
    if metric not in ("wall", "cpu"):
        raise ValueError(f"metric must be 'wall' or 'cpu', got {metric!r}")
    if thread_labels is None and not (isinstance(ext.get("thread_labels", {}), dict)
                                      and all(isinstance(v, str) for v in ext.get("thread_labels", {}).values())):
        raise _err(source, f"{EXT}.thread_labels", "expected an object of thread labels")
    labels = {str(k): v for k, v in (thread_labels or ext.get("thread_labels") or {}).items()}
    other = "cpu" if metric == "wall" else "wall"
    b = StackBuilder()
    cache: dict[str, int] = {}
    t = 0.0
    for i, rec in enumerate(records):
        where = f"frame_records[{i}]"
        if not (isinstance(rec, (list, tuple)) and len(rec) == 2 and isinstance(rec[0], list)):
            raise _err(source, where, "expected a [stack (list of strings), seconds] pair")
        stack, secs = rec
        if not isinstance(secs, (int, float)) or isinstance(secs, bool) or not math.isfinite(secs) or secs < 0:
            raise _err(source, f"{where}[1]", f"expected a finite number of seconds ≥ 0, got {secs!r}")
        thread = "pyinstrument"
        fids = []
        for j, info in enumerate(stack):
            if not isinstance(info, str):
                raise _err(source, f"{where}[0][{j}]", f"expected a frame string, got {info!r}")
            if j == 0:
                tk = _thread_key(info)
                if tk is not None:
                    thread = labels.get(tk[1], tk[0])
                    continue
            fid = cache.get(info)
            if fid is None:
                args = _frame_args(info)
                if args is None:
                    raise _err(source, f"{where}[0][{j}]", "expected 'function\\x00file\\x00line' with an "
                                                          f"integer line, got {info!r}")
                fid = cache[info] = b.frame(*args)
            fids.append(fid)
        b.add(b.stack(thread, fids), samples=1, time=t, **{metric: float(secs), other: np.nan})
        t += float(secs)
    if not records:
        raise _err(source, "frame_records", "the session holds no samples; expected at least one "
                                            f"(duration {doc['duration']:.3g} s)")
    meta = {
        "format": NAME, "source": source, "metric": metric,
        "duration": float(doc["duration"]), "start_time": float(doc["start_time"]),
        "interval": doc.get("min_interval"),
        "rate": (len(records) / doc["duration"]) if doc["duration"] else None,
        "target": doc.get("target_description"),
        "process_cpu_time": doc.get("cpu_time"),
    }
    from ._common import carried_meta
    meta.update(carried_meta({k: v for k, v in ext.items() if k not in ("thread_labels", "threads", "metric")},
                             source, EXT))
    for row in ext.get("threads") or ():
        if isinstance(row, dict) and row.get("label") in b.threads:
            b.thread(row["label"], **thread_attrs(row))
    other = "cpu" if metric == "wall" else "wall"
    return b.build(metric=metric, meta=meta, raw=Raw(bytes(data), NAME, filename="profile.pyisession"),
                   unknown_metrics=(other,))

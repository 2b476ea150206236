"""profmagic's sampled allocation captures (``.memsample``; backends/memsample.py records them).

The file: the line ``profmagic-memsample 1``, one line of JSON (``info``: the mean sampling interval in
bytes, the clock's start and end in ns, pid, main thread, counts; ``names``: native thread id -> name;
``stacks``: per stack id from 1, its frames ``[name, file, line]`` leaf first), then the events, 32
bytes each, little-endian: time since the start (ns, int64), size (int64; negative: the free of a
sampled allocation), weight (float64, bytes the event stands for; negative for a free), stack id
(uint32, 0: no Python stack) and native thread id (uint32).

Metrics, per (thread, stack), estimated from the samples: ``bytes`` alive at the estimated high-water
mark, ``allocated`` and ``allocations``. ``meta["memory_timeline"]``: the estimated live bytes every
10 ms. A figure ``B`` made of allocations smaller than the interval has a 95% half-width of about
1.96 sqrt(B x interval) (``halfwidth``); larger allocations are sampled almost surely and add less.
"""
from __future__ import annotations

import json
import math
import os

import numpy as np

from ..errors import ProfileFormatError
from ..model import Profile, Raw, StackBuilder
from ..threads import thread_label
from ..uncertainty import Z
from .registry import Format

NAME = "memsample"
FORMAT = Format(NAME, __name__, raw_suffix=".memsample", label="sampled allocations (.memsample)",
                opens="profmagic.load")
MAGIC = b"profmagic-memsample 1\n"
EVENT = np.dtype([("t_ns", "<i8"), ("size", "<i8"), ("weight", "<f8"), ("stack", "<u4"), ("tid", "<u4")])
MAX_HEADER = 256 << 20     # bytes of the JSON line
MAX_STACKS = 1 << 22
MAX_DEPTH = 128            # frames per stack (the tracker keeps at most this many)
MAX_EVENTS = 1 << 28
SNAPSHOT = 0.01            # seconds between points of the memory timeline
MAX_POINTS = 100_000       # points of the timeline (a longer capture gets wider steps)
NO_GIL = "[allocated without the GIL: no Python stack]"
OWN_PREFIX = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
OWN_NAMES = ("start", "stop", "finish", "close", "_exit", "__enter__", "__exit__")


def sniff(head: bytes) -> bool:
    return head.startswith(MAGIC)


def write(events: bytes, info: dict, names: dict, stacks: list) -> bytes:
    """A capture's bytes (the tracker's output and what the recorder knew)."""
    head = json.dumps({"info": info, "names": {str(k): v for k, v in names.items()}, "stacks": stacks},
                      separators=(",", ":"))
    return MAGIC + head.encode() + b"\n" + events


def halfwidth(nbytes, interval: float):
    """The 95% half-width of a sampled estimate of ``nbytes`` made of allocations smaller than the
    interval (an upper bound when some are larger)."""
    return Z * np.sqrt(np.maximum(np.asarray(nbytes, dtype=np.float64), 0.0) * float(interval))


def _fail(msg: str, source: str, **where) -> ProfileFormatError:
    return ProfileFormatError(f"memsample capture: {msg}", source=source, **where)


def _int(v, name: str, source: str, lo: int = 0, hi: int = (1 << 63) - 1) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise _fail(f"expected an integer from {lo} to {hi}", source, where=f"info.{name}")
    return v


def _header(data: bytes, source: str) -> tuple[dict, int]:
    if not data.startswith(MAGIC):
        raise _fail("expected the first line 'profmagic-memsample 1'", source, line=1)
    end = data.find(b"\n", len(MAGIC), len(MAGIC) + MAX_HEADER + 1)
    if end < 0:
        raise _fail(f"expected the JSON header to end with a newline within {MAX_HEADER:,} bytes", source, line=2)
    try:
        head = json.loads(data[len(MAGIC):end])
    except (ValueError, RecursionError) as e:
        raise _fail(f"the header is not JSON ({e})", source, line=2) from None
    if not isinstance(head, dict) or not all(isinstance(head.get(k), t) for k, t in
                                             (("info", dict), ("names", dict), ("stacks", list))):
        raise _fail("expected a JSON object with info (object), names (object) and stacks (list)", source, line=2)
    return head, end + 1


def _info(info: dict, source: str) -> dict:
    iv = info.get("interval")
    if isinstance(iv, bool) or not isinstance(iv, (int, float)) or not (1 <= iv <= 1 << 40):
        raise _fail("expected a sampling interval from 1 byte to 1 TiB", source, where="info.interval")
    out = {"interval": float(iv)}
    for k in ("t0_ns", "t_end_ns", "pid", "main", "samples", "calls", "lost"):
        out[k] = _int(info.get(k, 0), k, source)
    t0u = info.get("t0_unix")
    out["t0_unix"] = float(t0u) if isinstance(t0u, (int, float)) and not isinstance(t0u, bool) and math.isfinite(t0u) else None
    out["numpy"], out["raw"] = bool(info.get("numpy")), bool(info.get("raw"))
    if out["t_end_ns"] < out["t0_ns"]:
        raise _fail("expected t_end_ns at or after t0_ns", source, where="info.t_end_ns")
    return out


def _stacks(stacks: list, source: str) -> list[list[tuple[str, str, int | None]]]:
    if len(stacks) > MAX_STACKS:
        raise _fail(f"more than {MAX_STACKS:,} stacks", source, where="stacks")
    out = []
    for i, s in enumerate(stacks):
        if not isinstance(s, list) or len(s) > MAX_DEPTH:
            raise _fail(f"expected a list of at most {MAX_DEPTH} frames", source, where=f"stacks[{i}]")
        frames = []
        for j, f in enumerate(s):
            if (not isinstance(f, list) or len(f) != 3 or not isinstance(f[0], str) or not isinstance(f[1], str)
                    or isinstance(f[2], bool) or not isinstance(f[2], int) or not -1 <= f[2] < 1 << 31):
                raise _fail("expected [name, file, line]", source, where=f"stacks[{i}][{j}]")
            frames.append((f[0], f[1], f[2] if f[2] >= 0 else None))
        out.append(frames)
    return out


def _events(data: bytes, start: int, nstacks: int, source: str) -> np.ndarray:
    n, rest = divmod(len(data) - start, EVENT.itemsize)
    if rest:
        raise _fail(f"the events are not whole: {rest} bytes after the last {EVENT.itemsize}-byte event", source,
                    offset=len(data) - rest)
    if n > MAX_EVENTS:
        raise _fail(f"more than {MAX_EVENTS:,} events", source, offset=start)
    ev = np.frombuffer(data, dtype=EVENT, count=n, offset=start)
    bad = ~np.isfinite(ev["weight"]) | (ev["size"] == 0) | (np.sign(ev["size"]) != np.sign(ev["weight"])) \
        | (np.abs(ev["weight"]) + 1e-6 < np.abs(ev["size"])) | (ev["stack"] > nstacks) | (ev["t_ns"] < 0)
    if n > 1:
        bad[1:] |= ev["t_ns"][1:] < ev["t_ns"][:-1]
    if bad.any():
        i = int(np.argmax(bad))
        raise _fail("expected a time in order, a nonzero size, a finite weight of the size's sign and at least "
                    f"its bytes, and a stack id up to {nstacks}", source, offset=start + i * EVENT.itemsize,
                    where=f"event {i}")
    return ev


def _timeline(t: np.ndarray, live: np.ndarray, end: float, peak: float, t0_unix: float | None) -> dict:
    """Estimated live bytes every SNAPSHOT seconds (wider steps past MAX_POINTS), the highest
    estimate between them, and when the high-water mark was reached."""
    step = max(SNAPSHOT, end / MAX_POINTS)
    grid = np.arange(1, int(math.ceil(max(end, step) / step)) + 1) * step
    if len(t):
        idx = np.searchsorted(t, grid, side="right") - 1
        heap = np.where(idx >= 0, live[np.clip(idx, 0, None)], 0.0)
        cut = np.searchsorted(t, np.concatenate([[0.0], grid]), side="left")
        cut[-1] = len(t)
        hi = np.full(len(grid), -np.inf)
        nonempty = cut[1:] > cut[:-1]
        if nonempty.any():
            hi[nonempty] = np.maximum.reduceat(live, cut[:-1][nonempty])
        ip = np.maximum(hi, np.concatenate([[0.0], heap[:-1]]))
    else:
        heap = ip = np.zeros(len(grid))
    out = {"t0_unix": t0_unix, "end": end, "time": [round(float(x), 6) for x in grid],
           "heap": [int(round(h)) for h in heap], "peak_bytes": int(round(peak)),
           "interval_peaks": [int(round(x)) for x in ip], "sampled": True,
           "note": "heap: live bytes estimated from the sampled allocations and their frees"}
    if len(t) and peak > 0:
        i = int(np.searchsorted(grid, float(t[int(np.argmax(live))]), side="left"))
        i = min(i, len(grid) - 1)
        out["peak_between"] = [float(grid[i - 1]) if i > 0 else 0.0, float(grid[i])]
    return out


def read(data: bytes, source: str = "<input>") -> Profile:
    head, start = _header(data, source)
    info = _info(head["info"], source)
    stacks = _stacks(head["stacks"], source)
    names = {}
    for k, v in head["names"].items():
        if not k.isdigit() or not isinstance(v, str):
            raise _fail("expected native thread id -> name", source, where=f"names.{k[:40]}")
        names[int(k)] = v
    ev = _events(data, start, len(stacks), source)
    interval = info["interval"]
    t = ev["t_ns"].astype(np.float64) / 1e9
    w = ev["weight"]
    live = np.cumsum(w)
    k = int(np.argmax(live)) if len(ev) else -1
    peak = max(float(live[k]), 0.0) if len(ev) else 0.0
    key = (ev["tid"].astype(np.int64) << 32) | ev["stack"].astype(np.int64)
    keys, inv = np.unique(key, return_inverse=True)
    n = len(keys)
    upto = slice(0, k + 1)
    at_peak = np.bincount(inv[upto], weights=w[upto], minlength=n)
    alive_n = int(np.sign(ev["size"][upto]).sum())
    alloc = ev["size"] > 0
    allocated = np.bincount(inv[alloc], weights=w[alloc], minlength=n)
    count = np.bincount(inv[alloc], weights=w[alloc] / ev["size"][alloc], minlength=n)
    b = StackBuilder()
    pid, main = info["pid"], info["main"]
    labels: dict[int, int] = {}
    for tid in sorted({int(x >> 32) for x in keys}, key=lambda x: (x != main, x)):
        name = names.get(tid)
        labels[tid] = b.thread(thread_label(tid, name), tid=tid, pid=pid, name=name, python=True)
    dropped = 0.0
    for j, kk in enumerate(keys):
        tid, sid = int(kk >> 32), int(kk & 0xFFFFFFFF)
        frames = stacks[sid - 1] if sid else []
        if any(name.rsplit(".", 1)[-1] in OWN_NAMES and file.startswith(OWN_PREFIX) for name, file, _ in frames):
            dropped += at_peak[j]   # the recorder's own start and stop
            continue
        fids = [b.frame(name, file or None, line, "python") for name, file, line in reversed(frames)]
        b.add(b.stack(labels[tid], fids or [b.frame(NO_GIL, None, None, "other")]), samples=0,
              bytes=int(round(max(at_peak[j], 0.0))), allocated=int(round(allocated[j])),
              allocations=int(round(count[j])))
    end = max((info["t_end_ns"] - info["t0_ns"]) / 1e9, float(t[-1]) if len(t) else 0.0)
    hw = float(halfwidth(peak, interval))
    kib = f"{interval / 1024:g} KiB"
    label = (f"memory estimated by sampling: about one allocation per {kib} allocated, each weighted by the bytes "
             f"it stands for; the high-water mark {_mb(peak)} ± {_mb(hw)} (95%, {alive_n:,} sampled allocations "
             f"alive there); a function's B bytes ± 1.96·sqrt(B × {kib})")
    if info["lost"]:
        label += f"; {info['lost']:,} sampled events were lost (no memory for the log): figures are low"
    meta = {"format": NAME, "source": source, "backend": NAME, "metrics": ["bytes", "allocated", "allocations"],
            "duration": end, "pid": pid, "main_thread": b.threads[labels[main]] if main in labels else None,
            "peak_memory": int(round(peak)), "memory_mode": f"sampled: one allocation per {kib} on average",
            "memory_timeline": _timeline(t, live, end, peak, info["t0_unix"]),
            "memory_sampling": {"interval": interval, "samples": info["samples"], "calls": info["calls"],
                                "live_samples_at_peak": alive_n, "peak_halfwidth": hw, "lost": info["lost"],
                                "numpy": info["numpy"], "raw": info["raw"]},
            "approximate": label, "dropped_own_bytes": int(round(dropped)),
            "metric_labels": {"bytes": f"bytes alive at the high-water mark, estimated by sampling (± {_mb(hw)}, 95%)",
                              "allocated": "bytes allocated, estimated by sampling",
                              "allocations": "allocations, estimated by sampling"}}
    return b.build(metric="bytes", meta=meta, raw=Raw(data, NAME, filename=f"profmagic-memsample-{pid}.memsample"),
                   metrics=("bytes", "allocated", "allocations"))


def _mb(x: float) -> str:
    return f"{x / 1e6:.2f} MB" if abs(x) >= 1e5 else f"{x / 1e3:.1f} kB"

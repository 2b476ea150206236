"""The children's capture: one ``<pid>.jsonl`` per child process that sampled itself
(``childsampler.py``, ``%%profile --subprocesses``).

Line 1 is a header ``{"v": 1, "pid": …, "ppid": …, "argv": […], "t0": …, "rate": …}``; then one
JSON array per record: ``["f", id, name, file, line]`` (a frame), ``["n", name]`` (the process's
multiprocessing name) and ``["s", time, tid, thread name, wall, cpu, [frame ids, root first]]``
(a sample). A torn last line (the child was killed mid-write) is dropped and counted.
"""
from __future__ import annotations

import json

from ..errors import ProfileFormatError
from ..model import Profile, Raw, StackBuilder
from ..threads import thread_label

NAME = "profmagic-children"


def sniff(head: bytes) -> bool:
    h = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    return h.startswith(b'{"v":1,"pid":')


def read(data: bytes, source: str = "<child>", t0: float | None = None) -> Profile:
    """One child's capture as a Profile (wall and cpu per sample). Times count from ``t0`` (the
    parent's start, on the same perf_counter clock), else from the child's own start."""
    b = StackBuilder()
    head = None
    ids: dict[int, int] = {}
    name = None
    torn = 0
    last_t = None
    lines = data.split(b"\n")
    offset = 0
    for n, raw in enumerate(lines, 1):
        here, offset = offset, offset + len(raw) + 1
        if not raw:
            continue
        try:
            rec = json.loads(raw)
        except ValueError:
            if n == len(lines) or (n == len(lines) - 1 and not lines[-1]):
                torn += 1
                continue
            raise ProfileFormatError("expected one JSON record per line", source=source, line=n, offset=here)
        if head is None:
            if not isinstance(rec, dict) or rec.get("v") != 1:
                raise ProfileFormatError('expected the header {"v": 1, "pid": ...}', source=source, line=n)
            head = rec
            if t0 is None:
                t0 = float(head.get("t0") or 0.0)
            continue
        try:
            kind = rec[0]
            if kind == "f":
                ids[rec[1]] = b.frame(rec[2], rec[3], rec[4], "python")
            elif kind == "n":
                name = rec[1]
            elif kind == "s":
                _, t, nid, tname, wall, cpu, stack = rec
                th = b.thread(thread_label(nid, tname), tid=nid, name=tname, pid=head.get("pid"), python=True)
                b.add(b.stack(th, [ids[f] for f in stack]), samples=1, time=t - t0, wall=float(wall),
                      cpu=float("nan") if cpu is None else float(cpu))
                last_t = t
            else:
                raise ValueError(kind)
        except (ValueError, TypeError, KeyError, IndexError) as e:
            raise ProfileFormatError(f"expected a frame ['f', ...], name ['n', ...] or sample ['s', ...] "
                                     f"record ({type(e).__name__}: {e})", source=source, line=n) from None
    if head is None:
        raise ProfileFormatError("empty child capture: no header line", source=source, offset=0)
    meta = {"format": NAME, "source": source, "backend": "childsampler", "rate": head.get("rate"),
            "pid": head.get("pid"), "ppid": head.get("ppid"), "argv": head.get("argv"), "process_name": name,
            "started_at": head.get("t0", t0) - t0, "last_sample_at": None if last_t is None else last_t - t0,
            "torn_lines": torn}
    return b.build(metric="wall", meta=meta, raw=Raw(data, NAME, options={"t0": t0}))

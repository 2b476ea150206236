"""The children's capture: one ``<pid>.jsonl`` per child process that sampled itself
(``childsampler.py``, ``%%profile --subprocesses``).

Line 1 is a header ``{"v": 1, "pid": …, "ppid": …, "argv": […], "t0": …, "rate": …}``; then one
JSON array per record: ``["f", id, name, file, line]`` (a frame), ``["n", name]`` (the process's
multiprocessing name) and ``["s", time, tid, thread name, wall, cpu, [frame ids, root first], reason,
runq]`` (a sample; ``reason``, one of ``reasons.REASONS``, and ``runq``, run-queue seconds, are
optional: a capture without reasons has no ``reason`` column, as from a backend that gives none).
A torn last line (the child was killed mid-write) is dropped and counted.
"""
from __future__ import annotations

import json
import math

from .. import reasons
from ..errors import ProfileFormatError
from ..model import Profile, Raw, StackBuilder
from ..threads import thread_label
from ..transforms.cpu_split import split_cpu_at_stack_changes
from .registry import Format

NAME = "profmagic-children"
FORMAT = Format(NAME, __name__, raw_suffix=".jsonl", mime="application/x-ndjson")


def sniff(head: bytes) -> bool:
    h = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    return h.startswith(b'{"v":1,"pid":')


def _num(v) -> bool:
    return type(v) in (int, float) and math.isfinite(v)


def _header(rec) -> bool:
    argv = rec.get("argv", []) if isinstance(rec, dict) else None
    return (isinstance(rec, dict) and rec.get("v") == 1 and type(rec.get("pid")) is int
            and _num(rec.get("t0", 0.0)) and _num(rec.get("rate", 1)) and type(argv) is list
            and all(type(a) is str for a in argv))


_REASONS = frozenset(reasons.REASONS)
REASON_EXPECTED = "a reason (" + ", ".join(reasons.REASONS) + ")"


def _record(rec, ids) -> bool:
    """A frame, name or sample record with the types the child writes (a sample's reason and
    run-queue seconds are checked by ``_reason``)."""
    kind = rec[0] if type(rec) is list and rec else None
    if kind == "f":
        return len(rec) == 5 and type(rec[1]) is int and type(rec[2]) is str and type(rec[3]) is str \
            and type(rec[4]) is int
    if kind == "n":
        return len(rec) == 2 and type(rec[1]) is str
    return kind == "s" and 7 <= len(rec) <= 9 and _num(rec[1]) and (rec[2] is None or type(rec[2]) is int) \
        and type(rec[3]) is str and _num(rec[4]) and (rec[5] is None or _num(rec[5])) \
        and type(rec[6]) is list and all(type(f) is int and f in ids for f in rec[6])


def _reason(rec) -> str | None:
    """What is wrong with a sample's optional reason and run-queue fields, or None."""
    if len(rec) > 7 and (type(rec[7]) is not str or rec[7] not in _REASONS):
        return f"field 8 (the reason): expected {REASON_EXPECTED}, got {json.dumps(rec[7])[:40]}"
    if len(rec) > 8 and not (_num(rec[8]) and rec[8] >= 0):
        return f"field 9 (run-queue seconds): expected a number >= 0, got {json.dumps(rec[8])[:40]}"
    return None


def read(data: bytes, source: str = "<child>", t0: float | None = None) -> Profile:
    """One child's capture as a Profile (wall and cpu per sample; the CPU split where the stack changed,
    as for the built-in sampler: ``transforms.split_cpu_at_stack_changes``). Times count from ``t0`` (the
    parent's start, on the same perf_counter clock), else from the child's own start. Every fault
    but a torn last line is a ProfileFormatError naming the line."""
    b = StackBuilder()
    head = None
    ids: dict[int, int] = {}
    name = None
    torn = 0
    last_t = None
    with_reason = without = 0   # samples with a reason field, without one
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
            if not _header(rec):
                raise ProfileFormatError('expected the header {"v": 1, "pid": ..., "t0": ..., "rate": ..., '
                                         '"argv": [...]}', source=source, line=n)
            head = rec
            if t0 is None:
                t0 = float(head.get("t0") or 0.0)
            continue
        if not _record(rec, ids):
            raise ProfileFormatError("expected a frame ['f', id, name, file, line], a name ['n', name] or a sample "
                                     "['s', time, tid, thread, wall, cpu, [frame ids], reason, runq] (reason and "
                                     "runq optional)", source=source, line=n)
        if rec[0] == "f":
            ids[rec[1]] = b.frame(rec[2], rec[3], rec[4], "python")
        elif rec[0] == "n":
            name = rec[1]
        else:
            t, nid, tname, wall, cpu, stack = rec[1:7]
            th = b.thread(thread_label(nid, tname), tid=nid, name=tname, pid=head["pid"], python=True)
            frames = [ids[f] for f in stack]
            cpu = float("nan") if cpu is None else float(cpu)
            if len(rec) > 7:
                bad = _reason(rec)
                if bad:
                    raise ProfileFormatError(f"sample {bad}", source=source, line=n)
                with_reason += 1
                b.add(b.stack(th, frames, reason=rec[7]), samples=1, time=t - t0, wall=float(wall), cpu=cpu,
                      columns={"reason": rec[7], "runq": float(rec[8]) if len(rec) > 8 else 0.0})
            else:
                without += 1
                b.add(b.stack(th, frames), samples=1, time=t - t0, wall=float(wall), cpu=cpu)
            last_t = t
    if head is None:
        raise ProfileFormatError("empty child capture: no header line", source=source, offset=0)
    meta = {"format": NAME, "source": source, "backend": "childsampler", "rate": head.get("rate"),
            "pid": head["pid"], "image": head.get("image", 0), "ppid": head.get("ppid"), "argv": head.get("argv"),
            "process_name": name, "started_at": head.get("t0", t0) - t0,
            "last_sample_at": None if last_t is None else last_t - t0, "torn_lines": torn}
    if with_reason:
        meta["reasons"] = REASONS_META
    p = b.build(metric="wall", meta=meta, raw=Raw(data, NAME, options={"t0": t0}))
    if with_reason:   # samples written without a reason (mixed into a capture with them): unknown
        p = p.replace(stacks=p.stacks.assign(reason=p.stacks["reason"].fillna(reasons.UNKNOWN)) if without
                      else p.stacks,
                      samples=p.samples.assign(reason=p.samples["reason"].fillna(reasons.UNKNOWN),
                                               runq=p.samples["runq"].astype("float64").fillna(0.0)))
    return split_cpu_at_stack_changes(p)


REASONS_META = {"from": "each child sampled itself as the built-in sampler does (reasons.interval_reason): "
                        "run-queue time (schedstat), state, wchan and system call (/proc) and the leaf Python "
                        "call, read where a thread was off-CPU",
                "cannot_see": "native frames (a futex under a call it cannot name is 'unknown'); what a thread "
                              "did between passes; wakers"}

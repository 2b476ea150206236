"""Python frames spliced into perf's stacks from snapshots of the target's memory.

perf's recorder, on an interpreter perf cannot name (3.11; 3.12+ without the perf trampoline), runs a
poller (``backends/perf_pynames.py``) that reads every Python thread's stack at the sampling rate,
stamped with CLOCK_MONOTONIC as perf's events are; the snapshots follow the ``perf script`` text in
``#`` lines (that module's docstring gives their form). ``split`` takes them off the text,
``splice`` puts their Python frames in place of each record's interpreter frames, as eu-stack's reader
does (``eu_stack.with_python``: the k-th ``_PyEval_EvalFrameDefault`` from the root ran the k-th
eval-loop group of the snapshot, and a snapshot is used only when the counts agree):

* a ``sched:sched_switch`` record (an off-CPU interval, from the switch-out to the thread's next
  switch-in): a snapshot of that thread read wholly inside the interval. A blocked thread's Python
  stack does not change while it waits, so the names are exact.
* a ``cpu-clock`` sample: the thread's snapshot read nearest to it, within one sampling interval of
  the poller (``1/rate``); a running thread may have moved on meanwhile, so these names are near,
  not exact.

A record with no such snapshot, or one whose eval-loop count differs, keeps its native frames: never
wrong names. ``meta["python_names"]`` says how many records got names and by which rule.
"""
from __future__ import annotations

import bisect
from urllib.parse import unquote

from ..errors import ProfileFormatError
from .eu_stack import EVAL_LOOP, _py_groups, with_python

HEADER = "# profmagic pyframes"
MAX_SNAPSHOT_LINES = 10_000_000


def split(text: str) -> tuple[str, str | None]:
    """(perf script text, the pyframes section or None)."""
    at = text.find("\n" + HEADER + " ")
    if at < 0:
        return text, None
    return text[:at + 1], text[at + 1:]


def _facts(line: str, source: str, lineno: int) -> dict:
    out = {}
    for part in line[len(HEADER):].split():
        k, _, v = part.partition("=")
        out[k] = unquote(v)
    try:
        rate = float(out.get("rate", ""))
    except ValueError:
        rate = 0.0
    if not 0 < rate <= 1e6:
        raise ProfileFormatError(f"the pyframes header's rate={out.get('rate')!r}: expected a rate in Hz, "
                                 "above 0 and at most 1e6", source=source, line=lineno)
    out["rate"] = rate
    return out


def parse(section: str, first_line: int, source: str = "<input>") -> tuple[dict, dict]:
    """(header facts, {tid: [(start, end, groups)] sorted by start}) of a pyframes section; the
    section's first line is line ``first_line`` of the input."""
    lines = section.split("\n")
    facts = _facts(lines[0], source, first_line)
    stacks: dict[int, list] = {0: []}
    snaps: dict[int, list] = {}
    if len(lines) > MAX_SNAPSHOT_LINES:
        raise ProfileFormatError(f"{len(lines):,} pyframes lines: at most {MAX_SNAPSHOT_LINES:,}",
                                 source=source, line=first_line)
    for n, line in enumerate(lines[1:], first_line + 1):
        if not line:
            continue
        try:
            if line.startswith("# pystack "):
                sid, _, groups = line[10:].partition(" ")
                stacks[int(sid)] = _py_groups(groups, source, n) if groups else []
            elif line.startswith("# py "):
                t0_text, *entries = line[5:].split()
                t0 = float(t0_text)
                for e in entries:
                    tid, sid, d0, d1 = e.split(":")
                    groups = stacks[int(sid)]
                    if groups:
                        snaps.setdefault(int(tid), []).append((t0 + int(d0) * 1e-6, t0 + int(d1) * 1e-6, groups))
            elif not line.startswith("#"):
                raise ValueError("not a '#' line")
        except (ValueError, KeyError) as e:
            raise ProfileFormatError(f"pyframes line {line[:80]!r}: expected '# pystack ID GROUPS' or "
                                     f"'# py T0 TID:ID:D0:D1 ...' with IDs defined before use ({e})",
                                     source=source, line=n) from None
    for v in snaps.values():
        v.sort(key=lambda s: s[0])
    return facts, snaps


def splice(text: str, section: str, records: list, b, frame, source: str = "<input>") -> tuple[list, dict]:
    """``records`` (perf_script Samples and SideBands) with Python frames in place of the interpreter's
    where a snapshot matches (module docstring); ``b`` is the StackBuilder that holds the frames,
    ``frame`` interns one. Returns (records, meta)."""
    facts, snaps = parse(section, text.count("\n") + 1, source)
    near = 1.0 / facts["rate"]
    ins: dict[int, list] = {}     # tid -> its switch-in times
    for r in records:
        if getattr(r, "kind", None) == "SWITCH" and not r.text.startswith("OUT"):
            ins.setdefault(r.tid, []).append(r.time)
    for v in ins.values():
        v.sort()
    starts = {tid: [s[0] for s in v] for tid, v in snaps.items()}
    done: dict[tuple, tuple | None] = {}
    counts = {"off_named": 0, "off": 0, "cpu_named": 0, "cpu": 0}
    out = []
    for r in records:
        ev = getattr(r, "event", None)
        if ev not in ("sched:sched_switch", "cpu-clock") or not r.leaf_first or r.tid not in snaps:
            out.append(r)   # (a thread with no Python stack in any snapshot is not counted)
            continue
        mine, st = snaps[r.tid], starts[r.tid]
        if ev == "sched:sched_switch":
            counts["off"] += 1
            tin = ins.get(r.tid, [])
            k = bisect.bisect_right(tin, r.time)
            end = tin[k] if k < len(tin) else float("inf")
            i = bisect.bisect_left(st, r.time)
            cands = []
            while i < len(mine) and mine[i][0] < end:
                if mine[i][1] <= end:
                    cands.append(i)
                    break
                i += 1
        else:
            counts["cpu"] += 1
            i = bisect.bisect_left(st, r.time)
            cands = sorted((j for j in (i - 1, i) if 0 <= j < len(mine)
                            and abs((mine[j][0] + mine[j][1]) / 2 - r.time) <= near),
                           key=lambda j: abs((mine[j][0] + mine[j][1]) / 2 - r.time))
        new = None
        for j in cands:
            key = (id(r.leaf_first), id(mine[j][2]))
            if key not in done:
                done[key] = _spliced(r.leaf_first, mine[j][2], b, frame)
            new = done[key]
            if new is not None:
                break
        if new is None:
            out.append(r)
            continue
        counts["off_named" if ev == "sched:sched_switch" else "cpu_named"] += 1
        out.append(r._replace(leaf_first=new))
    meta = {"from": (f"snapshots of the target's Python stacks read from its memory at {facts['rate']:g} Hz "
                     f"(backends/perf_pynames.py; {facts.get('reads', '?')} reads of {facts.get('read_ms', '?')} ms "
                     "each on average)"),
            "off_cpu": (f"{counts['off_named']:,} of the Python threads' {counts['off']:,} switch-outs named by "
                        "a snapshot taken inside their off-CPU interval (exact: a waiting thread's stack does "
                        "not change)"),
            "on_cpu": (f"{counts['cpu_named']:,} of the Python threads' {counts['cpu']:,} cpu-clock samples named "
                       f"by the thread's nearest snapshot within {near * 1e3:g} ms (near: a running thread moves "
                       "on)"),
            "unnamed": "records with no matching snapshot keep their native frames",
            **({"error": facts["error"]} if facts.get("error") else {}), "counts": counts}
    return out, meta


def _spliced(leaf_first: tuple, groups: list, b, frame) -> tuple | None:
    frames = [b._frames[f] for f in reversed(leaf_first)]
    if not any(f[0] == EVAL_LOOP for f in frames):
        return None
    named, _ = with_python(frames, {"after": groups})
    if named is None:
        return None
    return tuple(frame(n, f or None, ln, k) for n, f, ln, k in reversed(named))

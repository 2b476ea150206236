"""eu-stack text (elfutils), plain and as sampled by profmagic's eu-stack recorder.

Plain eu-stack prints one snapshot::

    PID 1234 - process
    TID 1234:
    #0  0x00007f32714e3503 __GI___clock_nanosleep - /usr/lib/x86_64-linux-gnu/libc.so.6
        ../sysdeps/unix/sysv/linux/clock_nanosleep.c:71:10
    #1  0x00007f3271915ada pysleep

Every output form is read: ``PID n - process`` (a live process) or ``PID n - core`` (``--core``);
``-m`` adds `` - MODULE`` after the name (a path for a process, a file name for a core; `` - MODULE``
alone for a frame without a name); ``-s`` adds an indented ``file:line[:col]`` line; ``-i``
adds inlined callers as further frames at the same address, each with its own source line; ``-d``
(DWARF names) and ``-r`` (mangled names) change only the names; ``-a`` puts `` - 1`` (a caller's
pc-1) or spaces between address and name; ``-b``'s indented build-id lines are skipped; ``-l``
prints a module memory map first, whose file paths then replace ``-m``'s bare file names; ``-q``
leaves names out. As stackcollapse-elfutils.pl does, each ``TID`` block is one sample (count 1),
frames are listed leaf first, and a frame without a name is ``[unknown]``. With ``raw_names=True``
names are taken exactly as that script takes them (everything after the address); by default the
module goes to the frame's file (a ``-s`` source file takes its place), runs of interpreter
frames fold into ``[python]``, and C/C++ names take the one form perf and py-spy give them too
(``native_names.py``: no return type or parameters, ``clone3`` for ``__clone3``).

The recorder's sampled form is the same text with a header line, a ``# t=SECONDS`` line before each
snapshot and facts after each ``TID n:``::

    # profmagic eu-stack sampler pid=1234 interval=0.01 duration=2.0 snapshots=200 ...
    # python-threads 1234=MainThread 1240=Thread-1
    # t=0.010213
    PID 1234 - process
    TID 1240: state=R cpu_ns=9000000 comm=python3 wchan=0 syscall=running
    #0  0x00005555555551a9 busy - /tmp/libcthread.so

A sampled capture has wall time (each sample weighs the time since its thread's previous
snapshot) and CPU time (each snapshot's measured CPU delta, given to an on-CPU end of its interval:
see ``_weigh``), per-sample ``state``, ``on_cpu``, ``cpu_delta`` and ``cpu_moved`` columns, and a
stack ``on_cpu`` column.
"""
from __future__ import annotations

import re
from typing import NamedTuple
from urllib.parse import unquote

import numpy as np

from .. import reasons
from ..threads import thread_label
from ..errors import ProfileFormatError
from ..model import Profile, Raw, StackBuilder
from . import native_names
from ._common import MAX_DEPTH, MAX_THREADS, text_meta, too_deep, too_many_threads
from .folded import decode
from .registry import Format

NAME = "eu-stack"
FORMAT = Format(NAME, __name__, raw_suffix=".eu-stack.txt", mime="text/plain")
HEADER = "# profmagic eu-stack sampler"

_PID = re.compile(r"^PID (\d*)(?: - (\w+))?")
_TID = re.compile(r"^TID (\d*):?(.*)$")
_FRAME = re.compile(r"^#(\d*) *0x([0-9a-fA-F]*) ?(.*)$")
_SRC = re.compile(r"^\s+(\S.*?):(\d+)(?::\d+)?\s*$")
# " - MODULE" after a name (or alone): a path, or a core's bare file name (no spaces or C++ punctuation).
_MODULE = re.compile(r"^(.*?)(?:^| )- ((?:/|\[).*|[^\s()<>,*&]+)$")
_ACTIVATION = re.compile(r"^(?:- 1 |\s+)(?=\S)")  # -a: " - 1 " (pc-1, a caller) or spaces (the leaf)
_MAP = re.compile(r"^0x[0-9a-fA-F]+-0x[0-9a-fA-F]+ (\S.*?)\s*$")  # -l: "0xLO-0xHI module"
_T = re.compile(r"^# t=([0-9.eE+-]+)\s*$")
ON_CPU_STATES = ("R",)
RESTART = ("restart_syscall", "219")  # x86_64: a timed wait resumed after a ptrace stop

# The CPython interpreter's own frames: eval loop, call glue and vectorcall trampolines.
INTERP = re.compile(
    r"^(_?PyEval_\w*|_PyFunction_Vectorcall|_?PyObject_(Vectorcall\w*|Call\w*|FastCall\w*|MakeTpCall)"
    r"|_PyVectorcall_Call|_PyObject_VectorcallTstate|cfunction_\w+|method_vectorcall\w*|slot_tp_\w+"
    r"|vectorcall_\w+|function_code_fastcall|call_function|do_call_core|_PyEval_Vector|PyEval_EvalCode"
    r"|_PyObject_Call_Prepend|object_vacall|call_unbound\w*|partial_\w*call\w*|method_call"
    r"|builtin_exec\w*|run_eval_code_obj|run_mod|pyrun_\w+|_PyRun_\w+|PyRun_\w+|_PyEval_EvalFrame\w*)$")
PY_EVAL = re.compile(r"^_?PyEval_EvalFrame")
# CPython 3.12+'s perf trampolines, named by the recorder from /tmp/perf-PID.map: each calls one eval
# loop. eu-stack cannot unwind through them (JIT code without CFI), so a stack ends at the first.
TRAMPOLINE_FILE = re.compile(r"^/tmp/perf-\d+\.map$")


def _trampoline(f) -> bool:
    return f[1] is not None and f[0].startswith("py::") and bool(TRAMPOLINE_FILE.match(f[1]))


def _interp(f) -> bool:
    return bool(INTERP.match(f[0])) or _trampoline(f)
EVAL_LOOP = "_PyEval_EvalFrameDefault"  # one native frame per call of the eval loop


def sniff(head: bytes) -> bool:
    text = decode(head)
    if text.startswith(HEADER):
        return True
    for line in text.split("\n", 20)[:20]:
        if line.strip():
            return bool(re.match(r"^PID \d+ - (process|core)( module memory map)?\s*$", line))
    return False


def _facts(rest: str) -> dict:
    out = {}
    for part in rest.split():
        k, sep, v = part.partition("=")
        if sep:
            out[k] = v
    return out


def fold_python(frames: list[tuple[str, str | None, int | None, str]]):
    """Runs of interpreter frames that contain the eval loop become one ``[python]`` frame.

    ``frames`` are (name, file, line, kind), root first.
    """
    out, run = [], []

    def flush():
        if any(PY_EVAL.match(f[0]) for f in run):
            out.append(("[python]", None, None, "python"))
        else:
            out.extend(run)
        run.clear()

    for f in frames:
        if _interp(f):
            run.append(f)
        else:
            flush()
            out.append(f)
    flush()
    return out


def _waiting(facts: dict) -> bool:
    return facts.get("state") in ("S", "D") or facts.get("syscall") in RESTART


def _label_on_cpu(blocks: list) -> list[bool]:
    """Was each thread running when eu-stack stopped it? ``insys=0`` (the recorder saw its leaf pc
    elsewhere than just after a ``syscall`` instruction): yes. ``insys=1``: it was inside a call,
    a wait or a fast one (a busy loop reading CLOCK_THREAD_CPUTIME_ID is stopped there 9 times in
    10). A call site (leaf pc) is a wait when most of its samples read S/D just after eu-stack
    detached or 1 in 10 were resuming a timed wait (nanosleep's site: 322 of 360 S; the busy loop's
    clock_gettime site: 5 of 118, 0 resuming). One sample's state alone is noisy: a thread stopped
    in nanosleep often reads R by then. Without ``insys``, that state is all there is."""
    sites: dict[int, list[int]] = {}
    for bl in blocks:
        if bl.facts.get("insys") == "1" and bl.frames:
            n = sites.setdefault(bl.frames[0][3], [0, 0, 0])
            n[0] += 1
            n[1] += bl.facts.get("state") in ("S", "D")
            n[2] += bl.facts.get("syscall") in RESTART
    out = []
    for bl in blocks:
        insys = bl.facts.get("insys")
        if insys == "0":
            out.append(True)
        elif insys == "1" and bl.frames:
            n, s, r = sites[bl.frames[0][3]]
            out.append(not (s > n / 2 or r >= n / 10))
        else:
            out.append(bl.facts.get("state", "?") in ON_CPU_STATES)
    return out


def _weigh(blocks: list, fids: list, snap_times: list[float], interval: float | None, source: str) -> dict:
    """``wall``, ``cpu``, ``cpu_delta`` and ``on_cpu``, one per block of a sampled capture.

    Wall: eu-stack snapshots a sleeping process more often than a busy one (the helper gets a core
    more easily), so each sample weighs the time since its thread's previous snapshot, not a uniform
    share. A thread's first sample weighs the time since the previous snapshot of the process (it
    was born in between), or the nominal interval at the first snapshot.

    CPU: a snapshot's delta covers the interval since the thread's previous snapshot, whose two ends
    we saw. The state read with each snapshot is noisy: it is read just after eu-stack detaches, and
    a thread stopped inside nanosleep is often runnable by then (measured on a 5 ms busy / 15 ms
    sleep C thread: 20% of its nanosleep samples read R, and giving them CPU put 9 points of CPU on
    the sleep; with 5 ms sleeps, 57%). So a stack counts as on-CPU when most of its samples read R
    and fewer than 1 in 10 were resuming a timed wait (``restart_syscall``: the thread was stopped
    inside nanosleep/poll/futex; a busy stack never shows it: 0 of 434 samples). The delta goes to the end
    of the interval if that stack is on-CPU (after a sleep, the CPU is the start of what runs now),
    else to the start if that one is (the tail of a busy stack before it slept). With neither end
    on-CPU the thread ran only between them, in a stack not seen; that CPU is shared by the thread's
    on-CPU stacks' samples by wall time (by all its samples if none is on-CPU). CPU so never lands on
    a stack the thread is mostly seen asleep in, unless the thread is never seen running.
    ``cpu_moved``: per sample, the CPU so shared onto it, less its own delta shared out (uncertainty.py
    widens a function's CPU by it: that CPU was spent away from any stack change).
    """
    n = len(blocks)
    on_cpu = _label_on_cpu(blocks)
    prev_snap = {t: (snap_times[i - 1] if i else None) for i, t in enumerate(snap_times)}
    wall, cpu, delta, prev, moved = [0.0] * n, [0.0] * n, [0.0] * n, [None] * n, [0.0] * n
    last: dict[str, int] = {}
    runs: dict[tuple, list[int]] = {}
    for i, bl in enumerate(blocks):
        try:
            delta[i] = int(bl.facts.get("cpu_ns", "0")) / 1e9
        except ValueError:
            raise ProfileFormatError(f"cpu_ns={bl.facts.get('cpu_ns')!r} is not an integer",
                                     source=source, line=bl.line) from None
        r = runs.setdefault((bl.tid, fids[i]), [0, 0, 0])  # samples, on-CPU, resuming a timed wait
        r[0] += 1
        r[1] += on_cpu[i]
        r[2] += bl.facts.get("syscall") in RESTART
        j = prev[i] = last.get(bl.tid)
        if j is not None:
            wall[i] = max(bl.time - blocks[j].time, 0.0)
        elif prev_snap[bl.time] is not None:
            wall[i] = bl.time - prev_snap[bl.time]
        else:
            wall[i] = interval or 0.0
        last[bl.tid] = i
    cpu_stack = []
    for i, bl in enumerate(blocks):
        k, r, waits = runs[(bl.tid, fids[i])]
        cpu_stack.append(r > k / 2 and waits < k / 10)
    unseen: dict[str, float] = {}
    mine: dict[str, list[int]] = {}   # tid -> its blocks: one pass, not one per thread
    for i, bl in enumerate(blocks):
        mine.setdefault(bl.tid, []).append(i)
        j = prev[i]
        if cpu_stack[i]:
            cpu[i] += delta[i]
        elif j is not None and cpu_stack[j]:
            cpu[j] += delta[i]
        else:
            unseen[bl.tid] = unseen.get(bl.tid, 0.0) + delta[i]
            moved[i] -= delta[i]
    for tid, d in unseen.items():
        share = [i for i in mine[tid] if cpu_stack[i]] or mine[tid]
        total = sum(wall[i] for i in share)
        for i in share:
            part = d * (wall[i] / total if total else 1.0 / len(share))
            cpu[i] += part
            moved[i] += part
    return {"wall": wall, "cpu": cpu, "cpu_delta": delta, "on_cpu": on_cpu, "cpu_moved": moved}


def _reasons(blocks: list, on_cpu: list, source: str) -> tuple[list, np.ndarray]:
    """Each block's reason (reasons.py; ``cpu`` for a thread caught running) and run-queue seconds
    since its thread's previous snapshot (the recorder's ``runq_ns``; 0 without it)."""
    out, runq, cache = [], np.zeros(len(blocks)), {}
    for i, (bl, on) in enumerate(zip(blocks, on_cpu)):
        q = bl.facts.get("runq_ns")
        if q is not None:
            if not q.lstrip("-").isdigit():
                raise ProfileFormatError(f"runq_ns={q!r} is not an integer", source=source, line=bl.line)
            runq[i] = max(int(q), 0) / 1e9
        if on:
            out.append(reasons.CPU)
            continue
        state, f = bl.facts.get("state"), bl.facts
        key = (tuple(fr[3] for fr in bl.frames[:64]), state, f.get("wchan"), f.get("syscall"))
        hit = cache.get(key)
        if hit is None:   # state R: woken between the unwind and the read, which says nothing of the wait
            hit = cache[key] = reasons.classify(None if state == "R" else state, f.get("wchan"),
                                                reasons.syscall_name(f.get("syscall")),
                                                frames=[(fr[0], "native") for fr in bl.frames[:64]])
        out.append(hit)
    return out, runq


class Block(NamedTuple):
    """One ``TID n:`` block: a thread's stack in one snapshot."""
    pid: str
    tid: str
    facts: dict         # what the recorder wrote after ``TID n:`` (state, cpu_ns, comm...)
    time: float | None  # the snapshot's ``# t=`` (sampled captures)
    frames: list        # [name, file, line, address], leaf first
    line: int
    py: dict            # "before"/"after" -> Python frame groups read around the unwind (innermost first)


class Parsed(NamedTuple):
    sampled: bool       # the recorder's form (``HEADER`` first)
    header: dict        # the recorder's header facts
    py_names: dict      # tid -> Python thread name (the recorder's ``# python-threads``)
    blocks: list
    snapshots: int      # ``PID n`` lines
    target: str | None  # "process" (eu-stack -p) or "core" (--core)


def parse(text: str, source: str = "<input>", raw_names: bool = False) -> Parsed:
    """eu-stack text -> its ``TID`` blocks, in input order."""
    lines = text.split("\n")
    sampled = text.startswith(HEADER)
    header = _facts(lines[0][len(HEADER):]) if sampled else {}
    py_names: dict[str, str] = {}
    modules: dict[str, str] = {}  # -l: a module's file name -> its path
    blocks: list[Block] = []
    cur = module = None
    cur_pid, target = "", None
    t = None
    snapshots = 0
    tids: set[str] = set()
    for lineno, raw in enumerate(lines, 1):
        line = raw.rstrip("\r")
        if not line.strip():
            continue
        if line.startswith("#"):
            fm = _FRAME.match(line)
            if fm and cur is not None:
                cur.frames.append(_frame(fm, raw_names))
                continue
            if fm:
                raise ProfileFormatError(f"frame {line[:120]!r} before any 'TID n:' line",
                                         source=source, line=lineno)
            tm = _T.match(line)
            if tm:
                t = _seconds(tm.group(1), "# t=", source, lineno)
            elif line.startswith("# py-") and cur is not None:
                which, _, groups = line[5:].partition(" ")
                cur.py[which] = _py_groups(groups, source, lineno)
            elif line.startswith("# python-threads"):
                for part in line.split()[2:]:
                    k, _, v = part.partition("=")
                    py_names[k] = unquote(v)
            continue
        pm = _PID.match(line)
        if pm:
            cur_pid, target = pm.group(1), pm.group(2) or target
            if not line.rstrip().endswith("module memory map"):
                snapshots += 1
            cur = module = None
            continue
        tm = _TID.match(line)
        if tm:
            cur = Block(cur_pid, tm.group(1), _facts(tm.group(2)), t, [], lineno, {})
            blocks.append(cur)
            if cur.tid not in tids:
                tids.add(cur.tid)
                if len(tids) > MAX_THREADS:
                    raise too_many_threads(source, line=lineno)
            continue
        mm = _MAP.match(line) if cur is None else None
        if mm:
            module = mm.group(1)
            continue
        if module is not None and raw[:1].isspace():
            path = line.strip()
            if path.startswith(("/", "./")) and module not in modules:
                modules[module] = path
            continue
        sm = _SRC.match(line)
        if sm and cur is not None and cur.frames:
            if not raw_names:
                f = cur.frames[-1]
                if f[2] is None:  # each source line belongs to the frame just above it
                    f[1], f[2] = sm.group(1), int(sm.group(2))
            continue
        if raw[:1].isspace():  # other indented detail lines (-b build ids) are ignored, as stackcollapse does
            continue
        raise ProfileFormatError(
            f"expected 'PID n - process' (or '- core'), 'TID n:', '#N 0xADDR name' or an indented source "
            f"line, got {line[:120]!r}", source=source, line=lineno)
    if modules:  # -l with -m: a core's bare module file names become paths
        for bl in blocks:
            for f in bl.frames:
                if f[2] is None and f[1] in modules:
                    f[1] = modules[f[1]]
    if not blocks:
        raise ProfileFormatError("no 'TID n:' blocks found; expected eu-stack output", source=source, offset=0)
    if sampled and any(bl.time is None for bl in blocks):
        b0 = next(bl for bl in blocks if bl.time is None)
        raise ProfileFormatError("sampled capture: 'TID' block without a preceding '# t=SECONDS' line",
                                 source=source, line=b0.line)
    return Parsed(sampled, header, py_names, blocks, snapshots, target)


def _seconds(text: str, what: str, source: str, lineno: int) -> float:
    try:
        v = float(text)
    except ValueError:
        v = float("nan")
    if not (v >= 0 and v != float("inf")):
        raise ProfileFormatError(f"{what}{text[:40]!r}: expected seconds", source=source, line=lineno)
    return v


def _py_groups(text: str, source: str, lineno: int) -> list:
    """The recorder's ``# py-after`` groups: ``|`` between eval-loop calls, ``;`` between frames
    (innermost first), each quote(qualname):quote(file):firstlineno."""
    out = []
    for group in text.split("|"):
        frames = []
        for fr in filter(None, group.split(";")):
            parts = fr.split(":")
            if len(parts) != 3 or not parts[2].lstrip("-").isdigit():
                raise ProfileFormatError(f"Python frame {fr[:80]!r}: expected qualname:file:line",
                                         source=source, line=lineno)
            frames.append((unquote(parts[0]), unquote(parts[1]), int(parts[2])))
        out.append(frames)
    return out


def with_python(frames: list, py: dict) -> tuple[list | None, str | None]:
    """``frames`` (root first) with each run of interpreter frames replaced by the Python frames its
    eval-loop calls ran: the k-th ``_PyEval_EvalFrameDefault`` from the root ran the k-th group. A
    reading (``after`` the unwind, else ``before``) is used only when it has as many groups as the
    native stack has eval-loop calls. A stack that ends at a perf trampoline (the unwind stopped
    there) matches a reading with more groups when the trampoline names the outermost function of
    the group its eval loop ran: the groups outside it are put above the root. Returns (frames,
    which reading) or (None, None)."""
    n_eval = sum(f[0] == EVAL_LOOP for f in frames)
    cut = frames[0] if frames and _trampoline(frames[0]) else None

    def fits(groups) -> bool:
        if not n_eval or len(groups) < n_eval:
            return False
        if len(groups) == n_eval:
            return True
        return cut is not None and bool(groups[n_eval - 1]) and \
            cut[0] == "py::{}:{}".format(*groups[n_eval - 1][-1][:2])

    groups = next(((which, py[which]) for which in ("after", "before") if fits(py.get(which) or ())), None)
    if groups is None:
        return None, None
    which, groups = groups
    groups = [[(q, f, ln, "python") for q, f, ln in reversed(g)] for g in reversed(groups)]
    out = [f for g in groups[:len(groups) - n_eval] for f in g]   # above a cut stack's trampoline
    root_first = iter(groups[len(groups) - n_eval:])
    run = []
    for f in frames + [None]:
        if f is not None and _interp(f):
            run.append(f)
            continue
        k = sum(r[0] == EVAL_LOOP for r in run)
        if k:
            for _ in range(k):
                out.extend(next(root_first))
        else:
            out.extend(run)
        run = []
        if f is not None:
            out.append(f)
    return out, which


def _frame(fm, raw_names: bool) -> list:
    """[name, file, line, address] of a ``#N 0xADDR ...`` line."""
    name, file = fm.group(3), None
    if not raw_names:
        name = _ACTIVATION.sub("", name, count=1)
        mm = _MODULE.match(name)
        if mm:
            name, file = mm.group(1).strip(), mm.group(2)
    if not name.strip():
        name = "[unknown]"
    elif not raw_names and not name.startswith("py::"):
        name = native_names.name(name)   # the name perf and py-spy give it too
    return [name, file, None, int(fm.group(2) or "0", 16)]


def _thread_names(b: StackBuilder, blocks: list[Block], py_names: dict, py_tids: set) -> dict[str, str]:
    """tid -> label, each thread entered in ``b``'s thread table: named by its Python name, else its
    comm from any snapshot that could read it (a thread that ended right after its last unwind has
    no facts: no name)."""
    comms: dict[str, str] = {}
    for bl in blocks:
        c = bl.facts.get("comm")
        if c and c != "?":
            comms.setdefault(bl.tid, c)
    out = {}
    for bl in blocks:
        if bl.tid in out:
            continue
        tid = int(bl.tid) if bl.tid.isdigit() else None
        name = py_names.get(bl.tid) or comms.get(bl.tid)
        out[bl.tid] = thread_label(tid if tid is not None else bl.tid, name)
        b.thread(out[bl.tid], tid=tid, name=name, pid=int(bl.pid) if str(bl.pid).isdigit() else None,
                 python=bl.tid in py_tids, backend="eu-stack")
    return out


def _stack_ids(b: StackBuilder, bl: Block, fold: bool, pid: bool, tid: bool, used: dict) -> tuple:
    """A block's frame ids, root first: interpreter runs become the Python frames they ran, or
    ``[python]`` (``fold``); ``pid``/``tid`` prepend stackcollapse-elfutils' roots. ``used`` counts
    which Python reading each block took."""
    frames = [(name, file, line, "native") for name, file, line, _addr in reversed(bl.frames)]
    if fold:
        named, which = with_python(frames, bl.py) if bl.py else (None, None)
        used[which or ("unmatched" if bl.py else "none")] = used.get(which or ("unmatched" if bl.py else "none"), 0) + 1
        frames = named if named is not None else fold_python(frames)
    fids = [b.frame(n, fl, ln, k) for n, fl, ln, k in frames]
    if tid:
        fids.insert(0, b.frame(f"TID={bl.tid}", None, None, "other"))
    if pid:
        fids.insert(0, b.frame(f"PID={bl.pid}", None, None, "other"))
    return tuple(fids)


def read(data: bytes, source: str = "<input>", raw_names: bool = False, fold: bool | None = None,
         pid: bool = False, tid: bool = False, meta: dict | None = None) -> Profile:
    """Read eu-stack text. ``fold`` (default: not ``raw_names``) folds interpreter frames into
    ``[python]``; ``pid``/``tid`` prepend ``PID=n``/``TID=n`` root frames as stackcollapse-elfutils does;
    ``meta`` is added to the profile's meta."""
    text = decode(data)
    options = {k: v for k, v, default in (("raw_names", raw_names, False), ("fold", fold, None), ("pid", pid, False),
                                          ("tid", tid, False)) if v != default}
    parsed = parse(text, source, raw_names)
    blocks = parsed.blocks
    b = StackBuilder()
    # Python threads: named by the recorder, or seen running the eval loop.
    py_tids = set(parsed.py_names) | {bl.tid for bl in blocks if any(PY_EVAL.match(f[0]) for f in bl.frames)}
    labels = _thread_names(b, blocks, parsed.py_names, py_tids)
    used: dict[str, int] = {}
    fids = [_stack_ids(b, bl, not raw_names if fold is None else fold, pid, tid, used) for bl in blocks]
    deep = next((bl for bl, f in zip(blocks, fids) if len(f) > MAX_DEPTH), None)
    if deep is not None:
        raise too_deep(source, None, line=deep.line)
    out = {"format": NAME, "backend": "eu-stack", "source": source, "target": parsed.target,
           "python_stacks": {k: v for k, v in used.items() if k != "none"} or None,
           "python_threads": [labels[t] for t in labels if t in py_tids],
           "native_threads": [labels[t] for t in labels if t not in py_tids]}
    if not parsed.sampled:
        for bl, f in zip(blocks, fids):
            b.add(b.stack(labels[bl.tid], f), samples=1)
        out["snapshots"] = parsed.snapshots or 1
        out.update(meta or {})
        return b.build(metric="samples", meta=out, raw=Raw(data, NAME, options=options))
    header = parsed.header
    interval = _seconds(header.get("interval") or "0", "interval=", source, 1) or None
    snap_times = sorted({bl.time for bl in blocks})
    duration = _seconds(header.get("duration") or "0", "duration=", source, 1) or None
    w = _weigh(blocks, fids, snap_times, interval, source)
    why, runq = _reasons(blocks, w["on_cpu"], source)
    sids = [b.stack(labels[bl.tid], f, on_cpu=on, reason=r) for bl, f, on, r in zip(blocks, fids, w["on_cpu"], why)]
    b.add_samples(sids, time=[bl.time for bl in blocks], wall=w["wall"], cpu=w["cpu"],
                  columns={"state": [bl.facts.get("state", "?") for bl in blocks],
                           "on_cpu": np.asarray(w["on_cpu"], dtype=bool),
                           "cpu_delta": np.asarray(w["cpu_delta"], dtype=np.float64),
                           "cpu_moved": np.asarray(w["cpu_moved"], dtype=np.float64),
                           "reason": why, "runq": runq})
    # The header's other facts, typed (what this read computes is not taken from the file).
    out.update({k: v for k, v in text_meta(header, source, 1).items()
                if k not in ("interval", "duration", "snapshots", "rate", "format", "source", "backend", "metrics")})
    out.update(interval=interval, duration=duration, snapshots=len(snap_times),
               rate=len(snap_times) / duration if duration else None, metrics=["wall", "cpu"],
               wall_attribution="each sample weighs the time since its thread's previous snapshot",
               reasons={"from": "a thread caught off-CPU: its native leaf frames, and its state, wchan and system "
                                "call read just after the unwind (reasons.RULES); run-queue time from schedstat"
                                + ("" if any("runq_ns" in bl.facts for bl in blocks) else " (not in this capture)"),
                        "cannot_see": "the Python leaf call; a thread that woke between the unwind and the "
                                      "/proc read, where the two disagree ('unknown')"},
               cpu_attribution=("each snapshot's CPU delta (schedstat run_ns) goes to the end of its "
                                "interval if that stack is mostly seen in state R and not in a timed wait, "
                                "else to the start if that one is; else it is shared by the thread's "
                                "mostly-R stacks"))
    out.update(meta or {})
    return b.build(metric="wall", meta=out, raw=Raw(data, NAME, options=options))

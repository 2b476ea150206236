"""The eu-stack sampler's helper process: ``python .../backends/eustack_helper.py --pid PID``.

It loops: ``eu-stack -q -p PID`` (full unwind, raw addresses, 1-2 ms), then each thread's
``/proc/PID/task/TID/{stat,schedstat,wchan,syscall}`` (state, CPU delta, what it waits in); just
before and after each unwind it reads every Python thread's frame chain from the target's memory
(``pyframes.py``, ~0.1-0.6 ms). It prints ``ready`` after its first snapshot. On SIGINT it resolves the unique addresses once with
``eu-addr2line -p PID -f -i -a`` (caller frames are return addresses: it resolves pc-1) while the
target is still alive, and writes the sampled capture that ``formats/eu_stack.py`` reads. An
address no symbol covers is written ``lib.so+0xOFFSET`` (as perf prints it); one in CPython's perf
trampolines (``/tmp/perf-PID.map``), where eu-stack's unwind stops, by the map's ``py::`` name.
"""
from __future__ import annotations

import bisect
import os
import re
import select
import signal
import subprocess
import sys
import time
from typing import NamedTuple
from urllib.parse import quote

if __package__:
    from .perf_jitdump import perf_map
    from .pyframes import PyFrames, encode_groups
else:  # run as a script by the recorder (backends/eustack.py): its own folder is on sys.path
    from perf_jitdump import perf_map
    from pyframes import PyFrames, encode_groups

MIN_SLEEP = 0.2  # the helper sleeps at least this share of the interval after every snapshot

_SYSCALLS = {  # x86_64 numbers of the calls a waiting thread usually sits in
    0: "read", 1: "write", 7: "poll", 16: "ioctl", 23: "select", 35: "nanosleep", 44: "sendto",
    45: "recvfrom", 46: "sendmsg", 47: "recvmsg", 61: "wait4", 202: "futex", 230: "clock_nanosleep",
    232: "epoll_wait", 270: "pselect6", 271: "ppoll", 281: "epoll_pwait", 17: "pread64", 19: "readv",
    43: "accept", 288: "accept4", 247: "waitid", 34: "pause", 128: "rt_sigtimedwait",
    219: "restart_syscall",  # a timed wait (nanosleep, poll, futex) resumed after eu-stack stopped it
}



def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def thread_facts(pid: int, tid: str) -> dict | None:
    """state, comm, run_ns (schedstat, else utime+stime), wait_ns (schedstat's run-queue time, or
    None), wchan and syscall of one thread."""
    base = f"/proc/{pid}/task/{tid}/"
    stat = _read(base + "stat")
    if stat is None:
        return None
    close = stat.rfind(")")
    comm = stat[stat.find("(") + 1:close]
    fields = stat[close + 2:].split()
    sched = _read(base + "schedstat")
    wait_ns = None
    if sched:
        run_ns = int(sched.split()[0])
        wait_ns = int(sched.split()[1])
    else:
        run_ns = (int(fields[11]) + int(fields[12])) * 1_000_000_000 // os.sysconf("SC_CLK_TCK")
    wchan = (_read(base + "wchan") or "").strip() or "0"
    sc = (_read(base + "syscall") or "").split()
    if not sc:
        syscall = "?"
    elif sc[0].lstrip("-").isdigit():
        n = int(sc[0])
        syscall = _SYSCALLS.get(n, str(n)) if n >= 0 else "none"
    else:
        syscall = sc[0]
    return {"state": fields[0], "comm": comm, "run_ns": run_ns, "wait_ns": wait_ns, "wchan": wchan,
            "syscall": syscall}


_FRAME = re.compile(rb"^#(\d+)\s+0x([0-9a-fA-F]+)")
SYSCALL_INSN = b"\x0f\x05"  # x86_64 `syscall`: a thread stopped inside a call has its pc just after it


def raise_priority() -> str:
    """Give this process (and the eu-stack children it spawns, which inherit it) a core as soon as
    its timer fires, whatever the target does: realtime SCHED_RR at the lowest priority (1), else a
    negative nice. Returns what was set, for the capture's header."""
    if os.environ.get("PROFMAGIC_EUSTACK_PRIORITY") == "normal":
        return "normal(asked)"
    try:
        os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(1))
        return "SCHED_RR:1"
    except (OSError, AttributeError):
        pass
    try:
        os.setpriority(os.PRIO_PROCESS, 0, -10)
        return "nice:-10"
    except (OSError, AttributeError):
        return "normal(not_permitted)"


def drop_priority() -> None:
    try:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    except (OSError, AttributeError):
        pass


class SyscallCheck:
    """Was a thread stopped inside a system call? True when the two bytes before its leaf pc are
    the `syscall` instruction (cached per address; None when the target's memory cannot be read).
    Measured on a C thread alternating 10 ms busy / nanosleep: all 109 nanosleep samples were
    stopped after `syscall`, none of the 91 busy ones. A busy loop making fast calls is stopped
    after `syscall` too: the reader tells the two apart by call site."""

    def __init__(self, pid: int):
        self.cache: dict[int, bool | None] = {}
        try:
            self.mem = open(f"/proc/{pid}/mem", "rb", buffering=0)
        except OSError:
            self.mem = None

    def __call__(self, pc: int) -> bool | None:
        if pc not in self.cache:
            try:
                self.mem.seek(pc - 2)
                self.cache[pc] = self.mem.read(2) == SYSCALL_INSN
            except (OSError, ValueError, AttributeError, OverflowError):
                self.cache[pc] = None
        return self.cache[pc]

    def close(self) -> None:
        if self.mem is not None:
            self.mem.close()


def _parse_q(out: bytes) -> dict[str, list[int]]:
    """eu-stack -q output -> tid -> addresses, leaf first."""
    threads: dict[str, list[int]] = {}
    cur = None
    for line in out.split(b"\n"):
        if line.startswith(b"TID "):
            cur = threads.setdefault(line[4:].rstrip(b":\r ").decode(), [])
        elif cur is not None:
            m = _FRAME.match(line)
            if m:
                cur.append(int(m.group(2), 16))
    return threads


def resolve(pid: int, addrs: list[int], chunk: int = 2000) -> dict[int, list[tuple[str, str | None, int | None]]]:
    """address -> [(function, file, line)] innermost first (inlined callers follow)."""
    out: dict[int, list] = {}
    for i in range(0, len(addrs), chunk):
        part = addrs[i:i + chunk]
        try:
            res = subprocess.run(["eu-addr2line", "-p", str(pid), "-f", "-i", "-a", "-C"]
                                 + [hex(a) for a in part], capture_output=True, timeout=120)
        except (OSError, subprocess.SubprocessError):
            continue
        cur = None
        pending = None
        for line in res.stdout.decode(errors="replace").split("\n"):
            if re.fullmatch(r"0x[0-9a-fA-F]+", line):
                cur = out.setdefault(int(line, 16), [])
                pending = None
            elif cur is None or not line:
                continue
            elif pending is None:
                pending = line.split(" inlined at ")[0]
            else:
                m = re.match(r"^(.*?):(\d+)(?::\d+)?$", line)
                if m and m.group(1) != "??":
                    cur.append((pending, m.group(1), int(m.group(2)) or None))
                else:
                    cur.append((pending, None, None))
                pending = None
    return out


def _maps(pid: int) -> list[tuple[int, int, str, int]]:
    """(start, end, path, start - file offset) of each file mapping."""
    out = []
    for line in (_read(f"/proc/{pid}/maps") or "").split("\n"):
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].startswith(("/", "[")):
            lo, hi = parts[0].split("-")
            out.append((int(lo, 16), int(hi, 16), parts[5].strip(), int(lo, 16) - int(parts[2], 16)))
    return out


def _module(maps, addr: int) -> tuple[str | None, int]:
    for lo, hi, path, base in maps:
        if lo <= addr < hi:
            return path, base
    return None, 0


def trampolines(pid: int) -> tuple[list[tuple[int, int, str]], str]:
    """CPython's perf trampolines (3.12+ with ``-X perf`` or ``sys.activate_stack_trampoline``):
    (address, size, name) from /tmp/perf-PID.map, and the map's path. eu-stack cannot unwind through
    them (JIT code, no CFI): a stack ends at the first one. Only a map owned by the target's user is
    read (another user could plant one in /tmp)."""
    path = f"/tmp/perf-{pid}.map"
    try:
        if os.stat(path).st_uid != os.stat(f"/proc/{pid}").st_uid:
            return [], path
    except OSError:
        return [], path
    return perf_map(pid), path


def _trampoline(tramps: list, addr: int) -> str | None:
    i = bisect.bisect_right(tramps, (addr, float("inf"))) - 1
    if i >= 0 and tramps[i][0] <= addr < tramps[i][0] + tramps[i][1]:
        return tramps[i][2]
    return None


class Snapshot(NamedTuple):
    t: float                # seconds since the helper started (time.monotonic)
    facts: dict             # tid -> thread_facts (+ cpu_ns, insys)
    stacks: dict            # tid -> [address], leaf first
    py_before: dict         # native tid -> Python frame groups read just before eu-stack ran
    py_after: dict          # ... and just after it detached


EUSTACK_TIMEOUT = 5.0   # seconds one eu-stack snapshot may take (tens of ms normally)


def _gone(pid: int) -> bool:
    """The process exited or is a zombie (state Z/X): nothing left to sample."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X")
    except (OSError, IndexError):
        return True


def _die_with_parent() -> None:
    """Linux: SIGTERM this helper when its parent (the recorder's process) dies."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _exe(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None


def _state(pid: int) -> bytes | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


EXEC_WAIT = 2.0   # seconds a resumed launcher may take to exec its command
EXEC_CPU_NS = 2_000_000   # CPU past which a task whose exe changed has left execve (its rest takes microseconds)
_EXEC_CALLS = ("59", "322", "running", "?")   # in execve or execveat (x86_64), or unknown: maybe not past it


def _exec_done(pid: int, launcher: str, waits: dict) -> bool:
    """Whether the stopped launcher ``pid`` (its exe ``launcher``), let go after the first snapshot,
    has exec'd its command and returned from execve, so that eu-stack may attach: an attach at any
    moment of execve gets the exec's SIGTRAP, which killed a `sleep` (status 133). Until then there
    is no snapshot (the launcher's stack is none of the command's). ``waits`` keeps what it saw."""
    state = _state(pid)
    if state in (None, b"Z", b"X"):
        return True                  # it ended
    now = time.monotonic()
    if _exe(pid) == launcher:        # still ours: stopped until the recorder lets it go, or on its way
        if state not in (b"T", b"t"):
            waits.setdefault("resumed", now)
        return now - waits.get("resumed", now) >= EXEC_WAIT
    # The kernel names the new exe before execve returns: past it when the task sleeps in another
    # syscall (a running one reads "running"), or has run EXEC_CPU_NS since.
    waits.setdefault("resumed", now)
    facts = thread_facts(pid, str(pid)) or {}
    cpu = waits.setdefault("exec_cpu", facts.get("run_ns", 0))
    return (facts.get("syscall", "?") not in _EXEC_CALLS or facts.get("run_ns", 0) - cpu >= EXEC_CPU_NS
            or now - waits["resumed"] >= EXEC_WAIT)


class Stop:
    """A stop request that a signal handler may make. Not threading.Event: its set() takes a lock
    that wait() holds for a moment, so a handler that ran inside wait() deadlocked the helper (the
    recorder then waited its 120 s). Here the handler sets a flag, and Python's wakeup fd ends the
    sleep early."""

    def __init__(self):
        self.flag = False
        self.r, w = os.pipe()
        os.set_blocking(self.r, False)
        os.set_blocking(w, False)
        signal.set_wakeup_fd(w, warn_on_full_buffer=False)

    def set(self, *_) -> None:
        self.flag = True

    def is_set(self) -> bool:
        return self.flag

    def wait(self, seconds: float) -> None:
        if not self.flag and seconds > 0:
            try:
                select.select([self.r], [], [], seconds)
                while os.read(self.r, 512):
                    pass
            except (BlockingIOError, InterruptedError):
                pass


def sample(pid: int, interval: float, stop: Stop,
           wait_exec: bool = False) -> tuple[list[Snapshot], float, str | None]:
    """Snapshot ``pid`` every ``interval`` s until ``stop`` (or the target is gone): eu-stack, the
    Python stacks around it and each thread's facts. Returns (snapshots, duration, error).

    ``wait_exec``: the target is profmagic's stopped launcher, which execs the command once
    continued. After the first snapshot, none until its execve has returned (``_exec_done``)."""
    launcher = _exe(pid) if wait_exec else None
    waits: dict = {}
    in_syscall = SyscallCheck(pid)
    py = PyFrames(pid)
    task_dir = f"/proc/{pid}/task"
    # Baseline CPU counters: a thread born later counts all of its CPU time.
    last_run: dict[str, int] = {}
    for tid in os.listdir(task_dir):
        f = thread_facts(pid, tid)
        if f:
            last_run[tid] = f["run_ns"]
            last_run[(tid, "runq")] = f["wait_ns"] or 0
    snaps: list[Snapshot] = []
    t0 = time.monotonic()
    next_t = t0
    try:
        while not stop.is_set():
            if launcher is not None and snaps:
                if not _exec_done(pid, launcher, waits):
                    stop.wait(0.0005)
                    continue
                launcher = None      # the command runs: sample as usual
            # Python stacks just before and just after the unwind: the reader keeps the one that
            # matches the native stack's eval-loop calls (eu-stack stops the threads in between).
            py_before = py.read()
            try:   # a deadline: an eu-stack that hangs (or was stopped) is killed, not waited for
                res = subprocess.run(["eu-stack", "-q", "-p", str(pid)], capture_output=True, timeout=EUSTACK_TIMEOUT)
            except subprocess.TimeoutExpired:
                res = subprocess.CompletedProcess([], -9, b"", b"eu-stack did not answer in %g s" % EUSTACK_TIMEOUT)
            py_after = py.read()
            # The snapshot's time is when the stacks and the CPU counters below were read: the reader
            # weighs each sample by the time since its thread's previous snapshot, and the CPU delta
            # covers the same interval.
            t = time.monotonic() - t0
            stacks = _parse_q(res.stdout)
            if not stacks:
                if _gone(pid):
                    break  # the target exited, or is a zombie that nobody reaped
                if not snaps:
                    return [], 0.0, res.stderr.decode(errors="replace")
            else:
                snaps.append(Snapshot(t, _facts(pid, stacks, last_run, in_syscall), stacks, py_before, py_after))
                if len(snaps) == 1:
                    sys.stdout.write("ready\n")
                    sys.stdout.flush()
            next_t += interval
            delay = next_t - time.monotonic()
            if delay < MIN_SLEEP * interval:  # behind: do not burst to catch up; never spin at realtime
                delay = MIN_SLEEP * interval
                next_t = time.monotonic() + delay
            stop.wait(delay)
    finally:
        in_syscall.close()
        py.close()
    return snaps, time.monotonic() - t0, py.error


def _facts(pid: int, stacks: dict, last_run: dict, in_syscall: SyscallCheck) -> dict:
    """Each thread's facts, read right after eu-stack detaches: measured against the leaf frame of a
    busy/sleeping C thread with 10 ms phases, reading them just before the call matched 60% of
    samples (eu-stack attaches ~5 ms after it is spawned), just after 87%."""
    facts = {}
    for tid in stacks:
        f = thread_facts(pid, tid)
        if f:
            f["cpu_ns"] = f["run_ns"] - last_run.get(tid, 0)
            last_run[tid] = f["run_ns"]
            if f["wait_ns"] is not None:   # run-queue time since the last snapshot: waiting for a core
                f["runq_ns"] = f["wait_ns"] - last_run.get((tid, "runq"), 0)
                last_run[(tid, "runq")] = f["wait_ns"]
            insys = in_syscall(stacks[tid][0]) if stacks[tid] else None
            if insys is not None:
                f["insys"] = int(insys)
            facts[tid] = f
    return facts


def _py_line(which: str, groups: list) -> str:
    """``# py-before|py-after <groups>``: groups innermost first, split by ``|``, frames by ``;``,
    each frame quote(qualname):quote(file):firstlineno."""
    return f"# py-{which} " + encode_groups(groups)


def write_capture(path: str, pid: int, snaps: list[Snapshot], header: str) -> None:
    """Resolve every unique (address, is-caller) once (callers' return addresses as pc-1) while the
    target is alive, then write the sampled capture that formats/eu_stack.py reads."""
    want = set()
    for snap in snaps:
        for addrs in snap.stacks.values():
            for i, ad in enumerate(addrs):
                want.add(ad - 1 if i else ad)
    names = resolve(pid, sorted(want))
    maps = _maps(pid)
    tramps, tramp_file = trampolines(pid)
    mod_cache: dict[int, tuple[str | None, int]] = {}
    lines = [header]
    for snap in snaps:
        lines.append(f"# t={snap.t:.6f}")
        lines.append(f"PID {pid} - process")
        for tid, addrs in snap.stacks.items():
            f = snap.facts.get(tid) or {"state": "?", "cpu_ns": 0, "comm": "?", "wchan": "0", "syscall": "?"}
            comm = re.sub(r"\s", "_", f["comm"]) or "?"
            lines.append(f"TID {tid}: state={f['state']} cpu_ns={f['cpu_ns']} comm={comm} "
                         f"wchan={f['wchan']} syscall={f['syscall']}"
                         + (f" insys={f['insys']}" if "insys" in f else "")
                         + (f" runq_ns={f['runq_ns']}" if "runq_ns" in f else ""))
            n = 0
            for i, ad in enumerate(addrs):
                key = ad - 1 if i else ad
                if key not in mod_cache:
                    mod_cache[key] = _module(maps, key)
                mod, base = mod_cache[key]
                tramp = _trampoline(tramps, key) if mod is None and tramps else None
                if tramp is not None:   # named by the map: the reader splices the Python frames in above it
                    lines.append(f"#{n:<2} 0x{ad:016x} {tramp} - {tramp_file}")
                    n += 1
                    continue
                for fn, file, ln in names.get(key) or [("??", None, None)]:
                    # No symbol: lib.so+0xOFFSET, as perf names it (formats/native_names.py).
                    name = fn if fn and fn != "??" else (f"{os.path.basename(mod)}+0x{key - base:x}"
                                                         if mod and mod.startswith("/") else f"0x{ad:x}")
                    lines.append(f"#{n:<2} 0x{ad:016x} {name}" + (f" - {mod}" if mod else ""))
                    if file:
                        lines.append(f"    {file}:{ln or 0}")
                    n += 1
            for which, py in (("before", snap.py_before), ("after", snap.py_after)):
                if int(tid) in py:
                    lines.append(_py_line(which, py[int(tid)]))
    with open(path, "w", encoding="utf-8", errors="surrogateescape") as fh:
        fh.write("\n".join(lines) + "\n")


def main(argv: list[str]) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="profmagic.backends.eustack_helper")
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--rate", type=float, default=100.0)
    ap.add_argument("--out", required=True)
    ap.add_argument("--wait-exec", action="store_true", help="the target is a stopped launcher that will exec")
    a = ap.parse_args(argv)
    stop = Stop()
    signal.signal(signal.SIGINT, stop.set)
    signal.signal(signal.SIGTERM, stop.set)
    _die_with_parent()
    sched = raise_priority()
    t0_wall = time.time()
    snaps, duration, error = sample(a.pid, 1.0 / a.rate, stop, wait_exec=a.wait_exec)
    if not snaps:
        sys.stderr.write(error or "eu-stack returned no stack")
        return 2
    drop_priority()  # resolving addresses is bulk work: not at realtime priority
    header = (f"# profmagic eu-stack sampler pid={a.pid} interval={1.0 / a.rate:.6f} duration={duration:.6f} "
              f"snapshots={len(snaps)} rate={len(snaps) / duration if duration else 0:.3f} "
              f"target_rate={a.rate:g} t0_unix={t0_wall:.6f} sched={sched}"
              + (f" pyframes={quote(error, safe='')}" if error else " pyframes=read"))
    # Written whole, then renamed: the recorder never reads half a capture.
    write_capture(a.out + ".part", a.pid, snaps, header)
    os.replace(a.out + ".part", a.out)
    # Done. A stop signal that comes now (the target ended by itself and the helper finished first)
    # must not kill it: at exit Python puts back the default action of signals it handles, and a
    # SIGINT then ended the helper with -2 after it had written the capture.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

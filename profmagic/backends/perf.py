"""perf (Linux perf_events): every thread of a process, native frames included. On-CPU samples
(``--mode cpu``, the default); with ``--mode wall``/``both``, off-CPU time too, from the same session.

Measured with perf 6.1 on this machine kind:

* ``-e cpu-clock`` (no hardware events here), ``--call-graph dwarf`` (CPython has no frame
  pointers; 32 KB of stack per sample, see ``STACK_BYTES``), ``--no-bpf-event`` (stops in 0-10 ms instead of ~0.6 s),
  ``--no-buildid-cache`` (``perf script`` reads the libraries right away: no copy of each one hit,
  each perf-inject'ed JIT file included, left in ``~/.debug``; 709 MB after a day of tests here), ``-D -1
  --control=fifo:CTL,ACK``: perf starts disabled; ``enable`` is written right before the cell and
  its ``ack`` awaited (~120 ms after start), ``disable`` right after. perf runs in its own process
  group and is stopped with SIGINT; ``perf script`` turns the data into text for ``formats/perf_script``.
* ``--mode wall``/``both``: ``cpu-clock/period=P/`` (a -F would put the tracepoints on a frequency
  too, and record 1 switch in 3), ``sched:sched_switch`` (the stack as a thread leaves its core),
  ``sched:sched_waking`` (who woke it: it fires in the waker, where ``sched_wakeup`` fires in the idle
  task of the wakee's CPU when the kernel hands the wakeup over by interrupt), ``--switch-events`` (exact switch in/out times) on
  CLOCK_MONOTONIC; the capture starts with the recording's window, its threads and the CPU the
  kernel charged each in it (schedstat at both ends; the switch records also count time a VM's
  host stole from the core): see ``formats/perf_sched.py``.
  Tracepoints need root/CAP_PERFMON or perf_event_paranoid -1, and tracefs: refused, one message
  says which and names eu-stack. Each switch costs a stack copy: 32 KB where the unwind reaches
  the thread's root, 4 KB where it ends at the innermost Python frame anyway (``switch_stack()``;
  ``meta["cost"]`` says which ran). A thread switching thousands of times a second slows (bench/RESULTS.md);
  ``lean_switches`` records no kernel call graph and no sched_waking, for about 0.8x that (``LEAN_EVENTS``).
* Python frames, by what the target interpreter allows (``meta["python_mode"]``):
  ``perf_jit`` (3.13 started with ``-X perf_jit``): ``perf record -k 1`` + ``perf inject --jit``
  give mixed Python and C stacks. CPython buffers its ``/tmp/jit-PID.dump``, so code jitted
  recently by a still-running process is missing until the buffer fills or the process exits
  (measured: names appear for a child that has exited). ``trampoline`` (3.12+, perf trampoline
  active, or activated by us in this process): ``py::`` frames from ``/tmp/perf-PID.map`` (written
  as each function first runs after activation). In this process a jitdump of the trampolines
  (``perf_jitdump.py``) lets the unwind go on through them to the thread's root; in another
  process it stops at the innermost Python frame. ``native`` (3.11): interpreter frames, named by a
  poller that reads the target's Python stacks at the sampling rate (``perf_pynames.py``, spliced by
  ``formats/perf_pyframes.py``; ``extra={"pynames": False}`` turns it off).
* A library mapped a second time elsewhere in the process (a symbolizer reading it) breaks perf's
  DWARF unwind through it: such mappings are hidden in perf.data before ``perf script``
  (``perf_maps.py``; ``meta["stray_maps_hidden"]``).
* perf inject writes ``/tmp/jitted-PID-N.so`` files: removed on close, with ``/tmp/jit-PID.dump``
  once the target has exited.
"""
from __future__ import annotations

import glob
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time


from .. import procfs
from ..errors import ProfilerError
from ..tempdirs import TempDir
from .base import OWN_GROUP, Capabilities, Capture, Options, reap, tool_version
from . import perf_maps
from .perf_jitdump import JitDump
from .perf_pynames import Poller

NAME = "perf"
# cpu-clock alone by default (perf's own view, as cheap as perf gets); --mode wall/both add
# sched_switch for the off-CPU time (formats/perf_sched.py), where tracepoints are allowed.
CAPS = Capabilities(clocks=("wall", "cpu"), weights="measured", inside=False, attach=True, streams=False,
                    threads="all", native=True, default="cpu")
FORMAT = "perf_script"
ACK_TIMEOUT = 20.0
SCRIPT_FIELDS = "comm,pid,tid,time,period,event,ip,sym,dso"
# --mode wall/both: off-CPU time from the scheduler. Tracepoints keep period 1 (every switch) only
# when no -F is given, so cpu-clock's rate goes in its own event terms.
SCHED_EVENTS = ("sched:sched_switch", "sched:sched_waking")
# lean_switches=True (--lean-switches): the switch-out stacks without their kernel part and no
# sched_waking, the two costs of a switch that the wall split does not need (bench/RESULTS.md, issue 27).
# perf's --user-callchains is global, so the cpu-clock samples lose their kernel frames too: a second
# ``perf script -G`` pass gives each sample taken in the kernel its leaf function back (_kernel_leaves).
LEAN_EVENTS = ("sched:sched_switch",)
def _script(fields: list[str], data_file: str, what: str) -> bytes:
    """``perf script`` of ``data_file`` as text, or a ProfilerError with perf's own words."""
    res = subprocess.run(["perf", "script", *fields, "-i", data_file], capture_output=True)
    if res.returncode != 0:
        raise ProfilerError(f"{what} failed: " + res.stderr.decode(errors="replace")[-2000:])
    return res.stdout


SCHED_SCRIPT = ["-F", SCRIPT_FIELDS + ",trace", "--show-switch-events", "--show-task-events",
                "--show-lost-events"]
# User stack copied per sample for DWARF unwinding. A cell in ipykernel runs below asyncio, IPython
# and two exec()s: with perf's default 8 KB the unwind stopped at task_step_impl, before the cell's
# PyEval_EvalCode (which trim_native_to_cell cuts at); 32 KB reached _start.
STACK_BYTES = 32768
# User stack copied at each sched_switch (--mode wall/both). Measured on a thread handing a token back
# and forth (bench/bench_perf.py): most of perf's cost there is this copy, 32 KB per switch. A
# trampoline stack in another process ends at its innermost Python frame (perf has no unwind info
# for the trampolines), which 2 KB reached from a lock's futex wait; 4 KB leaves room for deeper C
# below it. Elsewhere (perf_jit, our own trampolines' jitdump, 3.11) the unwind goes to the root and
# keeps the full copy. ``switch_stack=N`` (bytes) asks for another size.
SHALLOW_SWITCH_STACK = 4096
SWITCH_STACK_MAX = 65528   # perf's limit: a multiple of 8 below 64 KB
# Ring buffer per CPU (4 KB pages): with 32 KB per sample perf's default 512 KB holds 16 samples, and
# perf, starved of a core on a loaded machine, drops what it cannot drain in time (PERF_RECORD_LOST).
MMAP_PAGES = 1024


def _paranoid() -> int | None:
    try:
        with open("/proc/sys/kernel/perf_event_paranoid") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def version() -> str | None:
    return tool_version(["perf", "--version"])


def available() -> tuple[bool, str]:
    if shutil.which("perf") is None:
        return False, ("perf is not installed. Fix: apt-get install linux-perf (Debian) or linux-tools-$(uname -r) "
                       "(Ubuntu), dnf install perf (Fedora); or use --backend eu-stack")
    par = _paranoid()
    if par is None:
        return False, ("/proc/sys/kernel/perf_event_paranoid is missing: this kernel has no perf_events. "
                       "Use --backend eu-stack")
    if par > 1 and os.geteuid() != 0:
        return False, (f"perf_event_paranoid is {par}: an unprivileged user may not sample another process "
                       "with perf. Fix: `sudo sysctl kernel.perf_event_paranoid=1` (or run as root; in Docker "
                       "add --cap-add PERFMON or SYS_ADMIN); or use --backend eu-stack")
    return True, f"perf {version() or '?'} (perf_event_paranoid={par})"


def offcpu_refused(reason: str, paranoid: int | None) -> str:
    """The one message for "perf cannot record scheduler tracepoints here": the cause, the fix and
    the fallback."""
    if reason == "tracefs":
        return ("perf cannot record off-CPU time here: the sched:sched_switch tracepoint is not visible "
                "(tracefs is not mounted at /sys/kernel/tracing, or this kernel lacks CONFIG_FTRACE). Fix: "
                "`sudo mount -t tracefs nodev /sys/kernel/tracing` (in Docker, mount it into the container); "
                "or use --backend eu-stack for wall time, or --mode cpu for on-CPU time only")
    return (f"perf cannot record off-CPU time here: perf_event_paranoid setting is {paranoid} and perf runs "
            "without CAP_PERFMON/CAP_SYS_ADMIN, so scheduler tracepoints (sched:sched_switch) are refused. "
            "Fix: run as root (in Docker add --cap-add PERFMON), or `sudo sysctl kernel.perf_event_paranoid=-1` "
            "with a readable /sys/kernel/tracing; or use --backend eu-stack for wall time, or --mode cpu for "
            "on-CPU time only")


def offcpu_available() -> tuple[bool, str]:
    """Can perf record sched_switch here (--mode wall/both)? Unprivileged users need
    perf_event_paranoid -1 and a readable tracefs; root gets tracefs mounted by perf itself."""
    par = _paranoid()
    if os.geteuid() != 0 and par is not None and par > -1:
        return False, offcpu_refused("paranoid", par)
    if os.geteuid() != 0 and not os.access("/sys/kernel/tracing/events/sched/sched_switch", os.R_OK):
        return False, offcpu_refused("tracefs", par)
    return True, "sched_switch: perf may record it"


def _cmdline_env(pid: int) -> tuple[list[str], dict[str, str]]:
    def rd(name):
        try:
            with open(f"/proc/{pid}/{name}", "rb") as f:
                return f.read().split(b"\0")
        except OSError:
            return []
    argv = [a.decode(errors="replace") for a in rd("cmdline") if a]
    env = {}
    for item in rd("environ"):
        k, _, v = item.decode(errors="replace").partition("=")
        if k:
            env[k] = v
    return argv, env


def python_mode(pid: int) -> str:
    """``perf_jit`` | ``trampoline`` | ``native``: what the target interpreter gives perf."""
    if pid == os.getpid():
        if sys.version_info >= (3, 13) and ("perf_jit" in sys._xoptions
                                            or os.environ.get("PYTHON_PERF_JIT_SUPPORT")):
            return "perf_jit"
        active = getattr(sys, "is_stack_trampoline_active", None)
        return "trampoline" if active and active() else "native"
    argv, env = _cmdline_env(pid)
    flags = " ".join(argv[1:3] + [a for a in argv if a.startswith("-X")])
    if "perf_jit" in flags or "perf_jit" in argv or env.get("PYTHON_PERF_JIT_SUPPORT"):
        return "perf_jit"
    if "perf" in [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "-X"] or env.get("PYTHONPERFSUPPORT"):
        return "trampoline"
    return "trampoline" if _own_map(pid) else "native"


def _drop_stale_map(pid: int) -> None:
    """Remove ``/tmp/perf-PID.map`` when an ended process with this pid left it (ours to remove:
    owned by this user; another user's is left alone, and its lines are never read as ours)."""
    path = f"/tmp/perf-{pid}.map"
    try:
        st = os.lstat(path)
    except OSError:
        return
    if st.st_uid == os.geteuid() and not _own_map(pid):
        try:
            os.unlink(path)
        except OSError:
            pass


def _own_map(pid: int) -> bool:
    """``/tmp/perf-PID.map`` exists and was written since ``pid`` started: an -X perf process that
    ended leaves its map behind (1,215 of them in /tmp here), and its pid comes round again."""
    fields = procfs.stat_fields(f"/proc/{pid}/stat")
    try:
        started = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME) + int(fields[19]) / os.sysconf("SC_CLK_TCK")
        return os.stat(f"/tmp/perf-{pid}.map").st_mtime >= started - 1.0
    except (OSError, TypeError, ValueError, IndexError):
        return False


class Recorder:
    def __init__(self, options: Options):
        self.options = options
        self.tmp = TempDir("profmagic-perf-")
        self.proc: subprocess.Popen | None = None
        self.system: subprocess.Popen | None = None   # --system's perf record -a
        self.ctl = self.ack = None
        self.mode = "native"
        self.activated = False
        self.enabled_at = None
        self.disabled_at = None
        self.window = None            # CLOCK_MONOTONIC (start, end) of the recording (--mode wall/both)
        self.alive: dict[int, str] = {}
        self.cpu0: dict[int, int] = {}  # tid -> CPU ns the kernel had charged at the window's start
        self.status = ""
        self.offcpu = options.mode in ("wall", "both")
        self.jitdump: JitDump | None = None
        self.jit_entries = 0
        self.switch_stack = STACK_BYTES
        self.switch_stack_why = ""
        self.lean = self.offcpu and bool(options.extra.get("lean_switches"))
        self.poller: Poller | None = None   # Python names where perf sees none (perf_pynames.py)
        self.poller_error: str | None = None

    def _ctl(self, cmd: str, exited_ok: bool = False) -> float:
        """Write a control command and wait for perf's ack; returns when it was acknowledged.
        With ``exited_ok``, perf having ended (its target exited) counts as done."""
        os.write(self.ctl, cmd.encode() + b"\n")
        deadline = time.monotonic() + ACK_TIMEOUT
        buf = b""
        while time.monotonic() < deadline:
            r, _, _ = select.select([self.ack], [], [], 0.1)
            if r:
                buf += os.read(self.ack, 64)
                if b"ack" in buf:
                    return time.time()
            elif self.proc.poll() is not None:
                if exited_ok:
                    return time.time()
                break
        err = self._stderr()
        m = re.search(r"perf_event_paranoid setting is (-?\d+)", err)
        if self.offcpu and (m or "No permission to enable sched:" in err):
            raise ProfilerError(offcpu_refused("paranoid", int(m.group(1)) if m else _paranoid()))
        if self.offcpu and re.search(r"unknown tracepoint|events/sched/sched_switch not found", err):
            raise ProfilerError(offcpu_refused("tracefs", _paranoid()))
        if m:  # perf's own explanation is a page long: say it in one line
            raise ProfilerError(
                f"perf may not sample here: perf_event_paranoid setting is {m.group(1)} and perf runs without "
                "CAP_PERFMON/CAP_SYS_ADMIN. Fix: `sudo sysctl kernel.perf_event_paranoid=1` (or run as root; "
                "in Docker add --cap-add PERFMON); or use --backend eu-stack")
        raise ProfilerError(f"perf did not acknowledge '{cmd}' (exit {self.proc.poll()}): {err}. "
                            "Fix: check `perf record -p PID` works here; or use --backend eu-stack")

    def _stderr(self) -> str:
        try:
            with open(self.tmp.file("perf.err"), "rb") as f:
                return f.read().decode(errors="replace").strip()[-2000:]
        except OSError:
            return ""

    def start(self) -> None:
        ok, reason = available()
        if ok and self.offcpu:
            ok, reason = offcpu_available()
        if not ok:
            raise ProfilerError(reason)
        o = self.options
        self.mode = python_mode(o.pid)
        if (self.mode == "native" and o.pid == os.getpid() and o.extra.get("trampoline", True)
                and hasattr(sys, "activate_stack_trampoline")):
            _drop_stale_map(o.pid)   # before CPython appends to it: perf would read the old lines too
            try:
                sys.activate_stack_trampoline("perf")
                self.activated = True
                self.mode = "trampoline"
            except (ValueError, RuntimeError):
                pass
        if self.mode == "trampoline" and o.pid == os.getpid():
            # Our own trampolines get unwind info (perf_jitdump.py): whole stacks, not cut at the
            # innermost Python frame. Mapped now, so that perf sees it when it starts.
            jd = JitDump()
            self.jitdump = jd if jd.open() else None
        ctl, ack = self.tmp.file("ctl"), self.tmp.file("ack")
        os.mkfifo(ctl)
        os.mkfifo(ack)
        # O_RDWR: opening a FIFO this way does not block waiting for perf.
        self.ctl = os.open(ctl, os.O_RDWR)
        self.ack = os.open(ack, os.O_RDWR | os.O_NONBLOCK)
        rate = max(1, int(round(o.rate)))
        if self.mode == "native" and o.extra.get("pynames", True):   # before perf: it would follow the poller
            self.poller = Poller(o.pid, rate, self.tmp.file("pyframes.txt"))
            self.poller_error = self.poller.start()
            if self.poller_error is not None:
                self.poller = None
        if self.offcpu:
            events = ["-e", f"cpu-clock/period={10 ** 9 // rate},name=cpu-clock/"]
            # sched_waking's stack serves only to tell a wakeup in an interrupt (a timer's) from one by
            # the running thread: its kernel part is enough, so no user stack copy for it.
            self.switch_stack, self.switch_stack_why = switch_stack(o.extra.get("switch_stack"), self.mode,
                                                                    self.jitdump is not None)
            switch = ("sched:sched_switch" if self.switch_stack == STACK_BYTES
                      else f"sched:sched_switch/call-graph=dwarf,stack-size={self.switch_stack}/")
            events += ["-e", switch] + ([] if self.lean else ["-e", "sched:sched_waking/call-graph=fp/"])
            events += ["--switch-events", "-k", "CLOCK_MONOTONIC"] + (["--user-callchains"] if self.lean else [])
        else:
            events = ["-e", "cpu-clock", "-F", str(rate)] + (
                ["-k", "CLOCK_MONOTONIC"] if self.mode == "perf_jit" or self.jitdump or self.poller else [])
        if os.geteuid() == 0:  # (an unprivileged user may lock only perf_event_mlock_kb, 516 KB)
            events += ["--mmap-pages", str(MMAP_PAGES)]
        cmd = (["perf", "record"] + events + ["--call-graph", f"dwarf,{STACK_BYTES}", "--no-bpf-event",
               "--no-buildid-cache", "-D", "-1",
               f"--control=fifo:{ctl},{ack}", "-p", str(o.pid), "-o", self.tmp.file("perf.data")])
        with open(self.tmp.file("perf.err"), "wb") as err:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                         **OWN_GROUP)
        if self.offcpu and o.system:   # every CPU's wakeups, beside the per-process events (perf_sched.py)
            if (_paranoid() or 0) > 0 and os.geteuid() != 0:
                raise ProfilerError("--system needs root or perf_event_paranoid <= 0 (perf record -a): "
                                    f"it is {_paranoid()}. Fix: `sudo sysctl kernel.perf_event_paranoid=0`")
            with open(self.tmp.file("system.err"), "wb") as err:
                self.system = subprocess.Popen(
                    ["perf", "record", "-a", "-e", "sched:sched_waking/call-graph=fp/", "-k", "CLOCK_MONOTONIC",
                     "--no-bpf-event", "--no-buildid-cache", "-o", self.tmp.file("system.data")],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, **OWN_GROUP)
        self.enabled_at = self._ctl("enable")
        if self.offcpu:
            self.window = (time.monotonic(), None)
            self.alive = _threads(o.pid)
            self.cpu0 = _charged_ns(o.pid)

    def stop(self) -> Capture:
        if self.proc is None:
            raise ProfilerError("perf was not started")
        # perf ends by itself when the target process exits.
        charged = {}
        if self.offcpu:
            charged = {tid: ns - self.cpu0.get(tid, 0) for tid, ns in _charged_ns(self.options.pid).items()}
            self.window = (self.window[0], time.monotonic())
        self.disabled_at = self._ctl("disable", exited_ok=True)
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            rc = self.proc.wait(60)
        except subprocess.TimeoutExpired:
            reap(self.proc, signal.SIGKILL)
            raise ProfilerError("perf did not stop within 60 s of SIGINT") from None
        self.status = self._stderr()
        pyframes = self.poller.stop() if self.poller is not None else b""
        system = self._system_wakeups()
        data_file = self.tmp.file("perf.data")
        if not os.path.exists(data_file):
            raise ProfilerError(f"perf wrote no data (exit {rc}): {self.status}")
        stray = perf_maps.hide_stray_maps(data_file)
        if self.jitdump is not None:
            self.jit_entries = self.jitdump.write()
        if self.mode == "perf_jit" or self.jitdump is not None:
            jit_file = self.tmp.file("perf.jit.data")
            res = subprocess.run(["perf", "inject", "--jit", "-i", data_file, "-o", jit_file],
                                 capture_output=True)
            if res.returncode != 0:
                raise ProfilerError("perf inject --jit failed: " + res.stderr.decode(errors="replace")[-2000:])
            data_file = jit_file
        text = _script((SCHED_SCRIPT if self.offcpu else ["-F", SCRIPT_FIELDS]), data_file, "perf script")
        if self.lean:
            text = _kernel_leaves(text, data_file)
        meta = {"backend": NAME, "python_mode": self.mode, "pid": self.options.pid, "event": "cpu-clock",
                "duration": (self.disabled_at - self.enabled_at) if self.enabled_at else None,
                "trampoline_unwind": (f"jitdump of {self.jit_entries} trampolines (perf_jitdump.py)"
                                      if self.jitdump is not None else None),
                "stray_maps_hidden": stray or None}
        data = self.jitdump.rename(text) if self.jitdump is not None else text
        if self.offcpu:
            from ..formats.perf_sched import header_line
            data = header_line(self.window[0], self.window[1], self.options.pid, self.alive, charged).encode() + data
            data += system
            switches = text.count(b" sched:sched_switch:")
            meta.update(switch_stack=self.switch_stack, stack_bytes=STACK_BYTES,
                        cost=(f"perf copied {_kb(STACK_BYTES)} of user stack per cpu-clock sample and "
                              f"{_kb(self.switch_stack)} at each of {switches:,} context switches "
                              f"(sched_switch; {self.switch_stack_why})"
                              + ("; lean switches: user stacks only (a sample in the kernel keeps its leaf "
                                 "function), no wakeup records" if self.lean else "")))
            meta.update(events=["cpu-clock", *(LEAN_EVENTS if self.lean else SCHED_EVENTS)], mode=self.options.mode,
                        switches="lean" if self.lean else "full",
                        metric_note=("wall = on-CPU (cpu-clock samples) + off-CPU (sched_switch: each stretch "
                                     "off a core goes to the stack the thread left it in)"))
        if self.poller_error:
            meta["python_names"] = {"error": self.poller_error}
        # Snapshots name samples: with none (a process that never ran), the capture stays empty, as
        # an empty recording is read (Session: "recorded nothing").
        return Capture(data + pyframes if data.strip() else data, FORMAT, meta)

    def _system_wakeups(self) -> bytes:
        """--system: the every-CPU wakeups as perf script text (appended to the per-process one)."""
        if self.system is None:
            return b""
        self.system.send_signal(signal.SIGINT)
        try:
            self.system.wait(60)
        except subprocess.TimeoutExpired:
            reap(self.system, signal.SIGKILL)
            raise ProfilerError("perf record -a (--system) did not stop within 60 s of SIGINT") from None
        self.system = None
        return _script(["-F", SCRIPT_FIELDS + ",trace"], self.tmp.file("system.data"), "perf script (--system)")

    def close(self) -> None:
        if self.poller is not None:
            self.poller.close()
            self.poller = None
        if self.system is not None:
            reap(self.system, signal.SIGINT)
            self.system = None
        if self.proc is not None:
            reap(self.proc, signal.SIGINT)
        for fd in (self.ctl, self.ack):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.ctl = self.ack = None
        if self.jitdump is not None:
            self.jitdump.close()
            self.jitdump = None
        if self.activated and hasattr(sys, "deactivate_stack_trampoline"):
            sys.deactivate_stack_trampoline()
            self.activated = False
        pid = self.options.pid
        for f in glob.glob(f"/tmp/jitted-{pid}-*.so"):
            try:
                os.unlink(f)
            except OSError:
                pass
        if self.mode == "perf_jit" and not os.path.exists(f"/proc/{pid}"):
            try:
                os.unlink(f"/tmp/jit-{pid}.dump")
            except OSError:
                pass
        self.tmp.close()


_CPU_HEAD = re.compile(rb"^.*? \d+/(\d+) +(\d+\.\d+): +\d+ +cpu-clock: *$", re.M)
_KERNEL_IP = re.compile(rb"^ *(\d+) +(\d+\.\d+): +cpu-clock: +(ffff[0-9a-f]+) +(\S+)", re.M)


def _kernel_leaves(text: bytes, data_file: str) -> bytes:
    """Lean switches: each cpu-clock sample taken in the kernel gets its leaf function (the sample's
    own IP, from ``perf script -G``) above its user stack; the reader needs it to tell a period
    carried over a switch (leaf ``finish_task_switch``) from time the thread ran."""
    ips = {(m[1], m[2]): m[3] + b" " + m[4] for m in _KERNEL_IP.finditer(
        _script(["-G", "-F", "tid,time,event,ip,sym"], data_file, "perf script -G"))}
    return _CPU_HEAD.sub(lambda m: m[0] + (b"\n\t" + ips[(m[1], m[2])] + b" ([kernel.kallsyms])"
                                           if (m[1], m[2]) in ips else b""), text)


def _kb(n: int) -> str:
    return f"{n // 1024} KB" if n % 1024 == 0 else f"{n:,} bytes"


def switch_stack(asked, mode: str, jitdump: bool) -> tuple[int, str]:
    """Bytes of user stack perf copies at each sched_switch, and why that many."""
    if asked is not None:
        if isinstance(asked, bool) or not isinstance(asked, int) or not 8 <= asked <= SWITCH_STACK_MAX \
                or asked % 8:
            raise ProfilerError(f"switch_stack={asked!r}: perf copies a multiple of 8 bytes of stack, from 8 to "
                                f"{SWITCH_STACK_MAX} (default {STACK_BYTES}; {SHALLOW_SWITCH_STACK} where the "
                                "unwind ends at the innermost Python frame)")
        return asked, "switch_stack asked"
    if mode == "trampoline" and not jitdump:
        return SHALLOW_SWITCH_STACK, ("the unwind ends at the innermost Python frame, perf's trampoline in another "
                                      "process: a larger copy would add no frame")
    return STACK_BYTES, "the unwind goes on to the thread's root"


def _threads(pid: int) -> dict[int, str]:
    """tid -> comm of every thread of ``pid`` now."""
    return {tid: text.strip() for tid, text in procfs.per_thread(pid, "comm").items()}


def _charged_ns(pid: int) -> dict[int, int]:
    """tid -> CPU nanoseconds the kernel has charged each thread of ``pid`` (schedstat's first field)."""
    return {tid: int(text.split()[0]) for tid, text in procfs.per_thread(pid, "schedstat").items() if text.split()}


def read(capture: Capture, options: Options | None = None):
    from ..formats import perf_script
    meta = {"metric_note": "perf cpu-clock samples: on-CPU time only; a sleeping thread is not sampled",
            **capture.meta, "backend": NAME, "versions": {"perf": version()}}
    if options is not None:
        meta["rate"] = float(options.rate)
    # Threads get the label every backend shares (not perf's comm-PID/TID), so thread filters match;
    # so do C/C++ function names (formats/native_names.py).
    return perf_script.read(capture.data, source="perf capture", meta=meta,
                            thread_labels="threads", native_names=True)

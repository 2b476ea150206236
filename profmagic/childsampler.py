"""Record child processes from inside, from their first moment: ``%%profile --subprocesses``.

An out-of-process sampler (py-spy ``-s``) finds children by polling and misses their first
0.2–0.3 s. Here each child samples itself from the start instead:

- fork (``multiprocessing`` fork, ``os.fork``): an ``os.register_at_fork`` hook starts a sampler
  thread in the child before ``fork()`` returns there;
- spawn, forkserver, ``subprocess.run([sys.executable, ...])``: the parent puts a directory holding
  a ``sitecustomize.py`` first on ``PYTHONPATH``; the child's ``site`` imports it at start-up, it
  starts the sampler from this file, then imports the child's own ``sitecustomize`` if it had one.

Each child appends one line per sampling pass to ``<dir>/<pid>.jsonl`` with one ``write()``, so a
child that is killed keeps every pass already written. A process that ``exec``s a new Python image
keeps its pid: the new image writes ``<pid>.<n>.jsonl`` (n = 1, 2...), so both images' files survive.
A hook that fails writes why to ``<dir>/<pid>.failed``, never to the child's stderr. The parent
writes ``<dir>/STOP`` when the recording ends: children still running stop sampling and close
their file.

The child side uses the standard library only (it runs before the child's own imports, and a
spawned child must not pay for importing pandas): it writes lines where the built-in sampler
builds a Profile in memory; both run the loop of ``sampling.py``.
"""
from __future__ import annotations

import json
import os
import re
import sys
import threading
import time

try:
    from . import reasons
    from .interrupts import start_thread
    from .sampling import Codes, ThreadClock, code_name, every
except ImportError:  # loaded by path from a child's sitecustomize, outside the package
    import importlib.util as _u

    def _load(name: str):
        spec = _u.spec_from_file_location(f"_profmagic_{name}",
                                          os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py"))
        mod = _u.module_from_spec(spec)
        sys.modules[spec.name] = mod   # (dataclasses look their module up)
        spec.loader.exec_module(mod)
        return mod
    _sampling = _load("sampling")
    reasons = _load("reasons")
    start_thread = _load("interrupts").start_thread
    Codes, ThreadClock, code_name, every = _sampling.Codes, _sampling.ThreadClock, _sampling.code_name, _sampling.every

ENV_DIR = "PROFMAGIC_CHILD_DIR"
ENV_RATE = "PROFMAGIC_CHILD_RATE"
STOP = "STOP"
HOOK_DIR = "hook"

# -- child side --------------------------------------------------------------------------
_sampler = None
_hook_installed = False
_active: tuple[str, float] | None = None   # (dir, rate) while a recording in this process wants children


class _Thread(ThreadClock):
    """A thread's CPU clock and what ``reasons.interval_reason`` keeps between its samples."""
    __slots__ = ("proc", "off", "seen", "next_read", "memo")

    def __init__(self, ident: int, native_id: int | None):
        super().__init__(ident, native_id)
        self.proc = reasons.ProcReader(os.getpid(), native_id) if native_id is not None else None
        self.off = 0.0
        self.seen = None
        self.next_read = 0.0
        self.memo: dict = {}


class ChildSampler:
    """Samples every Python thread of this process into ``<dir>/<pid>.jsonl``, each sample with its
    reason (``reasons.interval_reason``, as the built-in sampler) and its run-queue seconds when
    a /proc read measured some."""

    CHECK_EVERY = 10   # passes between looks for the STOP file

    def __init__(self, directory: str, rate: float):
        self.dir = directory
        self.interval = 1.0 / float(rate)
        self.rate = float(rate)
        self.image, self.fd = _own_file(directory)
        self.codes = Codes(self.new_code)
        self.nframes = 0
        self.clocks: dict[tuple, _Thread] = {}
        self.pending: list = []   # records of this pass: frames first seen in it, then samples
        # The thread that starts the sampler: after fork() on Python < 3.13 its Thread object still
        # carries the parent's native_id (threading._after_fork does not update it).
        self.starter = (threading.current_thread(), threading.get_native_id())
        for t in threading.enumerate():   # CPU from now on: the start-up before the sampler is not sampled
            nid = self.native_id(t)
            if nid is not None:
                clock = self.clocks[(t.ident, nid)] = _Thread(t.ident, nid)
                clock.baseline()
        self.name = None
        self.stop = threading.Event()
        self.write({"v": 1, "pid": os.getpid(), "image": self.image, "ppid": os.getppid(), "argv": _argv(),
                    "t0": time.perf_counter(), "rate": self.rate, "python": sys.version.split()[0]})
        start_thread(threading.Thread(target=self.run, name="profmagic-child-sampler", daemon=True), self, "thread")

    def write(self, *records) -> None:
        os.write(self.fd, "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records).encode())

    def native_id(self, t) -> int | None:
        return self.starter[1] if t is self.starter[0] else getattr(t, "native_id", None)

    def new_code(self, code, line: int) -> int:
        fid = self.nframes
        self.nframes += 1
        self.pending.append(["f", fid, code_name(code), code.co_filename, line])
        return fid

    def run(self) -> None:
        me = threading.get_ident()
        passes = 0

        def tick(now, wall):
            nonlocal passes
            self.tick(me, now, wall)
            passes += 1
            return passes % self.CHECK_EVERY != 0 or (
                os.path.isdir(self.dir) and not os.path.exists(os.path.join(self.dir, STOP)))
        try:
            every(self.interval, self.stop, tick)
        except OSError:   # the directory went away: the recording is over
            pass
        finally:
            for clock in self.clocks.values():
                if clock.proc is not None:
                    clock.proc.close()
            try:
                os.close(self.fd)
            except OSError:
                pass

    def tick(self, me: int, now: float, wall: float) -> None:
        out = self.pending
        mp = sys.modules.get("multiprocessing")
        if mp is not None:
            name = mp.current_process().name
            if name != self.name:
                self.name = name
                out.append(["n", name])
        live = {t.ident: t for t in threading.enumerate()}
        sampled = set()
        for ident, f in sys._current_frames().items():
            if ident == me:
                continue
            t = live.get(ident)
            nid = self.native_id(t)
            sampled.add((ident, nid))
            clock = self.clocks.get((ident, nid))
            if clock is None:
                clock = self.clocks[(ident, nid)] = _Thread(ident, nid)
            cpu = clock.delta() if nid is not None else None
            stack = self.codes.stack(f)   # appends the records of frames first seen to out
            if cpu is None or cpu != cpu:
                out.append(["s", now, nid, t.name if t is not None else "?", wall, None, stack, reasons.UNKNOWN])
                continue
            reason, runq = reasons.interval_reason(clock, f, wall, cpu, now)
            rec = ["s", now, nid, t.name if t is not None else "?", wall, cpu, stack, reason]
            if runq > 0.0:
                rec.append(round(runq, 9))
            out.append(rec)
        if len(self.clocks) > len(sampled):   # threads that ended: their /proc files closed (a long-lived
            for key in [k for k in self.clocks if k not in sampled]:   # child may start thousands)
                gone = self.clocks.pop(key)
                if gone.proc is not None:
                    gone.proc.close()
        self.pending = []
        self.write(*out)


def _own_file(directory: str) -> tuple[int, int]:
    """(image, fd) of this process image's new file: ``<pid>.jsonl``, or ``<pid>.<n>.jsonl`` when an
    earlier image of this pid (before an exec) has one."""
    pid = os.getpid()
    for image in range(1000):
        name = f"{pid}.jsonl" if image == 0 else f"{pid}.{image}.jsonl"
        try:
            fd = os.open(os.path.join(directory, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
            return image, fd
        except FileExistsError:
            continue
    raise OSError(f"{pid}: 1000 process images already recorded")


def _argv() -> list[str]:
    try:
        with open("/proc/self/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return list(sys.argv)


def _start(directory: str, rate: float) -> None:
    global _sampler
    if _sampler is not None or not os.path.isdir(directory) or os.path.exists(os.path.join(directory, STOP)):
        return
    _sampler = ChildSampler(directory, rate)


def _after_fork_in_child() -> None:
    global _sampler
    _sampler = None          # the parent's sampler thread did not survive the fork
    if _active is not None:
        try:
            _start(*_active)
        except OSError:
            pass


def start_from_env() -> None:
    """The child side of the sitecustomize hook: start sampling when the parent asked for it."""
    d = os.environ.get(ENV_DIR)
    if d:
        activate(d, float(os.environ.get(ENV_RATE) or 100))
        _start(d, float(os.environ.get(ENV_RATE) or 100))


def activate(directory: str, rate: float) -> None:
    """Children forked from now on (and their children) record into ``directory``."""
    global _active, _hook_installed
    _active = (directory, float(rate))
    if not _hook_installed:          # register_at_fork has no undo: the hook checks _active
        os.register_at_fork(after_in_child=_after_fork_in_child)
        _hook_installed = True


def deactivate() -> None:
    global _active
    _active = None


# -- parent side -------------------------------------------------------------------------
_FILE = re.compile(r"(\d+)(?:\.(\d+))?\.(jsonl|failed)")


class Children:
    """The parent's end: ``start()`` before the code, ``stop()`` after, ``close()`` always.

    ``stop()`` returns the raw per-child records; ``formats.children`` reads them.
    """

    def __init__(self, rate: float = 100.0):
        self.rate = float(rate)
        self.tmp = None
        self.saved_env: dict[str, str | None] = {}
        self.t0 = 0.0
        self.t1 = 0.0
        self._seen: dict[str, tuple[int, int]] = {}   # file -> (bytes read, samples in them)
        self.failures: dict[int, str] = {}   # pid -> why its start-up hook did not record it

    def start(self) -> None:
        from .tempdirs import TempDir
        self.tmp = TempDir(prefix="profmagic-children-")
        hook = os.path.join(self.tmp.path, HOOK_DIR)
        os.mkdir(hook)
        from .launch import sitecustomize
        with open(os.path.join(hook, "sitecustomize.py"), "w") as f:
            f.write(sitecustomize("%%profile --subprocesses", __file__, "start_from_env",
                                  "child sampler did not start", failures_in=ENV_DIR))
        env = {ENV_DIR: self.tmp.path, ENV_RATE: repr(self.rate),
               "PYTHONPATH": os.pathsep.join(p for p in (hook, os.environ.get("PYTHONPATH")) if p)}
        self.saved_env = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        self.t0 = time.perf_counter()
        activate(self.tmp.path, self.rate)

    @property
    def hook_dir(self) -> str | None:
        """The folder of the children's start-up hook (its sitecustomize), while recording."""
        return os.path.join(self.tmp.path, HOOK_DIR) if self.tmp is not None else None

    def _restore(self) -> None:
        deactivate()
        for k, v in self.saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        self.saved_env = {}

    def stop(self) -> dict[tuple[int, int], bytes]:
        """Tell children to stop; the bytes each child process image wrote, by (pid, image): image 0
        is the process as forked or started, 1, 2... the images it ``exec``'d. ``failures``: pid ->
        why the hook did not start in that child."""
        self.t1 = time.perf_counter()
        self._restore()
        if self.tmp is None:
            return {}
        with open(self.tmp.file(STOP), "w"):
            pass
        out = {}
        for name in sorted(os.listdir(self.tmp.path)):
            m = _FILE.fullmatch(name)
            if m:
                with open(self.tmp.file(name), "rb") as f:
                    data = f.read()
                if m.group(3) == "failed":
                    self.failures[int(m.group(1))] = data.decode(errors="replace").strip()
                else:
                    out[int(m.group(1)), int(m.group(2) or 0)] = data
        return out

    def samples_so_far(self) -> int:
        """Samples the children have written so far (for a progress line; reads only what is new)."""
        if self.tmp is None:
            return 0
        seen = self._seen
        for name in os.listdir(self.tmp.path):
            if not name.endswith(".jsonl"):
                continue
            offset, count = seen.get(name, (0, 0))
            try:
                with open(self.tmp.file(name), "rb") as f:
                    f.seek(offset)
                    chunk = f.read()
            except OSError:
                continue
            whole = chunk[:chunk.rfind(b"\n") + 1]
            seen[name] = (offset + len(whole), count + whole.count(b'["s",'))
        return sum(c for _, c in seen.values())

    def close(self) -> None:
        self._restore()
        if self.tmp is not None:
            self.tmp.close()
            self.tmp = None

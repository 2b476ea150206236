"""Start a command so that it is recorded from its first line: ``profmagic record -- cmd args``.

- A Python command waits at start-up until the recorder samples it: a ``sitecustomize.py`` put
  first on ``PYTHONPATH`` runs once the interpreter is up, before the program's first line. It
  tells the parent it is ready, logs the process's threads for py-spy's timed format
  (``threads.log_threads``), and blocks until the parent, now recording, lets it go. Then it puts
  the command's own ``PYTHONPATH`` back (its children start as they would without profmagic) and
  imports the command's own ``sitecustomize``, if it has one.
- A Python started with ``-I``, ``-E`` or ``-S`` never imports it: it starts at once and the
  recorder attaches as soon as it can (``Launch.gated`` is False; the first moments are missed).
- Any other command is stopped before it runs (a small launcher stops itself with SIGSTOP, then
  execs the command): the profiler attaches to the stopped pid and follows it through exec.

The child side (``gate_from_env``) uses the standard library only, and this module is loaded by
path: a child must not import profmagic (and pandas) to start.
"""
from __future__ import annotations

import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time

ENV_GATE = "PROFMAGIC_GATE"          # "<ready fd>,<go fd>"
ENV_LOG = "PROFMAGIC_THREAD_LOG"     # where the child logs its threads
ENV_PATH = "PROFMAGIC_PYTHONPATH"    # the command's own PYTHONPATH, put back in the child
READY_TIMEOUT = 60.0                 # seconds for a Python command to reach its site import
STOPPED_TIMEOUT = 20.0
_HERE = os.path.dirname(os.path.abspath(__file__))
_SITECUSTOMIZE = '''\
# Written by profmagic for one recording ({why}); removed when it ends.
import os, sys
_here = os.path.dirname(os.path.abspath(__file__))
try:
    import importlib.util as _u
    _s = _u.spec_from_file_location({name!r}, {path!r})
    _m = _u.module_from_spec(_s)
    _s.loader.exec_module(_m)
    _m.{call}()
except Exception as _e:  # never break the process's start-up
{report}# Absolute entries only: "" and relative ones would need the working folder, which may be gone.
sys.path[:] = [p for p in sys.path if not (os.path.isabs(p) and os.path.normpath(p) == _here)]
# The process's own sitecustomize, if it has one, in this one's place (deleting this module from
# sys.modules instead makes the import machinery fail with KeyError when there is none).
import importlib.machinery as _mach, importlib.util as _u
_own = _mach.PathFinder.find_spec("sitecustomize", sys.path)
if _own is not None:
    sys.modules["sitecustomize"] = _m = _u.module_from_spec(_own)
    _own.loader.exec_module(_m)
'''


_TO_STDERR = '    sys.stderr.write("profmagic: {failed}: %r\\n" % (_e,))\n'
_TO_FILE = ('    try:  # not on the child\'s stderr: that is the program\'s own output\n'
            '        with open(os.path.join(os.environ[{env!r}], "%d.failed" % os.getpid()), "a") as _f:\n'
            '            _f.write("{failed}: %r\\n" % (_e,))\n'
            '    except Exception:\n'
            '        pass\n')


def sitecustomize(why: str, path: str, call: str, failed: str, failures_in: str | None = None) -> str:
    """The text of a sitecustomize.py that loads the module at ``path`` by path (a child must not
    import profmagic to start), calls its ``call()``, then runs the process's own sitecustomize, if
    it has one. If the call raises, ``failed: <error>`` goes to stderr, or, with ``failures_in`` (the
    name of an environment variable holding a directory), to ``<that directory>/<pid>.failed``."""
    name = "_profmagic_" + os.path.splitext(os.path.basename(path))[0]
    report = (_TO_FILE.format(env=failures_in, failed=failed) if failures_in
              else _TO_STDERR.format(failed=failed))
    return _SITECUSTOMIZE.format(why=why, name=name, path=os.path.abspath(path), call=call, report=report)


# argv[0] of the stop-then-exec launcher is "-c"; the command follows.
_STOP_EXEC = ("import os, signal, sys\n"
              "os.kill(os.getpid(), signal.SIGSTOP)\n"
              "try:\n"
              "    os.execvp(sys.argv[1], sys.argv[1:])\n"
              "except OSError as e:\n"
              "    sys.stderr.write('profmagic: could not run %s: %s\\n' % (sys.argv[1], e))\n"
              "    os._exit(127)\n")


# -- the child side ----------------------------------------------------------------------------------
def _load(name: str):
    import importlib.util
    spec = importlib.util.spec_from_file_location(f"_profmagic_{name}", os.path.join(_HERE, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def gate_from_env() -> None:
    """In the command, from its sitecustomize: log threads, say ready, wait for the go."""
    gate = os.environ.pop(ENV_GATE, None)
    log = os.environ.pop(ENV_LOG, None)
    own = os.environ.pop(ENV_PATH, None)
    if own is not None:
        if own:
            os.environ["PYTHONPATH"] = own
        else:
            os.environ.pop("PYTHONPATH", None)
    if log:
        _load("threads").log_threads(log)
    if gate:
        ready, go = (int(x) for x in gate.split(","))
        try:
            os.write(ready, b"ready\n")
        finally:
            os.close(ready)
        try:
            os.read(go, 1)     # a byte, or end of file if the parent died: go either way
        finally:
            os.close(go)


# -- the parent side ------------------------------------------------------------------------------------
def resolve(program: str) -> str | None:
    """The executable ``program`` names (a path, or a name on PATH), or None."""
    if os.sep in program:
        return program if os.path.isfile(program) and os.access(program, os.X_OK) else None
    return shutil.which(program)


_PYTHON_NAME = re.compile(r"^python[\d.]*[a-z]?$")


def is_python(path: str) -> bool:
    """Is ``path`` a Python interpreter, or a script run by one (its ``#!`` line names python)."""
    if _PYTHON_NAME.match(os.path.basename(path)):
        return True
    try:
        if os.path.samefile(path, sys.executable):
            return True
        with open(path, "rb") as f:
            head = f.read(256)
    except OSError:
        return False
    return head.startswith(b"#!") and b"python" in head.split(b"\n", 1)[0]


def imports_site(argv: list[str], path: str) -> bool:
    """Does this Python command import sitecustomize from PYTHONPATH: no -I, -E or -S among its
    interpreter options (nor on its ``#!`` line)."""
    opts = []
    if _PYTHON_NAME.match(os.path.basename(path)) or _samefile(path, sys.executable):
        for tok in argv[1:]:
            if tok in ("-c", "-m", "-") or not tok.startswith("-"):
                break
            opts.append(tok)
    else:
        try:
            with open(path, "rb") as f:
                opts = f.readline().decode(errors="replace").split()[1:]
        except OSError:
            pass
    for tok in opts:
        if tok.startswith("--") or not tok.startswith("-"):
            continue
        flags = re.split(r"[XW]", tok[1:], maxsplit=1)[0]   # -Xdev, -Wignore carry a value
        if set(flags) & set("IES"):
            return False
    return True


def _samefile(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


class Launch:
    """A command started for recording. ``start()`` returns once it waits for the recorder (or has
    started, when it cannot wait); ``go()`` lets it run; ``close()`` always (it reaps the command).

    ``gate``: wait at Python start-up (the command is Python); ``thread_log``: a file for the
    command's threads; ``stop_first``: stop before exec (any command); ``own_group``: in a process
    group of its own, which ``send`` signals whole (when no terminal sends Ctrl-C to the group)."""

    def __init__(self, argv: list[str], gate: bool = False, thread_log: str | None = None,
                 stop_first: bool = False, own_group: bool = False):
        self.argv = list(argv)
        self.gate, self.thread_log, self.stop_first = gate, thread_log, stop_first
        self.own_group = own_group
        self.proc: subprocess.Popen | None = None
        self.hook: str | None = None
        self._ready = self._go = None
        self.started_at: float | None = None
        self.cpu_at_go: float | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def start(self, hook_dir: str) -> None:
        """Start the command; ``hook_dir``: an empty private folder for the sitecustomize."""
        if self.stop_first:
            self.proc = subprocess.Popen([sys.executable, "-S", "-c", _STOP_EXEC, *self.argv], **self._group())
            self._wait_stopped()
            return
        if not self.gate:
            self.proc = subprocess.Popen(self.argv, **self._group())
            self.started_at = time.monotonic()
            return
        with open(os.path.join(hook_dir, "sitecustomize.py"), "w") as f:
            f.write(sitecustomize("profmagic record", __file__, "gate_from_env", "the start-up gate failed"))
        ready_r, ready_w = os.pipe()
        go_r, go_w = os.pipe()
        env = dict(os.environ)
        own = env.get("PYTHONPATH")
        env.update({ENV_GATE: f"{ready_w},{go_r}", ENV_PATH: own or "",
                    "PYTHONPATH": os.pathsep.join(p for p in (hook_dir, own) if p)})
        if self.thread_log:
            env[ENV_LOG] = self.thread_log
        try:
            self.proc = subprocess.Popen(self.argv, env=env, pass_fds=(ready_w, go_r), **self._group())
        finally:
            os.close(ready_w)
            os.close(go_r)
        self._ready, self._go = ready_r, go_w
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while self.proc.poll() is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"the command did not reach Python's start-up within {READY_TIMEOUT:.0f} s")
            got, _, _ = select.select([self._ready], [], [], min(0.1, left))
            if got:
                if os.read(self._ready, 64):
                    return
                break   # end of file: the gate closed without a word (it failed; it said why)
        os.close(self._ready)
        self._ready = None

    def _wait_stopped(self) -> None:
        from .procfs import process_state
        deadline = time.monotonic() + STOPPED_TIMEOUT
        while time.monotonic() < deadline and self.proc.poll() is None:
            if process_state(self.proc.pid) in ("T", "t"):
                return
            time.sleep(0.001)
        if self.proc.poll() is None:
            raise TimeoutError(f"the command's launcher did not stop within {STOPPED_TIMEOUT:.0f} s")

    @property
    def waiting(self) -> bool:
        """It waits for ``go()`` (else it runs already, or ended before it could wait)."""
        return self.proc is not None and self.proc.poll() is None and (
            self._ready is not None or (self.stop_first and self.started_at is None))

    def go(self) -> float:
        """Let the command run; when it did (time.monotonic())."""
        if self.started_at is not None:
            return self.started_at
        self.started_at = time.monotonic()
        self.cpu_at_go = self.cpu_seconds()   # the launcher's own start-up is not the command's
        if self._go is not None:
            try:
                os.write(self._go, b"g")
            except OSError:   # it ended meanwhile
                pass
        elif self.stop_first and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
        self._close_pipes()
        return self.started_at

    def _close_pipes(self) -> None:
        for fd in (self._ready, self._go):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._ready = self._go = None

    def _group(self) -> dict:
        return {"process_group": 0} if self.own_group else {}

    def send(self, sig: int) -> None:
        """Signal the command (its whole group with ``own_group``) until it is reaped: not polled
        here, so that an ended command stays a zombie (its pid, and group id, not reusable)."""
        if self.proc is not None and self.proc.returncode is None:
            try:
                if self.own_group:
                    os.killpg(self.proc.pid, sig)
                else:
                    os.kill(self.proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def ended(self) -> bool:
        """The command has exited. It is not reaped here: until ``close()`` its /proc entry (a
        zombie's) still holds the CPU time it used."""
        if self.proc is None or self.proc.returncode is not None:
            return True
        try:
            return os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is not None
        except ChildProcessError:
            return self.proc.poll() is not None

    def cpu_seconds(self) -> float | None:
        """User + system CPU seconds the command's process has used so far (a zombie's included)."""
        from .procfs import stat_fields
        try:
            fields = stat_fields(f"/proc/{self.proc.pid}/stat")
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (TypeError, IndexError, ValueError, AttributeError):
            return None

    def stopped(self) -> str | None:
        """The name of the signal that stopped the command (job control: SIGSTOP, SIGTSTP...) while it
        is stopped; None while it runs. A tracer's stop (eu-stack's snapshot) is not a stop here."""
        from .procfs import process_state
        if self.proc is None or self.proc.returncode is not None or process_state(self.proc.pid) != "T":
            return None
        try:
            info = os.waitid(os.P_PID, self.proc.pid, os.WSTOPPED | os.WNOWAIT | os.WNOHANG)
        except ChildProcessError:
            info = None
        if info is not None and info.si_code == os.CLD_STOPPED:
            try:
                return signal.Signals(info.si_status).name
            except ValueError:
                pass
        return "a signal"

    def close(self) -> int | None:
        """Reap the command. One that never got its go (the recorder failed, or record was
        interrupted) is killed before it runs a line; one that runs gets SIGTERM (and SIGCONT: a
        stopped one would keep it pending), then SIGKILL after 5 s. Its exit status."""
        proc = self.proc
        if proc is not None and self.started_at is None:
            self.send(signal.SIGKILL)    # before the pipes close: their end of file would let it run
        self._close_pipes()
        if proc is None:
            return None
        if proc.poll() is None:
            self.send(signal.SIGTERM)
            self.send(signal.SIGCONT)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                self.send(signal.SIGKILL)
                proc.wait()
        return proc.returncode


def exit_status(returncode: int | None) -> int:
    """A shell's exit status for a child's return code: 128 + N for death by signal N."""
    if returncode is None:
        return 1
    return 128 - returncode if returncode < 0 else returncode


def children_of(pid: int) -> set[int]:
    """The pids whose parent is ``pid`` now (/proc)."""
    out = set()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    from .procfs import stat_fields
    for name in entries:
        if name.isdigit():
            fields = stat_fields(f"/proc/{name}/stat")
            if fields and len(fields) > 1 and fields[1] == b"%d" % pid:
                out.add(int(name))
    return out

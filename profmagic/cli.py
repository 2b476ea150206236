"""The ``profmagic`` command: record, view, convert and info over the same pipeline as the magic.

    profmagic record [-b BACKEND] [--mode M] [-o FILE] -- python script.py args
    profmagic record --pid N [--duration S]
    profmagic view FILE [-o report.html]
    profmagic convert IN OUT [--to speedscope|folded|gecko|chrome]
    profmagic info FILE

Every error is one line on stderr and exit status 2 (docs/errors.md). ``record`` returns the
recorded command's exit status (128 + N when a signal N ended it).
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time

from . import interrupts
from .formats import load
from .errors import ProfileFormatError, ProfilerError
from .terminal import escape


def targets() -> dict:
    """``convert --to`` NAME -> format, from the writers' descriptors (formats/registry.py)."""
    from . import formats
    return {f.option: f.name for f in formats.writers()}


def _suffix_help() -> str:
    from . import formats
    return ", ".join(s for f in formats.writers() for s in f.suffixes)


class CliError(Exception):
    """A mistake on the command line or a refusal: printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):   # argparse prints its usage over several lines; one line here
        raise CliError(f"{message} (see: {self.prog} --help)")


def summary(p, top: int = 10) -> str:
    """A plain-text summary: format, threads, samples, duration, top functions by self and total.
    What comes from the file (names, files, labels) is escaped for the terminal."""
    backend = p.meta.get("backend")
    out = [f"format:   {escape(p.meta.get('format', '?'))}"
           + (f" (backend {escape(backend)})" if backend not in (None, p.meta.get("format")) else ""),
           f"metric:   {escape(p.describe())}",
           f"threads:  {len(p.threads)}",
           f"samples:  {p.sample_count:,}",
           f"total:    {p.total() if p.sample_count else 0:,.6g} ({p.metric})"]
    d = p.duration
    out.append(f"duration: {d:.6g} s" if d is not None else "duration: unknown (no time order in this source)")
    if p.meta.get("approximate"):
        out.append(f"note:     approximate: {escape(p.meta['approximate'])}")
    for w in p.meta.warnings if not p.sample_count else ():   # why a profile is empty
        out.append(f"warning:  {escape(' '.join(str(w).split()))}")
    fn = p.functions()
    total = p.total() or 1
    for key in ("self", "total"):
        out.append(f"\ntop {top} functions by {key} ({p.metric}):")
        for _, r in fn.sort_values(key, ascending=False, kind="stable").head(top).iterrows():
            share = 100.0 * r[key] / total
            out.append(f"  {share:6.2f}%  {r[key]:>12,.6g}  {escape(r['name'])}"
                       + (f"  [{escape(r['file'])}]" if r["file"] else ""))
    return "\n".join(out)


def parser() -> argparse.ArgumentParser:
    from . import backends
    ap = _Parser(prog="profmagic", description="Record, view and convert profiles (profmagic).")
    sub = ap.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    r = sub.add_parser("record", help="record a command (after --) or a running process (--pid)",
                       description="Run a command under a profiler and write its profile: "
                                   "profmagic record [-b BACKEND] [--mode M] [-o FILE] -- python script.py args",
                       epilog="Exit status: the command's own once it has run (128+N when signal N ended it), "
                              "with a profile written even when it holds nothing (its warnings say why); 2 when "
                              "the command could not be started or recorded at all; 128+N when signal N stopped "
                              "record before the command ran or after it ended. SIGINT, SIGTERM and SIGHUP while "
                              "the command runs go to the command. See docs/errors.md.")
    r.add_argument("-b", "--backend", default="auto",
                   help="auto (py-spy for a Python command when it can attach, else the built-in sampler; "
                        "perf or eu-stack for any other command), " + ", ".join(backends.names()))
    r.add_argument("--mode", default=None, help="wall, cpu or both (default: both where one run gives both; "
                                                "perf: cpu, or both when auto chose it and tracepoints are allowed)")
    r.add_argument("--rate", default=100.0, metavar="HZ", help="samples per second (default 100)")
    r.add_argument("--timing", default=None, metavar="HOW",
                   help="py-spy: timed (default: each sample weighs the time to its thread's next sample) or "
                        "calibrated (1/rate per sample: no cell to calibrate to here)")
    r.add_argument("--native", action="store_true", help="py-spy: C/C++ frames too")
    r.add_argument("--system", action="store_true",
                   help="perf --mode both: record every CPU's wakeups, to name another process that woke a "
                        "thread (root or perf_event_paranoid <= 0)")
    r.add_argument("--lean-switches", action="store_true",
                   help="perf --mode both: cheaper on code that switches threads often (no kernel frames, no wakers)")
    r.add_argument("-o", "--output", default=None, metavar="FILE",
                   help=f"where to write the profile, by extension ({_suffix_help()}); "
                        "default profile-<command>-<pid>.speedscope.json")
    r.add_argument("--pid", default=None, metavar="PIDS", help="attach to running processes instead: 1234,5678")
    r.add_argument("--duration", default=None, metavar="S", help="with --pid: seconds (default: until Ctrl-C)")
    r.add_argument("command", nargs=argparse.REMAINDER, help="-- the command and its arguments")
    v = sub.add_parser("view", help="write the self-contained HTML report of a profile file")
    v.add_argument("file")
    v.add_argument("-o", "--output", default=None, metavar="HTML", help="default: FILE with .html")
    v.add_argument("--format", default=None, help="input format; sniffed when omitted")
    c = sub.add_parser("convert", help="convert between formats, chosen by OUT's extension or --to")
    c.add_argument("input")
    c.add_argument("output", help=_suffix_help())
    c.add_argument("--to", default=None, choices=list(targets()), help="the output format, whatever OUT's extension")
    c.add_argument("--format", default=None, help="input format; sniffed when omitted")
    i = sub.add_parser("info", help="summarise a profile file")
    i.add_argument("file")
    i.add_argument("--format", default=None, help="skip sniffing")
    i.add_argument("--top", type=int, default=10)
    return ap


def main(argv=None) -> int:
    try:
        args = parser().parse_args(argv)
        return {"record": cmd_record, "view": cmd_view, "convert": cmd_convert, "info": cmd_info}[args.cmd](args)
    except (CliError, ProfilerError, ProfileFormatError) as e:
        return fail(str(e))
    except BrokenPipeError:   # the reader of our output left (| head): say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def fail(message: str) -> int:
    print("profmagic: " + escape(" ".join(message.split())), file=sys.stderr)
    return 2


def _load(path: str, fmt: str | None):
    try:
        return load(path, fmt)
    except OSError as e:
        raise CliError(f"cannot read {escape(path)}: {e.strerror or e}") from None
    except ValueError as e:
        raise CliError(str(e)) from None


def _write(path: str, data: bytes) -> None:
    try:
        with open(path, "wb") as f:
            f.write(data)
    except OSError as e:
        raise CliError(f"could not write {escape(path)}: {e.strerror or e}") from None


# -- info, convert, view ---------------------------------------------------------------------------
def _made(what: str, make):
    """``make()``, or one line saying why it could not be made: never a traceback (a profile that was
    read can still ask for more than this machine has, e.g. a writer's memory)."""
    try:
        return make()
    except MemoryError:
        raise CliError(f"not enough memory to make {what} (MemoryError)") from None
    except RecursionError:
        raise CliError(f"{what} nests deeper than Python can make (RecursionError)") from None
    except (CliError, ProfileFormatError):
        raise
    except Exception as e:  # noqa: BLE001 - one line, with the type, instead of a traceback
        raise CliError(f"could not make {what} ({type(e).__name__}: {e})") from None


def cmd_info(args) -> int:
    p = _load(args.file, args.format)
    print(_made("the summary", lambda: summary(p, args.top)))
    return 0


def cmd_convert(args) -> int:
    from . import formats
    p = _load(args.input, args.format)
    to = targets()
    try:
        writer = formats.get(to[args.to]) if args.to else formats.writer_for(args.output)
    except ValueError as e:
        raise CliError(f"{e}; or give --to {'|'.join(to)}") from None
    _write(args.output, _made(f"the {writer.NAME} output", lambda: writer.write(p)))
    print(f"wrote {escape(args.output)} ({writer.NAME}; {p.sample_count:,} samples, {len(p.threads)} thread(s))")
    return 0


def cmd_view(args) -> int:
    from . import page, validate
    p = _load(args.file, args.format)
    out = validate.output(args.output or html_name(args.file))
    _write(out, _made("the page", lambda: page.standalone(p).encode("utf-8")))
    print(escape(out))
    return 0


def html_name(path: str) -> str:
    """``run.speedscope.json`` -> ``run.html`` (a writer's suffix, by the descriptors)."""
    from . import formats
    low = path.lower()
    for suffix, _ in formats.suffixes():
        if low.endswith(suffix):
            return path[:-len(suffix)] + ".html"
    return path + ".html"


# -- record --------------------------------------------------------------------------------------------
class Progress:
    """One line on a terminal (stderr only), rewritten once a second: backend, elapsed, samples; or a
    note (the command is stopped). Without a terminal a note is printed once, on a line of its own."""

    def __init__(self, what: str, count=None, stream=None):
        self.stream = stream or sys.stderr
        self.what, self.count = what, count
        self.enabled = self.stream.isatty()
        self.t0 = time.monotonic()
        self.width = 0
        self.note: str | None = None
        self._done = False
        self._stop = threading.Event()
        self._thread = None

    def line(self) -> str:
        if self.note:
            return f"profmagic: {self.note}"
        text = f"profmagic: recording with {self.what} · {time.monotonic() - self.t0:.0f} s"
        try:
            n = self.count() if self.count is not None else None
        except Exception:  # noqa: BLE001 - a count that fails is not shown; the recording goes on
            n = None
        return text + (f" · {n:,} samples" if n is not None else "")

    def set_note(self, note: str | None) -> None:
        if note == self.note:
            return
        self.note = note
        if self.enabled:
            self._stop.set()   # rewrite the line now
        elif note:
            print(f"profmagic: {note}", file=self.stream, flush=True)

    def start(self) -> "Progress":
        if self.enabled:
            interrupts.start_thread(threading.Thread(target=self._run, name="profmagic-progress", daemon=True),
                                    self, "_thread")
        return self

    def _run(self) -> None:
        while True:
            text = self.line()
            self.stream.write("\r" + text.ljust(self.width))
            self.stream.flush()
            self.width = len(text)
            if self._stop.wait(1.0):
                self._stop.clear()
                if self._done:
                    return

    def stop(self) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            self._done = True
            self._stop.set()
            thread.join()
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()


def _terminal_delivers_sigint() -> bool:
    """Is this process group in the foreground of its terminal: then Ctrl-C reached the command too."""
    for fd in (0, 1, 2):
        try:
            if os.isatty(fd):
                return os.tcgetpgrp(fd) == os.getpgrp()
        except OSError:
            continue
    return False


class _Interrupted(BaseException):
    """SIGINT, SIGTERM or SIGHUP while record was not waiting for a running command (a BaseException,
    as KeyboardInterrupt: no ``except Exception`` on the way swallows it)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


class _Guard:
    """SIGINT, SIGTERM and SIGHUP for the whole of ``record``.

    While the command runs they go to it: to its process group when it has its own (no terminal in
    the foreground), else to it alone, and SIGINT only when the terminal did not already send it to
    the group they share; then SIGCONT (a stopped command acts on them only once it runs). A second
    one sends SIGTERM, a third SIGKILL. The command decides when it ends; then what
    was recorded is written. Before the command runs (held for the recorder) or once it has ended
    (the profile is being read), the first one raises ``_Interrupted``: the ``finally`` blocks kill
    the held command, stop the recorder and remove its folders, and ``record_command`` sweeps up
    whatever an interrupted start left (a child not yet known, a folder just made)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self):
        self.launch = None
        self.running = False
        self.forwarded = 0
        self.raised = False
        self.old = {}
        self.children = set()

    def __enter__(self):
        from .launch import children_of
        self.children = children_of(os.getpid())   # these were not started by this recording
        _subreaper(True)   # a recorder's child orphaned by an interruption comes back here to be reaped
        for sig in self.SIGNALS:
            self.old[sig] = signal.signal(sig, self.handle)
        return self

    def handle(self, signum, frame):
        if self.running and self.launch is not None:
            self.forwarded += 1
            if self.forwarded >= 3:
                self.launch.send(signal.SIGKILL)
            elif self.forwarded == 2:
                self.launch.send(signal.SIGTERM)
            elif self.launch.own_group or signum != signal.SIGINT or not _terminal_delivers_sigint():
                self.launch.send(signum)
            self.launch.send(signal.SIGCONT)
            return
        if not self.raised:   # once: the cleanup that follows is not interrupted again
            self.raised = True
            raise _Interrupted(signum)

    def sweep(self) -> None:
        """After an interruption: kill and reap the children this recording started that are still
        there (SIGKILL ends a stopped one too), and remove this process's temp folders."""
        from .launch import children_of
        from .tempdirs import remove_own
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:   # a child reaped here may hand its own children over
            left = children_of(os.getpid()) - self.children
            if not left:
                break
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                except (OSError, ChildProcessError):
                    pass
        remove_own()

    def __exit__(self, *exc):
        for sig, old in self.old.items():
            signal.signal(sig, old)
        _subreaper(False)
        return False


def _subreaper(on: bool) -> None:
    """Linux: orphaned descendants of this process are re-parented to it (PR_SET_CHILD_SUBREAPER), not
    to init, which here may reap them late: an interrupted recording reaps every one itself."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(36, int(on), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def cmd_record(args) -> int:
    from . import validate
    args.rate = validate.rate(args.rate)
    args.mode = validate.mode(args.mode)
    args.timing = validate.timing(args.timing)
    command = list(args.command or [])
    if command[:1] == ["--"]:
        command = command[1:]
    if args.pid is not None:
        if command:
            raise CliError("give either --pid or a command after --, not both")
        return record_pids(args)
    if args.duration is not None:
        raise CliError("--duration goes with --pid; a command is recorded until it ends")
    if not command:
        raise CliError("nothing to record: give a command after -- (profmagic record -- python script.py) "
                       "or --pid N")
    guard = _Guard()
    with guard:
        try:
            return record_command(args, command, guard)
        except _Interrupted as e:
            guard.sweep()
            name = signal.Signals(e.signum).name
            fail(f"interrupted by {name} while the profile was being read: nothing written"
                 if guard.running is None else f"interrupted by {name} before the command ran: nothing recorded")
            return 128 + e.signum


def record_pids(args) -> int:
    from . import validate
    from .attaching import attach
    pids = validate.pids(args.pid)
    duration = validate.duration(args.duration)
    out = _output(args.output or f"profile-pid-{pids[0]}.speedscope.json")
    backend = "py-spy" if args.backend == "auto" else args.backend
    progress = Progress(f"{backend} (pid {', '.join(map(str, pids))})").start()
    old = signal.signal(signal.SIGTERM, signal.default_int_handler)   # ends like Ctrl-C: recorders reaped
    try:
        p = attach(pids, duration, backend=backend, rate=args.rate, mode=args.mode, native=args.native,
                   timing=args.timing, system=args.system)
    finally:
        signal.signal(signal.SIGTERM, old)
        progress.stop()
    _save(p, out)
    return 0


def record_command(args, command: list[str], guard: _Guard) -> int:
    """Record ``command`` (a ``session.Session`` with a ``CommandTarget``); its exit status. Errors
    before it runs (its options, a backend that cannot record here, a recorder that cannot attach:
    the command is killed before its first line) are CliError/ProfilerError, status 2. Once it has
    run, a recording that failed or holds nothing is an empty profile that says why, and the status
    is the command's."""
    from .session import CommandTarget, Session, make_options
    target = CommandTarget(command, own_group=not _terminal_delivers_sigint())
    s = Session(args.backend, make_options(rate=args.rate, mode=args.mode, native=args.native, timing=args.timing,
                                                   system=args.system,
                                                   **({"lean_switches": True} if args.lean_switches else {})),
                target=target)
    s.prepare()
    python = target.python
    stem = os.path.basename(command[1] if python and len(command) > 1 and not command[1].startswith("-")
                            else command[0])
    output = _output(args.output or f"profile-{_safe(stem)}-{os.getpid()}.speedscope.json")
    progress = None
    try:
        s.start()
        what = "the built-in sampler" if target.children is not None else s.name
        progress = Progress(f"{what} ({escape(' '.join(command))[:60]})", target.counter()).start()
        end, cpu = _wait(target.launch, progress, guard)
        target.waited(end, cpu, guard.forwarded)
        p = s.finish()
    finally:
        if progress is not None:
            progress.stop()
        s.close()
    status = target.status   # _wait set guard.running = None: from here a signal stops record
    for w in (p.meta.warnings if not p.sample_count else ()):   # why the profile is empty
        print(f"profmagic: {escape(' '.join(str(w).split()))}", file=sys.stderr)
    try:
        _save(p, output)
    except _Interrupted:
        try:
            os.unlink(output)   # not half a profile
        except OSError:
            pass
        raise
    except CliError as e:   # the command ran: its status stands, the error is said
        fail(str(e))
    return status


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)[:40] or "command"


STOPPED_NOTE = "the command is stopped ({sig}); record waits — send SIGCONT or Ctrl-C"


def _wait(launch, progress, guard: _Guard) -> tuple[float, float | None]:
    """Wait for the command to end, forwarding signals meanwhile, and saying on the progress line
    when it is stopped. When it ended (time.monotonic()), and the CPU seconds it used since its go."""
    guard.launch, guard.running = launch, True
    delay, last, look = 0.001, None, time.monotonic() + 0.25
    try:
        while not launch.ended():
            time.sleep(delay)
            delay = min(0.05, delay * 2)   # a command that ends at once is seen to end at once
            if time.monotonic() >= look:   # a stop seen twice 0.25 s apart (not a snapshot's brief one)
                look += 0.25
                sig = launch.stopped()
                if sig is None:
                    progress.set_note(None)
                elif sig == last:
                    progress.set_note(STOPPED_NOTE.format(sig=sig))
                last = sig
        end = time.monotonic()
        cpu = launch.cpu_seconds()
        launch.proc.wait()
    finally:
        guard.running = None
        progress.stop()
    used = None if cpu is None or launch.cpu_at_go is None else max(0.0, cpu - launch.cpu_at_go)
    return end, used


def _output(path: str) -> str:
    """The output path, checked before anything is recorded: its folder, and a format for its extension."""
    from . import formats, validate
    path = validate.output(path)
    try:
        formats.writer_for(path)
    except ValueError as e:
        raise CliError(str(e)) from None
    return path


def _save(p, path: str) -> None:
    from . import formats
    _write(path, formats.writer_for(path).write(p))
    timing = f"; {p.meta['timing']}" if p.meta.get("timing") else ""
    print(f"profmagic: wrote {escape(path)} ({p.describe()}{timing}); view it: profmagic view {escape(path)}",
          file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())

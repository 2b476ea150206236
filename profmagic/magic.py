"""``%%profile`` / ``%profile``: argument parsing and orchestration only (no parsing of files, no plots)."""
from __future__ import annotations

import ast
import asyncio
import contextvars
import inspect
import os
import sys
import threading

from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from . import recording, transforms
from .errors import ProfileFormatError, ProfilerError
from .profile import Profile

MODES = ("wall", "cpu", "both")
# Options that take a value: the line magic's statement starts after the last option.
_VALUED = {"-b", "--backend", "--backends", "--rate", "--mode", "-o", "--output", "--pid", "--duration"}


def split_line(line: str) -> tuple[str, str]:
    """``"-b sampler --idle f(x, 'a b')"`` -> (``"-b sampler --idle"``, ``"f(x, 'a b')"``)."""
    rest = line.lstrip()
    opts = []
    while rest.startswith("-"):
        tok, _, after = rest.partition(" ")
        opts.append(tok)
        rest = after.lstrip()
        if tok in _VALUED and rest:
            val, _, after = rest.partition(" ")
            opts.append(val)
            rest = after.lstrip()
    return " ".join(opts), rest


class QuietProfile(Profile):
    """A Profile returned under ``-q``: shown as its one-line repr instead of the report."""

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/plain": repr(self)}


@magics_class
class ProfileMagics(Magics):

    @magic_arguments()
    @argument("-b", "--backend", default="auto",
              help="auto, " + ", ".join(recording.BACKENDS[1:]) + " (default auto: py-spy when it can attach, "
                   "else the built-in sampler)")
    @argument("--idle", action="store_true", help="include waiting (off-CPU) samples: wall time")
    @argument("--native", action="store_true", help="C/C++ frames too (py-spy: blocking mode)")
    @argument("--gil", action="store_true", help="only samples holding the GIL (overrides --idle)")
    @argument("--rate", type=float, default=100.0, metavar="HZ", help="samples per second (default 100)")
    @argument("--all-threads", action="store_true", help="keep the kernel's own threads too")
    @argument("--subprocesses", action="store_true", help="profile child processes too")
    @argument("--pid", default=None, metavar="PIDS",
              help="attach to running processes instead of running code: 1234,5678 (line magic)")
    @argument("--duration", type=float, default=None, metavar="S",
              help="with --pid: seconds to record (default: until interrupted)")
    @argument("--mode", default=None, help="wall, cpu or both (py-spy: wall means --idle)")
    @argument("--rerun", action="store_true",
              help="with --mode both on pyinstrument/cProfile (one clock per run): allow running the cell "
                   "twice, once per clock")
    @argument("--compare", action="store_true",
              help="--mode both, shown as CPU and wall icicles side by side with an off-CPU table")
    @argument("--backends", default=None, metavar="A,B,...",
              help="run the cell once per backend (it runs N times) and show them side by side; "
                   "returns a dict backend -> Profile")
    @argument("-o", "--output", default=None, metavar="FILE", help="write the speedscope JSON here")
    @argument("-q", "--quiet", action="store_true", help="no display; the Profile is still returned")
    @line_cell_magic
    def profile(self, line: str = "", cell: str | None = None):
        """Profile a cell (``%%profile``) or a statement (``%profile f()``); returns the Profile."""
        if cell is None:
            opts, code = split_line(line)
        else:
            opts, code = line, cell
        try:
            args = parse_argstring(self.profile, opts)
        except Exception as e:  # UsageError: show it as the user's mistake
            print(f"profmagic: {e}", file=sys.stderr)
            return None
        if args.backend not in recording.BACKENDS:
            print(f"profmagic: unknown backend {args.backend!r}; choose one of: "
                  + ", ".join(recording.BACKENDS), file=sys.stderr)
            return None
        if args.mode is not None and args.mode not in MODES:
            print(f"profmagic: unknown --mode {args.mode!r}; choose one of: {', '.join(MODES)}", file=sys.stderr)
            return None
        if args.compare:
            if args.mode not in (None, "both"):
                print(f"profmagic: --compare shows CPU beside wall time: it needs --mode both, not "
                      f"--mode {args.mode}", file=sys.stderr)
                return None
            args.mode = "both"
        if args.backends is not None:
            names = [b.strip() for b in args.backends.split(",") if b.strip()]
            bad = [b for b in names if b not in recording.BACKENDS or b == "auto"]
            if not names or bad:
                print("profmagic: --backends takes a comma-separated list of: "
                      + ", ".join(recording.BACKENDS[1:]) + (f" (unknown: {', '.join(bad)})" if bad else ""),
                      file=sys.stderr)
                return None
            args.backends = list(dict.fromkeys(names))
        if args.pid is not None:
            return self.attach(code, args)
        if not code.strip():
            print("profmagic: nothing to profile: give a statement (%profile f()) or a cell (%%profile)",
                  file=sys.stderr)
            return None
        if args.backends is not None:
            return self.run_backends(code, args)
        return self.run(code, args)  # recording.Session warns when --gil overrides --idle

    def run_backends(self, code: str, args):
        """``--backends a,b,c``: the cell once per backend, shown side by side; a dict is returned."""
        n = len(args.backends)
        print(f"profmagic: WARNING: --backends runs the cell {n} times, once per backend "
              f"({', '.join(args.backends)}); its side effects happen {n} times.", file=sys.stderr)
        out = {}
        quiet, output = args.quiet, args.output
        for name in args.backends:
            args.backend, args.quiet, args.output = name, True, None
            try:
                p = self.run(code, args)
            finally:
                args.quiet, args.output = quiet, output
            if p is not None:
                out[name] = Profile(p.frames, p.stacks, p.samples, p.meta, p.raw, p.metric)
        if out and not args.quiet:
            from IPython.display import display
            from .views import compare
            display(compare.side_by_side(out))
        self.shell.user_ns["_profiles"] = out
        return out

    def attach(self, code: str, args):
        """``%profile --pid 1234,5678 --duration 10``: record running processes, not code."""
        from .attach import attach as attach_pids   # profmagic.attach may be the function, not the module
        if code.strip():
            print("profmagic: --pid attaches to running processes; give no code with it", file=sys.stderr)
            return None
        handle = None
        if not args.quiet:
            from IPython.display import display
            handle = display({"text/plain": "attaching…"}, raw=True, display_id=True)
        try:
            profile = attach_pids(args.pid, args.duration, backend=args.backend, rate=args.rate,
                                    idle=not args.gil and (args.idle or args.mode in (None, "wall", "both")),
                                    native=args.native, mode=args.mode,
                                    announce=(lambda t: handle.update({"text/plain": t}, raw=True)) if handle else None)
        except ProfilerError as e:
            print(f"profmagic: {e}", file=sys.stderr)
            return None
        finally:
            if handle is not None:
                handle.update({"text/plain": ""}, raw=True)
        self.shell.user_ns["_profile"] = profile
        if args.output:
            try:
                profile.save(args.output)
            except (OSError, ValueError) as e:
                print(_save_failed(args.output, e), file=sys.stderr)
        if args.quiet:
            return QuietProfile(profile.frames, profile.stacks, profile.samples, profile.meta,
                                profile.raw, profile.metric)
        return profile

    def run(self, code: str, args):
        ip = self.shell
        number = max(1, ip.execution_count - 1)  # IPython counts the running cell before it runs
        transformed = ip.transform_cell(code)
        filename = ip.compile.cache(transformed, number, raw_code=code)
        flags = ip.compile.flags | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        try:
            compiled = compile(transformed, filename, "exec", flags=flags, dont_inherit=True)
        except SyntaxError:
            ip.showsyntaxerror(filename)
            return None
        is_async = bool(compiled.co_flags & inspect.CO_COROUTINE)
        options = recording.make_options(
            rate=args.rate, idle=bool(args.idle or args.mode in ("wall", "both")), native=args.native,
            gil=args.gil, mode=args.mode or recording.default_mode(args.backend), subprocesses=args.subprocesses,
            all_threads=args.all_threads, cell_filename=filename, rerun=args.rerun)
        names = transforms.cell_names(getattr(ip.compile, "_filename_map", {}))
        handle = None

        def announce(text):
            nonlocal handle
            if args.quiet:
                return
            from IPython.display import display
            handle = display({"text/plain": text}, raw=True, display_id=True)

        session_kw = dict(cell=code, file_names=names, announce=None if is_async else announce)
        ns = ip.user_ns
        try:
            if is_async:
                announce(f"recording with {args.backend} (top-level await: the cell runs in its own "
                         "event loop on a helper thread)…")
                profile, error = _run_async(args.backend, options, compiled, ns, session_kw)
            else:
                profile, error = recording.run(args.backend, options, lambda: exec(compiled, ns), **session_kw)
        except (ProfilerError, ProfileFormatError) as e:  # a reader error here: the profiler's own file is bad
            if handle is not None:
                handle.update({"text/plain": ""}, raw=True)
            print(f"profmagic: {e}", file=sys.stderr)
            return None
        if handle is not None:
            handle.update({"text/plain": ""}, raw=True)
        if profile is not None and args.output:
            try:
                profile.save(args.output)
            except (OSError, ValueError) as e:
                print(_save_failed(args.output, e), file=sys.stderr)
        if profile is not None:
            ns["_profile"] = profile  # the latest profile, also when the cell raised
        if profile is not None and profile.is_empty:
            print(profile.meta.get("message", "profmagic: no samples"), file=sys.stderr)
            profile = None
        if error is not None:
            if profile is not None and not args.quiet:
                _show(profile, args.compare)
            raise error
        if profile is not None and args.compare and not args.quiet:
            _show(profile, True)
            args.quiet = True  # the comparison is the display; the Profile is still returned
        if profile is not None and args.quiet:
            profile = QuietProfile(profile.frames, profile.stacks, profile.samples, profile.meta,
                                   profile.raw, profile.metric)
        return profile


def _show(profile: Profile, compare_view: bool) -> None:
    """The report, or with --compare the CPU vs wall display (the report when wall is unknown)."""
    from IPython.display import display
    if compare_view:
        from .views import compare
        try:
            display(compare.cpu_wall(profile))
            return
        except ValueError as e:   # e.g. perf: CPU time only
            print(f"profmagic: --compare: {e}; showing the report instead", file=sys.stderr)
    display(profile)


def _save_failed(path: str, e: Exception) -> str:
    folder = os.path.dirname(os.path.abspath(path))
    cause = f"the folder {folder} does not exist" if not os.path.isdir(folder) else str(e)
    return (f"profmagic: could not write {path}: {cause}. Fix: create the folder or choose another --output; "
            "the profile is still in _profile (_profile.save(path))")


def _run_async(backend, options, compiled, ns, session_kw):
    """Top-level await: the kernel's own loop is running in this thread, so the cell gets a fresh
    event loop on a helper thread; that thread is the cell's thread in the profile."""
    out: dict = {}
    box: dict = {}

    async def main():
        box["task"] = asyncio.current_task()
        box["loop"] = asyncio.get_running_loop()
        await eval(compiled, ns)

    def work():
        try:
            out["result"] = recording.run(backend, options, lambda: asyncio.run(main()), **session_kw)
        except BaseException as e:  # recorder errors: handed to the kernel thread
            out["error"] = e

    ctx = contextvars.copy_context()
    t = threading.Thread(target=ctx.run, args=(work,), name="profmagic-await")
    t.start()
    interrupted = None
    while t.is_alive():
        try:
            t.join(0.05)
        except KeyboardInterrupt as e:
            interrupted = e
            if "loop" in box:
                box["loop"].call_soon_threadsafe(box["task"].cancel)
    if "error" in out:
        raise out["error"]
    profile, error = out["result"]
    if interrupted is not None:
        error = interrupted
    return profile, error


def load_ipython_extension(ipython) -> None:
    ipython.register_magics(ProfileMagics)


def unload_ipython_extension(ipython) -> None:
    mm = ipython.magics_manager
    for kind in ("line", "cell"):
        if mm.magics[kind].get("profile", None) is not None:
            mm.magics[kind].pop("profile", None)

"""``%%profile`` / ``%profile``: argument parsing and orchestration only (no parsing of files, no plots)."""
from __future__ import annotations

import asyncio
import contextvars
import sys
import threading

from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from . import interrupts

# Most of %load_ext's second (pandas, numpy, plotly). Ctrl-C waits for the imports to end: numpy
# interrupted half-way cannot be imported again in this process ("numpy._core.multiarray failed to
# import"); then it is one line, not the imports' traceback.
try:
    with interrupts.deferred():
        from . import awaits, cellrun, live, session, transforms, validate
        from .errors import ProfileFormatError, ProfilerError
        from .model import MEMORY_METRICS, Profile
except KeyboardInterrupt as e:
    raise interrupts.stopped_loading(e) from None
# Options that take a value: the line magic's statement starts after the last option.
_VALUED = {"-b", "--backend", "--backends", "--rate", "--mode", "-o", "--output", "--pid", "--duration", "--timing",
           "--cluster"}


def split_line(line: str) -> tuple[str, str]:
    """``"-b sampler --idle f(x, 'a b')"`` -> (``"-b sampler --idle"``, ``"f(x, 'a b')"``)."""
    rest = line.lstrip()
    opts = []
    while rest.startswith("-"):
        tok, rest = _word(rest)
        opts.append(tok)
        if tok in _VALUED and rest:
            val, rest = _word(rest)
            opts.append(val)
    return " ".join(opts), rest


def _word(text: str) -> tuple[str, str]:
    """The first word of ``text`` (a quoted one whole, quotes kept) and the rest, stripped."""
    if text[:1] in "'\"":
        end = text.find(text[0], 1)
        if end > 0:
            return text[:end + 1], text[end + 1:].lstrip()
    word, _, after = text.partition(" ")
    return word, after.lstrip()


class QuietProfile(Profile):
    """A Profile returned under ``-q``: shown as its one-line repr instead of the report."""

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/plain": repr(self)}


def quiet(p: Profile) -> QuietProfile:
    return QuietProfile(p.frames, p.stacks, p.samples, p.meta, p.raw, p.metric, threads=p.thread_table)


def _say(e: Exception) -> None:
    """A ProfilerError as one line on stderr, with one ``profmagic:`` prefix."""
    text = str(e)
    print(text if text.startswith("profmagic:") else f"profmagic: {text}", file=sys.stderr)


def mode_of(args) -> str | None:
    """The one clock option: ``--mode``; ``--idle`` is py-spy's spelling of ``--mode wall``; None
    lets the backend choose (both clocks where one run gives them)."""
    if args.mode is not None:
        return args.mode
    return "wall" if args.idle else None


@magics_class
class ProfileMagics(Magics):

    @magic_arguments()
    @argument("-b", "--backend", default="auto",
              help="auto, " + ", ".join(session.BACKENDS[1:]) + " (default auto: py-spy when it can attach, "
                   "else the built-in sampler)")
    @argument("--idle", action="store_true", help="include waiting (off-CPU) samples: wall time")
    @argument("--native", action="store_true", help="C/C++ frames too (py-spy: blocking mode)")
    @argument("--gil", action="store_true", help="only samples holding the GIL (overrides --idle)")
    @argument("--rate", default=100.0, metavar="HZ", help="samples per second (default 100)")
    @argument("--all-threads", action="store_true", help="keep the kernel's own threads too")
    @argument("--system", action="store_true",
              help="perf --mode both: record every CPU's wakeups, to name another process that woke a thread "
                   "(root or perf_event_paranoid <= 0)")
    @argument("--lean-switches", action="store_true",
              help="perf --mode both: cheaper on code that switches threads often (no kernel frames, no wakers)")
    @argument("--subprocesses", action="store_true", help="profile child processes too")
    @argument("--memory", action="store_true",
              help="record memory beside the time backend, in the same run (wall, CPU and peak bytes per "
                   "function side by side): allocations sampled, about one per 32 KiB, bytes estimated with a 95 percent "
                   "interval (1.1-1.3x the cell's time); memray with --memory-exact, --allocated, --leaks, --native")
    @argument("--leaks", action="store_true",
              help="memray (--backend memray or --memory): bytes still alive when the cell ends, instead of at "
                   "the high-water mark")
    @argument("--memory-exact", action="store_true",
              help="memray: trace every Python object for exact bytes per function (9-19x the cell's time on "
                   "allocation-heavy code, against about 2x by default, where small objects are counted by "
                   "pymalloc's blocks and arenas)")
    @argument("--allocated", action="store_true",
              help="memray: record every allocation, for the bytes allocated and the allocation count (slower "
                   "to read back; by default memray aggregates while recording)")
    @argument("--pid", default=None, metavar="PIDS",
              help="attach to running processes instead of running code: 1234,5678 (line magic)")
    @argument("--duration", default=None, metavar="S",
              help="with --pid: seconds to record (default: until interrupted)")
    @argument("--mode", default=None, help="wall, cpu or both (py-spy: wall means --idle)")
    @argument("--timing", default=None, metavar="HOW",
              help="py-spy's seconds: calibrated (samples scaled so the cell's thread sums to its measured "
                   "time; the default up to 100 Hz, where the two were within sampling noise of each other) "
                   "or timed (py-spy's timestamps, nothing scaled, every thread keeps its own seconds; the "
                   "default above 100 Hz, where calibrating put other threads' seconds off by up to 5.5%%, and "
                   "with --pid). Figures: bench/RESULTS.md")
    @argument("--rerun", action="store_true",
              help="with --mode both on pyinstrument/cProfile (one clock per run): allow running the cell "
                   "twice, once per clock")
    @argument("--compare", action="store_true",
              help="--mode both, shown as CPU and wall icicles side by side with an off-CPU table")
    @argument("--backends", default=None, metavar="A,B,...",
              help="run the cell once per backend (it runs N times) and show them side by side; "
                   "returns a dict backend -> Profile")
    @argument("--history", action="store_true",
              help="list the profiled cells' last runs (%%profile --history); each report also says how its "
                   "cell changed since its last run (profmagic.history)")
    @argument("-o", "--output", default=None, metavar="FILE", help="write the speedscope JSON here")
    @argument("-q", "--quiet", action="store_true", help="no display; the Profile is still returned")
    @argument("--no-live", action="store_true", help="no live view while the cell runs (a status line only)")
    @argument("--cluster", default=None, metavar="ENGINE",
              help="dask (the current distributed.Client), dask:NAME (the Client in variable NAME) or ray: "
                   "every worker is recorded too, one rank each beside the kernel")
    @line_cell_magic
    def profile(self, line: str = "", cell: str | None = None):
        """Profile a cell (``%%profile``) or a statement (``%profile f()``); returns the Profile."""
        try:
            with interrupts.redelivered():
                return self._profile(line, cell)
        except KeyboardInterrupt as e:   # at any step: one line naming it (none for the cell's own), then raised
            text = interrupts.message(interrupts.note(e, "preparing the cell", interrupts.NOTHING))
            if text:
                print(text, file=sys.stderr)
            raise interrupts.one_line(e) from None

    def _profile(self, line: str, cell: str | None):
        if cell is None:
            opts, code = split_line(line)
        else:
            opts, code = line, cell
        try:
            args = parse_argstring(self.profile, opts)
        except Exception as e:  # UsageError: show it as the user's mistake
            print(f"profmagic: {e}", file=sys.stderr)
            return None
        if args.backend not in session.BACKENDS:
            print(f"profmagic: unknown backend {args.backend!r}; choose one of: "
                  + ", ".join(session.BACKENDS), file=sys.stderr)
            return None
        try:   # every option checked before anything runs
            args.mode = validate.mode(args.mode)
            args.rate = validate.rate(args.rate)
            args.timing = validate.timing(args.timing)
            args.duration = validate.duration(args.duration)
            args.output = validate.output(args.output)
            validate.memory(args.backend, args.memory, args.leaks, args.allocated, args.mode, args.pid,
                            args.backends, exact=args.memory_exact)
            args.cluster = self.cluster_target(args)
        except ProfilerError as e:
            _say(e)
            return None
        if args.compare:
            if args.mode not in (None, "both"):
                print(f"profmagic: --compare shows CPU beside wall time: it needs --mode both, not "
                      f"--mode {args.mode}", file=sys.stderr)
                return None
            args.mode = "both"
        if args.backends is not None:
            names = [b.strip() for b in args.backends.split(",") if b.strip()]
            bad = [b for b in names if b not in session.BACKENDS or b == "auto"]
            if not names or bad:
                print("profmagic: --backends takes a comma-separated list of: "
                      + ", ".join(session.BACKENDS[1:]) + (f" (unknown: {', '.join(bad)})" if bad else ""),
                      file=sys.stderr)
                return None
            args.backends = list(dict.fromkeys(names))
        args.line = cell is None
        if args.history:
            from . import history
            return history.listing()
        if args.pid is not None:
            return self.attach(code, args)
        if not code.strip():
            print("profmagic: nothing to profile: give a statement (%profile f()) or a cell (%%profile)",
                  file=sys.stderr)
            return None
        if args.backends is not None:
            return self.run_backends(code, args)
        return self.run(code, args)  # session.Session warns when --gil overrides --idle

    def cluster_target(self, args):
        """--cluster checked: the Client or "ray" (cluster.resolve), None without --cluster."""
        if args.cluster is None:
            return None
        for option, given in (("--pid", args.pid is not None), ("--backends", args.backends is not None),
                              ("--subprocesses", args.subprocesses), ("--rerun", args.rerun)):
            if given:
                raise ProfilerError(session.CLUSTER_ALONE.format(option=option))
        from . import cluster
        return cluster.resolve(args.cluster, self.shell.user_ns)

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
                got = self.record(code, args)
            finally:
                args.quiet, args.output = quiet, output
            if got is not None and got[0] is not None:
                out[name] = got[0]
            if got is not None and got[1] is not None:
                if isinstance(got[1], KeyboardInterrupt):   # the cell's own
                    interrupts.note(got[1], "running the cell", None)
                raise got[1]
        if out and not args.quiet:
            from IPython.display import display
            from .views import sidebyside
            display(sidebyside.side_by_side(out))
        self.shell.user_ns["_profiles"] = out
        return out if args.line else None

    def attach(self, code: str, args):
        """``%profile --pid 1234,5678 --duration 10``: record running processes, not code."""
        from .attaching import attach as attach_pids
        if code.strip():
            print("profmagic: --pid attaches to running processes; give no code with it", file=sys.stderr)
            return None
        out = live.Output(enabled=not args.quiet)
        out.text("attaching…")
        try:
            with interrupts.at("attaching to the processes", interrupts.ATTACH_LOST):
                profile = attach_pids(args.pid, args.duration, backend=args.backend, rate=args.rate,
                                      mode="cpu" if args.gil else ("wall" if args.idle else args.mode),
                                      native=args.native, timing=args.timing, system=args.system,
                                      announce=out.text)
        except ProfilerError as e:
            print(f"profmagic: {e}", file=sys.stderr)
            return None
        finally:
            out.clear()
        self.shell.user_ns["_profile"] = profile
        if args.output:
            try:
                from .formats import write_by_name
                write_by_name(profile, args.output)
            except (OSError, ValueError) as e:
                print(_save_failed(args.output, e), file=sys.stderr)
        if args.quiet:
            return quiet(profile)
        return profile

    def record(self, code: str, args):
        """Run ``code`` under the profiler as IPython runs a cell: (Profile or None, the exception the
        code raised or None, the value of its last expression or cellrun.NOTHING); None when
        nothing ran (a syntax error, a profiler that could not start)."""
        ip = self.shell
        number = max(1, ip.execution_count - 1)  # IPython counts the running cell before it runs
        with interrupts.at("preparing the cell", interrupts.NOTHING):
            with interrupts.deferred():
                _import_backends(args)
            try:
                cell = cellrun.prepare(ip, code, number)
            except SyntaxError:
                ip.showsyntaxerror()
                return None
            options = session.make_options(
                rate=args.rate, native=args.native, gil=args.gil, mode=mode_of(args),
                subprocesses=args.subprocesses, all_threads=args.all_threads, cell_filename=cell.filename,
                system=args.system,
                rerun=args.rerun, timing=args.timing,
                **{k: True for k in ("memory", "leaks", "allocated", "memory_exact", "lean_switches")
                       if getattr(args, k)})
            names = transforms.cell_names(getattr(ip.compile, "_filename_map", {}))
        out = live.Output(enabled=not args.quiet)
        session_kw = dict(cell=code, file_names=names, announce=out.text, cluster=args.cluster)
        if not args.quiet and not args.no_live:
            session_kw["started"] = lambda s: live.Live(s, out).start_and_stop()
        ns = ip.user_ns
        box = {"value": cellrun.NOTHING}
        try:
            if cell.is_async:
                out.text(f"recording with {args.backend} (top-level await: the cell runs in its own "
                         "event loop on a helper thread)…")
                profile, error = _run_async(args.backend, options, cell, ns, session_kw, box)
            else:
                profile, error = session.run(args.backend, options, lambda: box.update(value=cell.run(ns)),
                                             **session_kw)
        except (ProfilerError, ProfileFormatError) as e:  # a reader error here: the profiler's own file is bad
            out.clear()
            _say(e)
            return None
        except KeyboardInterrupt as e:   # before or after the cell: its step is noted (session.run)
            out.clear()
            raise interrupts.note(e, f"recording with {args.backend}", interrupts.LOST)
        if profile is not None:
            ns["_profile"] = profile  # the latest profile, also when the cell raised
            if args.output:
                with interrupts.at(f"writing {args.output}", interrupts.KEPT):
                    try:
                        from .formats import write_by_name
                        write_by_name(profile, args.output)
                    except (OSError, ValueError) as e:
                        print(_save_failed(args.output, e), file=sys.stderr)
            if profile.meta.get("message"):
                print(profile.meta["message"], file=sys.stderr)
            if profile.is_empty and profile.metric not in MEMORY_METRICS:   # no bytes left (--leaks) is a finding
                profile = None
        if profile is None:
            out.clear()
        return profile, error, box["value"], out

    def run(self, code: str, args):
        """The cell magic shows the report, then hands the cell's last value to the display hook (so it
        is shown and lands in ``Out``) and returns None. The line magic returns the Profile. Either way
        ``_profile`` holds it, and code that raises shows its profile, then re-raises."""
        got = self.record(code, args)
        if got is None:
            return None
        profile, error, value, out = got
        shown = profile is not None and not args.quiet
        last = None if profile is None else _remember(code, profile, self.shell, args.line)
        if error is not None or not args.line:
            if shown:
                with interrupts.at("showing the report", interrupts.KEPT):
                    out.replace(_view(profile, args.compare))
                    _show(last)
            if isinstance(error, KeyboardInterrupt):   # the cell's own: the partial report says where it was
                raise interrupts.note(error, "running the cell", None)
            if error is not None:
                raise error
            if value is not cellrun.NOTHING:
                with interrupts.at("showing the cell's value", interrupts.KEPT):
                    self.shell.displayhook(value)
            return None
        if shown and args.compare:
            with interrupts.at("showing the report", interrupts.KEPT):
                out.replace(_view(profile, True))
            return quiet(profile)   # the comparison is the display; the Profile is still returned
        out.clear()
        if shown:
            _show(last)
        return quiet(profile) if profile is not None and args.quiet else profile


def _remember(code: str, profile: Profile, ip, line: bool):
    """This run in the cell's history (history.py): the last-run line to show, or None."""
    from . import history
    return history.after_run(code, profile, max(1, ip.execution_count - 1), line)


def _show(last) -> None:
    if last is not None:
        from IPython.display import display
        display(last)


class _Report:
    """The report of the magic's profile, holding it: ``_profile`` is the only name for it, and the
    next profiled cell rebinds that. The report lets go once it is no longer among the newest
    (report/keep.py)."""

    def __init__(self, profile: Profile):
        self.profile = profile

    def _repr_mimebundle_(self, include=None, exclude=None):
        from . import report
        return report.mimebundle(self.profile, hold=True)


def _view(profile: Profile, compare_view: bool):
    """The report, or with --compare the CPU vs wall display (the report when wall is unknown)."""
    if compare_view:
        from .views import cpuwall
        try:
            return cpuwall.cpu_wall(profile)
        except ValueError as e:   # e.g. perf: CPU time only
            print(f"profmagic: --compare: {e}; showing the report instead", file=sys.stderr)
    return _Report(profile)


def _save_failed(path: str, e: Exception) -> str:
    """--output was checked before the cell ran; writing can still fail (disk full, folder removed)."""
    return f"profmagic: could not write {path}: {e}. The profile is still in _profile (profmagic.save(_profile, path))"


def _run_async(backend, options, cell, ns, session_kw, box):
    """Top-level await: the kernel's own loop is running in this thread, so the cell gets a fresh
    event loop on a helper thread; that thread is the cell's thread in the profile. A tracker notes
    where the cell's coroutines wait (awaits.py), so their waiting time is attributed to them."""
    out: dict = {}
    tracker = awaits.Tracker()

    async def main():
        box["task"] = asyncio.current_task()
        box["loop"] = asyncio.get_running_loop()
        if box.get("interrupted"):   # Ctrl-C came while the recorder started: the cell does not run
            raise KeyboardInterrupt
        box["value"] = await cell.run_async(ns, tracker)

    def work():
        try:
            with tracker:
                out["result"] = session.run(backend, options, lambda: asyncio.run(main()), tracker=tracker,
                                            **session_kw)
        except BaseException as e:  # recorder errors: handed to the kernel thread
            out["error"] = e

    ctx = contextvars.copy_context()
    t = threading.Thread(target=ctx.run, args=(work,), name="profmagic-await")
    interrupted = None
    try:
        with interrupts.deferred():   # whole: a Ctrl-C inside start() is the cell's, handled as below
            t.start()
    except KeyboardInterrupt as e:
        if t.ident is None:   # before start(): nothing runs
            raise
        interrupted = e
        box["interrupted"] = True
    while t.is_alive():
        try:
            t.join(0.05)
        except KeyboardInterrupt as e:
            interrupted = e
            box["interrupted"] = True   # set before "loop" is read: main() sees one or the other
            if "loop" in box:
                box["loop"].call_soon_threadsafe(box["task"].cancel)
    if "error" in out:
        raise out["error"]
    profile, error = out["result"]
    if interrupted is not None:
        error = interrupted
    return profile, error


def load_ipython_extension(ipython) -> None:
    try:
        _load(ipython)
    except KeyboardInterrupt as e:
        unload_ipython_extension(ipython)   # IPython does not count it loaded: neither does the shell
        raise interrupts.stopped_loading(e) from None


def _load(ipython) -> None:
    import importlib.util

    from . import kernel
    kernel.remember_threads()
    ipython.register_magics(ProfileMagics)
    from . import history
    if history.note_cell not in ipython.events.callbacks["pre_run_cell"]:
        ipython.events.register("pre_run_cell", history.note_cell)   # the cell id, where the front end gives one
    with interrupts.deferred():   # imports whole, as above
        from .report import warm_up
        warm_up()   # the front end loads its plotly renderer now, not after the first profiled cell
        if importlib.util.find_spec("anywidget") is not None:   # the report's, on compiled psygnal
            import anywidget  # noqa: F401
        if importlib.util.find_spec("ray") is not None:   # found, not imported (Ray takes seconds to import)
            from .cluster import ray as ray_engine
            ray_engine.install()   # a later ray.init() starts its workers with profmagic's hook


def _import_backends(args) -> None:
    """The recording's backend modules and memray (a compiled extension) imported now, whole: under
    ``interrupts.deferred``, a Ctrl-C waits for them (see the imports at the top)."""
    import importlib.util

    from . import backends
    names = args.backends or [args.backend]
    for name in names:
        for n in (backends.AUTO if name == "auto" else (name,)):
            backends.get(n)
    if (args.memory or "memray" in names) and importlib.util.find_spec("memray") is not None:
        import memray  # noqa: F401


def unload_ipython_extension(ipython) -> None:
    from . import history
    if history.note_cell in ipython.events.callbacks["pre_run_cell"]:
        ipython.events.unregister("pre_run_cell", history.note_cell)
    mm = ipython.magics_manager
    for kind in ("line", "cell"):
        if mm.magics[kind].get("profile", None) is not None:
            mm.magics[kind].pop("profile", None)

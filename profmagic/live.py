"""The cell's output while it runs: a status line from the first moment, then, after a second, the
top functions and a small icicle of the samples so far, refreshed in place about once a second;
at the end the report replaces them (one output, updated, never appended).

The samples come from the recorder itself when its backend streams (``CAPS.streams``: the built-in
sampler); otherwise from a companion built-in sampler at ``COMPANION_RATE`` Hz in this process,
which the view names. The updater is a thread: it needs the interpreter lock to build an update,
so while the cell holds the lock in C no update can be sent; the view carries a CSS timer that then
says "waiting for the interpreter" by itself, with nothing to run.

After ``NOW_AFTER`` seconds (a cell that may hang), the view adds what every thread of the cell is
doing now, read by the updater itself whatever the backend: each thread's current Python stack
(``sys._current_frames``; a thread with no Python frames shows its kernel wait channel), and its
reason (reasons.py: ``/proc`` state, wchan and system call, and the leaf Python call). Wakers are
never known live: perf ``--mode both`` gives them in the report; the view says so.
"""
from __future__ import annotations

import contextvars
import html
import os
import sys
import threading
import time
import zlib

from . import interrupts, procfs, reasons
from .backends.base import Options
from .sampling import code_name
from .threads import OWN, mark_own

INTERVAL = 1.0          # seconds between updates
FIRST_VIEW = 1.0        # the top functions and the icicle appear after this many seconds
COMPANION_RATE = 10.0   # Hz of the companion sampler for backends that do not stream
STALE = 3               # seconds without an update before the view says it waits for the interpreter
TOP = 8
NOW_AFTER = 3.0         # seconds: then the view shows what every thread is doing now
NOW_DEPTH = 6           # frames of each thread's current stack shown, leaf first


class Output:
    """One display in the cell's output, shown on first use and updated in place."""

    def __init__(self, enabled: bool = True):
        self.enabled, self.handle = enabled, None

    def show(self, bundle: dict) -> None:
        if not self.enabled:
            return
        from IPython.display import display
        if self.handle is None:
            self.handle = display(bundle, raw=True, display_id=True)
        else:
            self.handle.update(bundle, raw=True)

    def text(self, line: str) -> None:
        self.show({"text/plain": line})

    def replace(self, obj) -> None:
        """Show ``obj`` (the report) in place of what this output showed."""
        if not self.enabled:
            return
        from IPython.display import display
        if self.handle is None:
            display(obj)
        else:
            self.handle.update(obj)

    def clear(self) -> None:
        if self.handle is not None:
            self.handle.update({"text/plain": ""}, raw=True)


class Live:
    """The live view of one Session: ``start()`` once it records, ``stop()`` before it finishes."""

    def __init__(self, session, out: Output, interval: float = INTERVAL):
        self.session, self.out, self.interval = session, out, interval
        self.companion = None
        self.updates = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0
        self._readers: dict[int, reasons.ProcReader] = {}

    @property
    def source(self) -> str:
        return self.session.name if self.companion is None else \
            f"the built-in sampler at {COMPANION_RATE:g} Hz (the report will be {self.session.name}'s)"

    def start(self) -> None:
        rec = self.session.recorder
        # memray alone (no clocks): no companion, whose allocations would be recorded with the code's.
        if not callable(getattr(rec, "live", None)) and self.session.module.CAPS.clocks:
            from .backends import sampler
            self.companion = sampler.Recorder(Options(rate=COMPANION_RATE, mode="both"))
            self.companion.start()
        self._t0 = time.perf_counter()
        ctx = contextvars.copy_context()   # the kernel's parent message: updates go to this cell
        interrupts.start_thread(threading.Thread(target=ctx.run, args=(self._run,), name="profmagic-live", daemon=True),
                                self, "_thread")

    def start_and_stop(self):
        """Start; return ``stop`` (what session.run's ``started`` wants)."""
        try:
            self.start()
        except BaseException:   # e.g. Ctrl-C: no updater thread nor companion sampler left running
            self.stop()
            raise
        return self.stop

    def stop(self) -> None:
        self._stop.set()
        with interrupts.deferred():   # the updater's last update and the companion's reaping finish
            if self._thread is not None:
                self._thread.join()
            comp, self.companion = self.companion, None
            if comp is not None:
                comp.close()
            for r in self._readers.values():
                r.close()
            self._readers.clear()

    def _run(self) -> None:
        mark_own()
        while not self._stop.wait(self.interval):
            try:
                self.out.show(self.bundle())
                self.updates += 1
            except Exception as e:  # noqa: BLE001 - the view must never break the recording
                self.out.text(f"profmagic: live view stopped ({type(e).__name__}: {e}); still recording…")
                return

    def snapshot(self) -> tuple[dict, float] | None:
        """(the cell's samples so far, aggregated: see ``aggregate``, the rate reached) or None."""
        rec = self.companion if self.companion is not None else self.session.recorder
        got = rec.live()
        if got is None:
            return None
        (frames, threads, rows), rate = got
        o = self.session.options
        keep = {i for i, t in enumerate(threads) if t.get("tid") not in OWN and
                (t.get("tid") == o.thread_native_id or t.get("tid") not in self.session.before)}
        return aggregate(frames, rows, keep, o.cell_filename), rate

    def bundle(self) -> dict:
        elapsed = time.perf_counter() - self._t0
        if self.companion is None and not callable(getattr(self.session.recorder, "live", None)):
            return self._memory_bundle(elapsed)
        got = self.snapshot()
        agg, rate = got if got is not None else ({"samples": 0}, 0.0)
        o = self.session.options
        status = (f"● recording · {self.session.name} · mode {o.mode} · pid {o.pid} · {elapsed:.1f} s · "
                  f"{agg['samples']:,} samples · {rate:.0f} Hz reached")
        parts = [f"<div class='profmagic-live'><style>{_CSS}</style><b>{html.escape(status)}</b>"]
        text = [status]
        if self.companion is not None:
            parts.append(f"<br><span style='color:#666'>live view from {html.escape(self.source)}</span>")
        if agg["samples"] and elapsed >= FIRST_VIEW:
            table, rows = _top(agg)
            parts += [table, _icicle(agg)]
            text += rows
        if elapsed >= NOW_AFTER:
            table, rows = _now_html(self.now(), self.wakers())
            parts.append(table)
            text += rows
        parts.append("<div class='profmagic-stale'>waiting for the interpreter: no update for "
                     f"{STALE} s (the cell holds the GIL in C code); the view resumes when it lets go</div></div>")
        return {"text/plain": "\n".join(text), "text/html": "".join(parts)}


    def now(self) -> list[dict]:
        """What each thread of the cell is doing now: ``thread``, ``stack`` (leaf first) and
        ``reason``. The cell's thread first, then the threads started since the kernel's own (not
        profmagic's)."""
        o = self.session.options
        pid = o.pid or os.getpid()
        here = pid == os.getpid()
        names = procfs.threads() if here else _threads_of(pid)
        cell = o.thread_native_id
        before = self.session.before or ()
        tids = [t for t in names if t not in OWN and (t == cell or t not in before)]
        tids.sort(key=lambda t: (t != cell, t))
        frames = sys._current_frames() if here else {}
        frames.pop(threading.get_ident(), None)   # this frame holds the dict: no cycle kept
        ident = {t.native_id: t.ident for t in threading.enumerate() if t.native_id is not None} if here else {}
        out = []
        for tid in tids:
            r = self._readers.get(tid)
            if r is None:
                r = self._readers[tid] = reasons.ProcReader(pid, tid)
            state, wchan, syscall, _ = r.facts()
            if state is None:   # the thread has ended
                continue
            f = frames.get(ident.get(tid))
            stack, leaf = [], (None, None)
            if f is not None:
                leaf = reasons.python_leaf(f)
                g = f
                while g is not None and len(stack) < NOW_DEPTH:   # up to the cell's frame
                    stack.append(code_name(g.f_code))
                    if o.cell_filename and g.f_code.co_filename == o.cell_filename:
                        break
                    g = g.f_back
                if leaf[1] not in (None, reasons.BETWEEN_BYTECODES, reasons.WITH):
                    stack.insert(0, f"{leaf[1]}()")
            elif wchan and wchan != "0":
                stack = [f"[kernel] {wchan}"]
            if state == "R":   # running, or runnable
                why = reasons.CPU
            else:
                why = reasons.classify(state=state, wchan=wchan, syscall=syscall, function=leaf[0], call=leaf[1])
            label = f'Thread {tid} "{names[tid]}"'
            out.append({"thread": label, "stack": stack, "reason": why})
        for tid in set(self._readers) - set(tids):
            self._readers.pop(tid).close()
        return out

    def wakers(self) -> str:
        """What the view says of wakers: never known live."""
        o = self.session.options
        if self.session.name == "perf" and o.mode == "both":
            return "wakers: not known live (perf gives them in the report)"
        return "wakers: not known live (they need --backend perf --mode both)"

    def _memory_bundle(self, elapsed: float) -> dict:
        """memray alone has nothing to show while it records: the status and the process's RSS."""
        o = self.session.options
        rss = procfs.rss()
        status = (f"● recording · {self.session.name} · pid {o.pid} · {elapsed:.1f} s"
                  + (f" · RSS now {rss / 2**20:,.1f} MiB" if rss is not None else ""))
        return {"text/plain": status, "text/html": f"<div class='profmagic-live'><b>{html.escape(status)}</b></div>"}


def _threads_of(pid: int) -> dict[int, str]:
    """Native id -> name of every thread of another process."""
    out = {}
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{t}/comm") as f:
                    out[int(t)] = f.read().strip()
            except OSError:
                pass
    except OSError:
        pass
    return out


def _now_html(now: list[dict], wakers: str) -> tuple[str, list[str]]:
    """HTML and text rows of what each thread is doing now."""
    rows_html, rows_text = [], []
    for t in now:
        stack = " ← ".join(t["stack"]) or "(no stack)"
        label = reasons.LABELS.get(t["reason"], t["reason"])
        rows_html.append(f"<tr><td>{html.escape(t['thread'])}</td><td>{html.escape(label)}</td>"
                         f"<td>{html.escape(stack)}</td></tr>")
        rows_text.append(f"  now: {t['thread']} · {label} · {stack}")
    rows_text.append(f"  {wakers}")
    return ("<div class='profmagic-now'><b>now</b> (each thread's stack, leaf first, and why it waits)"
            "<table>" + "".join(rows_html) + f"</table><span style='color:#666'>{html.escape(wakers)}</span></div>",
            rows_text)


def aggregate(frames: list, rows: list, threads: set, cell_file: str | None) -> dict:
    """Per function (name): self and total wall and CPU seconds, and per path of function names
    (root first, cut at the cell's first frame) the wall seconds: in plain Python, no pandas."""
    fn: dict[str, list[float]] = {}       # name -> [self wall, total wall, self cpu, total cpu]
    paths: dict[tuple, float] = {}
    samples = 0
    for th, stack, n, wall, cpu in rows:
        if th not in threads or not stack:
            continue
        names = [frames[f][0] for f in stack]
        if cell_file:
            cut = next((j for j, f in enumerate(stack) if frames[f][1] == cell_file), None)
            if cut is None:
                continue
            names = names[cut:]
        samples += int(n)
        cpu = 0.0 if cpu != cpu else cpu
        for name in set(names):
            v = fn.setdefault(name, [0.0, 0.0, 0.0, 0.0])
            v[1] += wall
            v[3] += cpu
        v = fn[names[-1]]
        v[0] += wall
        v[2] += cpu
        for d in range(1, min(len(names), ICICLE_DEPTH) + 1):
            key = tuple(names[:d])
            paths[key] = paths.get(key, 0.0) + wall
    return {"functions": fn, "paths": paths, "samples": samples}


def _top(agg: dict) -> tuple[str, list[str]]:
    """HTML and text rows of the top functions by self and total wall time, with CPU beside."""
    fn = agg["functions"]
    whole = sum(v[0] for v in fn.values()) or 1.0
    rows_html, rows_text = [], []
    for key, w, c in (("self", 0, 2), ("total", 1, 3)):
        cells = []
        for name, v in sorted(fn.items(), key=lambda kv: -kv[1][w])[:TOP]:
            cells.append(f"<tr><td>{100 * v[w] / whole:5.1f}%</td><td>{v[w]:.3f} s</td><td>{v[c]:.3f} s</td>"
                         f"<td>{html.escape(name)}</td></tr>")
            rows_text.append(f"  by {key}: {100 * v[w] / whole:5.1f}%  {name}")
        rows_html.append(f"<td style='vertical-align:top'><b>top by {key}</b> (wall · cpu)<table>"
                         + "".join(cells) + "</table></td>")
    return "<table><tr>" + "".join(rows_html) + "</tr></table>", rows_text


ICICLE_DEPTH = 8


def _icicle(agg: dict, width: int = 640, row: int = 14) -> str:
    """A small SVG icicle of the paths so far (each box its wall share; hover names it)."""
    paths = agg["paths"]
    roots = {k: v for k, v in paths.items() if len(k) == 1}
    whole = sum(roots.values()) or 1.0
    boxes, x0 = [], {(): 0.0}
    for key in sorted(paths, key=lambda k: (len(k), -paths[k])):
        parent = key[:-1]
        if parent not in x0:
            continue
        x = x0[parent]
        w = paths[key] / whole * width
        x0[parent] = x + w
        x0[key] = x
        if w < 1:
            continue
        name = html.escape(key[-1])
        hue = zlib.crc32(key[-1].encode("utf-8", "surrogatepass")) % 360
        boxes.append(f"<g><title>{name} · {100 * paths[key] / whole:.1f}%</title>"
                     f"<rect x='{x:.1f}' y='{(len(key) - 1) * row}' width='{w:.1f}' height='{row - 1}' "
                     f"fill='hsl({hue},55%,70%)'/>"
                     + (f"<text x='{x + 2:.1f}' y='{len(key) * row - 4}' font-size='10'>{name[:int(w / 6)]}</text>"
                        if w > 30 else "") + "</g>")
    height = ICICLE_DEPTH * row
    return f"<svg width='{width}' height='{height}' font-family='sans-serif'>{''.join(boxes)}</svg>"


# The stale note appears by itself STALE seconds after an update, unless the next update replaces it.
_CSS = (".profmagic-stale{visibility:hidden;color:#b45309;animation:profmagic-stale 0s linear %ds forwards}"
        "@keyframes profmagic-stale{to{visibility:visible}}" % STALE)

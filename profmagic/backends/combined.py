"""py-spy + eu-stack in one run: Python threads from py-spy (``--idle``: wall time, Python names),
threads without Python state from eu-stack (wall time, on/off-CPU, C names), merged into one
Profile with one row set per thread, each thread from the tool that sees it best.

A thread is taken from py-spy when py-spy recorded it (py-spy --idle samples every Python thread),
otherwise from eu-stack. Both label threads ``Thread <native tid> "<name>"``. Sample times are put
on one clock through each recorder's start time (approximate to a few ms). The raw capture is a
zip holding both tools' files.
"""
from __future__ import annotations

import io
import time
import zipfile
from dataclasses import replace

from ..errors import ProfilerError
from ..profile import Raw, StackBuilder
from . import eustack, pyspy
from .base import Capture, Options, thread_native_id

NAME = "py-spy+eu-stack"
FORMAT = "py-spy+eu-stack"


def available() -> tuple[bool, str]:
    reasons = []
    for mod in (pyspy, eustack):
        ok, why = mod.available()
        if not ok:
            return False, f"{mod.NAME}: {why}"
        reasons.append(why)
    return True, "; ".join(reasons)


class Recorder:
    def __init__(self, options: Options):
        self.options = options
        self.py_options = replace(options, idle=True, gil=False)
        self.py = pyspy.Recorder(self.py_options)
        self.eu = eustack.Recorder(options)
        self.t_py = self.t_eu = None

    def start(self) -> None:
        self.t_eu = time.time()
        self.eu.start()
        self.t_py = time.time()
        self.py.start()

    def stop(self) -> Capture:
        try:
            py_cap = self.py.stop()
        finally:
            eu_cap = self.eu.stop()
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("py-spy.speedscope.json", py_cap.data)
            z.writestr("eu-stack.txt", eu_cap.data)
        meta = {"backend": NAME, "pid": self.options.pid, "py_spy": py_cap.meta, "eu_stack": eu_cap.meta,
                "py_spy_started": self.t_py, "eu_stack_started": self.t_eu}
        return Capture(buf.getvalue(), FORMAT, meta)

    def close(self) -> None:
        try:
            self.py.close()
        finally:
            self.eu.close()


def read(capture: Capture, options: Options | None = None):
    options = options or Options()
    try:
        with zipfile.ZipFile(io.BytesIO(capture.data)) as z:
            py_data, eu_data = z.read("py-spy.speedscope.json"), z.read("eu-stack.txt")
    except (zipfile.BadZipFile, KeyError) as e:
        raise ProfilerError(f"py-spy+eu-stack capture is not the zip of both tools' files: {e}") from None
    m = capture.meta
    p_py = pyspy.read(Capture(py_data, "speedscope", m.get("py_spy", {})), replace(options, idle=True, gil=False))
    p_eu = eustack.read(Capture(eu_data, eustack.FORMAT, m.get("eu_stack", {})), options)
    py_tids = {thread_native_id(t) for t in p_py.threads} - {None}
    b = StackBuilder()
    sources = {}
    # eu-stack times count from its helper's start; py-spy's from its own: both onto eu-stack's clock.
    eu_t0 = float(p_eu.meta.get("t0_unix") or m.get("eu_stack_started") or 0)
    py_off = (m.get("py_spy_started") or eu_t0) - eu_t0 if eu_t0 else 0.0
    for p, tool, offset, keep in ((p_py, "py-spy", py_off, lambda tid: True),
                                  (p_eu, "eu-stack", 0.0, lambda tid: tid not in py_tids)):
        fmap = {}
        rowmap = {}
        frames = p.frames
        for row, (thread, stack) in enumerate(zip(p.stacks["thread"], p.stacks["stack"])):
            if not keep(thread_native_id(thread)):
                continue
            fids = []
            for f in stack:
                if f not in fmap:
                    r = frames.loc[f]
                    line = None if r["line"] is None or bool(r.isna()["line"]) else int(r["line"])
                    fmap[f] = b.frame(r["name"], r["file"] or None, line, str(r["kind"]))
                fids.append(fmap[f])
            extra = {"on_cpu": p.stacks.at[row, "on_cpu"]} if "on_cpu" in p.stacks else {}
            rowmap[row] = b.stack(thread, fids, **extra)
            sources[thread] = tool
        cols = [c for c in ("wall", "cpu") if c in p.stacks]
        if p.samples is not None and len(p.samples):
            s = p.samples
            for i in range(len(s)):
                row = int(s["stack"].iat[i])
                if row in rowmap:
                    w = {c: float(s[c].iat[i]) for c in cols if c in s and s[c].iat[i] == s[c].iat[i]}
                    b.add(rowmap[row], samples=1, time=float(s["time"].iat[i]) + offset, **w)
        else:
            for row, sid in rowmap.items():
                w = {c: float(p.stacks.at[row, c]) for c in cols if p.stacks.at[row, c] == p.stacks.at[row, c]}
                b.add(sid, samples=int(p.stacks.at[row, "samples"]), **w)
    if not sources:
        raise ProfilerError("neither py-spy nor eu-stack recorded any thread")
    meta = {"backend": NAME, "pid": m.get("pid"), "thread_sources": sources,
            "rate": p_eu.meta.get("rate"), "py_spy_rate": p_py.meta.get("rate"),
            "eu_stack_rate": p_eu.meta.get("rate"), "duration": p_eu.meta.get("duration"),
            "metrics": ["wall", "cpu"],
            "metric_note": ("wall time from both tools; cpu from eu-stack's per-thread CPU counters for "
                            "native threads, NaN for py-spy threads"),
            "versions": {**(p_py.meta.get("versions") or {}), "eu-stack": p_eu.meta.get("version")}}
    out = b.build(metric="wall", meta=meta, raw=Raw(capture.data, FORMAT, filename="py-spy+eu-stack.zip"),
                  unknown_metrics=("cpu",))
    # py-spy does not measure CPU time: its rows' cpu is unknown, not zero.
    from_py = out.stacks["thread"].map(sources).eq("py-spy").to_numpy()
    out.stacks.loc[from_py, "cpu"] = float("nan")
    if "on_cpu" in out.stacks:
        out.stacks["on_cpu"] = out.stacks["on_cpu"].where(~from_py, None)
    return out

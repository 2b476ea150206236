"""py-spy + eu-stack in one run: Python threads from py-spy (``--idle``: wall time, Python names),
threads without Python state from eu-stack (wall time, on/off-CPU, C names), merged into one
Profile, each thread from the tool that sees it best.

A thread is taken from py-spy when py-spy recorded it (py-spy --idle samples every Python thread),
otherwise from eu-stack. Sample times are put on one clock through each recorder's start time
(approximate to a few ms). The raw capture is a container holding both tools' files.
"""
from __future__ import annotations

import time
from dataclasses import replace

from ..errors import ProfilerError
from ..model import Profile
from . import eustack, pyspy
from .base import Capabilities, Capture, Options

NAME = "py-spy+eu-stack"
CAPS = Capabilities(clocks=("wall", "cpu"), weights="measured", inside=False, attach=True, streams=False,
                    threads="all", native=True)


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
        # py-spy's speedscope recording, as this backend was built and measured: its timed format is
        # not merged here (its sample times would need py-spy's first sample on eu-stack's clock).
        self.py = pyspy.Recorder(replace(options, mode="wall", gil=False,
                                         extra={**options.extra, "timing": "calibrated"}))
        self.eu = eustack.Recorder(options)
        self.t_py = self.t_eu = None

    def start(self) -> None:
        self.t_eu = time.time()
        self.eu.start()
        self.t_py = time.time()
        self.py.start()

    def stop(self) -> Capture:
        from ..formats import container
        try:
            py_cap = self.py.stop()
        finally:
            eu_cap = self.eu.stop()
        meta = {"backend": NAME, "pid": self.options.pid, "primary_started": self.t_py,
                "secondary_started": self.t_eu}
        data = container.write([("py-spy.speedscope.json", py_cap.data, "speedscope", "primary", {"metric": "wall"}),
                                ("eu-stack.txt", eu_cap.data, eustack.FORMAT, "secondary", {})],
                               combine="thread-sources", meta=meta)
        return Capture(data, container.NAME, {**meta, "py_spy": py_cap.meta, "eu_stack": eu_cap.meta})

    def close(self) -> None:
        try:
            self.py.close()
        finally:
            self.eu.close()


def read(capture: Capture, options: Options | None = None) -> Profile:
    from .. import formats
    p = formats.read(capture.data, capture.format, source="py-spy+eu-stack capture")
    if not len(p.stacks):
        raise ProfilerError("neither py-spy nor eu-stack recorded any thread")
    eu = capture.meta.get("eu_stack") or {}
    meta = {"backend": NAME, "pid": capture.meta.get("pid"), "rate": p.meta.get("rate"),
            "py_spy_rate": float(options.rate) if options else None,
            "metrics": ["wall", "cpu"],
            "metric_note": ("wall time from both tools; cpu from eu-stack's per-thread CPU counters for "
                            "native threads, NaN for py-spy threads"),
            "versions": {"py-spy": pyspy.version(), "eu-stack": eu.get("version") or p.meta.versions.get("eu-stack")}}
    return p.replace(meta=p.meta.replace(**meta))

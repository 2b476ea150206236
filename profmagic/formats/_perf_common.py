"""What the perf script reader and the perf sched reader share: the record of a ``PERF_RECORD_*`` line.
Its own module so that perf_sched.py needs nothing of perf_script.py, which imports perf_sched."""
from __future__ import annotations

from typing import NamedTuple


class SideBand(NamedTuple):
    """A ``PERF_RECORD_*`` line (``--show-switch-events``, ``--show-task-events``): no frames."""
    thread: str         # the label of the thread whose header it has
    comm: str
    pid: int | None
    tid: int
    time: float
    kind: str           # SWITCH, COMM, FORK, EXIT, ...
    text: str           # the rest of the line: "IN", "OUT preempt", "(12:13):(12:12)" ...

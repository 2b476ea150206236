"""Pure functions Profile -> Profile, one module per job, each importing only those before it:

- ``ops``: regroup rows, choose, rename and merge threads, calibrate, focus, prune, rename files;
- ``cpu_split``: a sample's CPU delta shared at a stack change (the in-process samplers);
- ``merge``: recordings of one run merged (wall beside cpu, the threads only a second recorder saw);
- ``memory``: a time recording joined with a memray recording (uses ``ops``, ``merge``);
- ``cell``: the processors of a recording (``Cell``): threads, the cut at the cell, profmagic's own
  frames, clocks, display names (uses ``ops``);
- ``awaits``: a top-level-await cell's idle time given to its awaiting coroutines (uses ``cell``);
- ``pipeline``: the processors in order, ``PROCESSORS``, ``FINAL``, ``CELL_ONLY`` (uses ``cell``, ``awaits``).

None of them mutates its input; each returns a new Profile whose meta records what was done. This
module only re-exports them.
"""
from __future__ import annotations

from .awaits import attribute_awaits
from .cell import (EXEC_ENTRY, Cell, cell_names, cell_thread, clocks, hide_profmagic, live_thread_names,
                   named_files, native_to_cell, only_users_threads, to_cell, trim_native_to_cell, trim_to_cell)
from .cpu_split import split_cpu_at_stack_changes
from .memory import MEMORY_SLOWS, align_names, time_and_memory
from .merge import combine_idle, merge_runs, merge_thread_sources
from .ops import (calibrate, cell_threads, drop_idle_threads, drop_kernel_threads, focus, group_processes,
                  keep_threads, name_threads, prune, regroup, relabel_threads, rename_files)
from .pipeline import CELL_ONLY, FINAL, PROCESSORS

__all__ = ["CELL_ONLY", "EXEC_ENTRY", "FINAL", "MEMORY_SLOWS", "PROCESSORS", "Cell", "align_names",
           "attribute_awaits", "calibrate", "cell_names", "cell_thread", "cell_threads", "clocks", "combine_idle",
           "drop_idle_threads", "drop_kernel_threads", "focus", "group_processes", "hide_profmagic", "keep_threads",
           "live_thread_names", "merge_runs", "merge_thread_sources", "name_threads", "named_files",
           "native_to_cell", "only_users_threads", "prune", "regroup", "relabel_threads", "rename_files",
           "split_cpu_at_stack_changes", "time_and_memory", "to_cell", "trim_native_to_cell", "trim_to_cell"]

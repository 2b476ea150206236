"""The order of the processors a recording runs (session.py reads it)."""
from __future__ import annotations

from typing import Callable

from ..model import Profile
from .awaits import attribute_awaits
from .cell import (Cell, clocks, hide_profmagic, live_thread_names, named_files, native_to_cell, only_users_threads,
                   to_cell)


# The processors every recording runs, in order (session.py adds the backend's own after `clocks`).
PROCESSORS: tuple[Callable[[Profile, Cell], Profile], ...] = (only_users_threads, live_thread_names,
                                                                  attribute_awaits, native_to_cell, to_cell,
                                                                  hide_profmagic, clocks)
FINAL: tuple[Callable[[Profile, Cell], Profile], ...] = (named_files,)
# The ones that need a cell run in this process (its thread, its file, its awaits, the kernel's threads):
# a recording of other processes or of a command (session.PidsTarget, CommandTarget) runs the others.
CELL_ONLY = frozenset({only_users_threads, live_thread_names, attribute_awaits, native_to_cell, to_cell})

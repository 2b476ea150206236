"""The processors a recording of a cell runs through (``Cell``): its threads, the cut at the cell,
profmagic's own threads and frames, the clocks, the cell's display name.
"""
from __future__ import annotations

import itertools
import os
import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping

import numpy as np
import pandas as pd

from ..model import TIME_METRICS, Profile
from ..threads import thread_label
from .ops import _thread_rows, drop_kernel_threads, keep_threads, name_threads, regroup, rename_files


# -- the cell ------------------------------------------------------------------------------------
# Where the interpreter starts a module-level code object (exec, eval, import, the main script): one
# such native frame per ``<module>`` Python frame.
EXEC_ENTRY = "PyEval_EvalCode"
# A native stack that reaches one of these is whole (unwound to the thread's start).
_THREAD_ROOTS = re.compile(r"^(_start|__libc_start_main\S*|__libc_start_call_main|main|Py_BytesMain|Py_RunMain"
                           r"|start_thread|__clone3?|clone3?|thread_run|pythread_wrapper)$")


def trim_native_to_cell(profile: Profile, thread: str, entries_above: int) -> Profile:
    """Cut the native stacks of ``thread`` (the cell's) at the cell: the cell runs as module code
    through the interpreter's ``PyEval_EvalCode``, and ``entries_above`` of those frames lie above
    it (the kernel's, IPython's: one per ``<module>`` Python frame where the cell was started). So
    the cell begins at the frame after the (``entries_above`` + 1)-th ``PyEval_EvalCode`` from the
    root; what is above it folds away. For stacks that name no Python file (perf without CPython's
    perf support, eu-stack's ``[python]``), where ``trim_to_cell`` has nothing to cut at.

    A whole stack (unwound to the thread's start) with fewer such frames was sampled outside the
    cell (the magic around it) and is dropped; a truncated one is kept as it is. Other threads are
    kept whole. Nothing changes when no stack of ``thread`` reaches the cell (unwinding that never
    gets to ``PyEval_EvalCode``), and ``meta["trim_note"]`` says so."""
    fr = profile.frames
    entry = set(fr.index[(fr["name"] == EXEC_ENTRY).to_numpy()].tolist())
    roots = set(fr.index[fr["name"].astype(str).str.match(_THREAD_ROOTS).to_numpy()].tolist())
    mine = _thread_rows(profile, [thread])
    old = profile.stacks
    new_stacks, keep, cut_any = [], np.ones(len(old), dtype=bool), False
    for i, s in enumerate(old["stack"]):
        if not mine[i]:
            new_stacks.append(s)
            continue
        seen, cut = 0, None
        for j, f in enumerate(s):
            if f in entry:
                seen += 1
                if seen == entries_above + 1:
                    cut = j + 1
                    break
        if cut is not None and cut < len(s):
            new_stacks.append(tuple(s[cut:]))
            cut_any = True
        else:
            new_stacks.append(s)
            keep[i] = not any(f in roots for f in s)
    if not cut_any:
        return profile.with_meta(trim_note=f"native stacks not trimmed: no stack of {thread} reaches the cell's "
                                           f"{EXEC_ENTRY}")
    dropped = int(old["samples"].to_numpy()[~keep].sum())
    return regroup(profile, profile.thread_ids(), new_stacks, keep,
                   {"trimmed_native_to_cell": thread, "samples_outside_cell": dropped})


def trim_to_cell(profile: Profile, cell_filename: str, threads: Iterable[str] | None = None) -> Profile:
    """Cut every stack above its first frame from ``cell_filename`` (IPython's and the kernel's own
    frames). In ``threads`` (default: all), stacks with no cell frame are dropped: they were
    sampled outside the cell (the magic itself). Stacks of other threads are kept whole."""
    fr = profile.frames
    in_cell = set(fr.index[(fr["file"] == cell_filename).to_numpy()].tolist())
    # With no cell frame at all there is nothing to cut against when the profiler cannot name Python
    # files (perf, eu-stack) or traced no call in the cell (cProfile). A sampler that names Python
    # files and saw no cell frame sampled only the magic around the cell: drop those samples.
    names_files = bool(((fr["kind"] == "python") & (fr["file"] != "")).any())
    traced = "calls" in profile.stacks
    drop_outside = bool(in_cell) or (names_files and not traced)
    strict = _thread_rows(profile, threads) if drop_outside else np.zeros(len(profile.stacks), dtype=bool)
    old = profile.stacks
    new_stacks, keep = [], np.ones(len(old), dtype=bool)
    for i, s in enumerate(old["stack"]):
        cut = next((j for j, f in enumerate(s) if f in in_cell), None)
        if cut is None:
            new_stacks.append(s)
            keep[i] = not strict[i]
        else:
            new_stacks.append(tuple(s[cut:]))
    dropped = int(old["samples"].to_numpy()[~keep].sum()) if len(old) else 0
    return regroup(profile, profile.thread_ids(), new_stacks, keep,
                   {"trimmed_to": cell_filename, "samples_outside_cell": dropped})


# -- display names --------------------------------------------------------------------------------------
def cell_names(filename_map: Mapping[str, int]) -> dict[str, str]:
    """IPython's compile cache filename -> execution count, as display names ``In[N]``."""
    return {f: f"In[{n}]" for f, n in filename_map.items()}


# -- the processors of a recording ---------------------------------------------------------------------
@dataclass
class Cell:
    """What the processors know about the code that was recorded."""
    tid: int                                  # native id of the thread that ran it
    thread_name: str
    filename: str | None = None               # the file it was compiled under (trim to it)
    before: frozenset = frozenset()           # native ids of threads that are not the user's
    keep_all_threads: bool = False
    live_names: Mapping[int, str] = field(default_factory=dict)   # tid -> current thread name
    file_names: Mapping[str, str] = field(default_factory=dict)   # cell file -> "In[N]"
    mode: str = "wall"
    unmeasured: Mapping[str, str] = field(default_factory=dict)   # clock -> why the backend cannot
    awaits: tuple = ()                        # awaits.Wait of a top-level-await cell
    own: frozenset = frozenset()              # native ids of profmagic's own threads (threads.OWN)
    entries_above: int = 0                    # PyEval_EvalCode frames above the cell (exec_entries_above)
    sees_awaits: bool = False                 # the backend samples awaiting coroutines itself
    wall: float = 0.0                         # measured around the code: seconds of wall time,
    cpu: float = 0.0                          # of the thread's CPU time,
    run_delay: float | None = None            # and of waiting for a core (None: unknown)
    hidden: tuple = ()                        # folders of profmagic's start-up hooks in a command (record)


def cell_thread(p: Profile, cell: Cell) -> str:
    """The label of the cell's thread in ``p`` (by native id), or the label it would have."""
    for lab, tid in zip(p.thread_table["label"], p.thread_table["tid"]):
        if tid is not pd.NA and int(tid) == cell.tid:
            return lab
    return thread_label(cell.tid, cell.thread_name)


def only_users_threads(p: Profile, cell: Cell) -> Profile:
    return p if cell.keep_all_threads else drop_kernel_threads(p, cell.tid, cell.before)


def live_thread_names(p: Profile, cell: Cell) -> Profile:
    return name_threads(p, {**cell.live_names, cell.tid: cell.thread_name})


# profmagic's own code (not its case study): frames of it below the user's code are the profiler's.
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_OWN_EXEMPT = (os.path.join(_PACKAGE, "casestudy") + os.sep,)


_IMPORTS = ("<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>")


def hide_profmagic(p: Profile, cell: Cell) -> Profile:
    """profmagic's own threads leave, and its frames below the user's code (a recording inside a
    recording, or ``session.run(fn)`` calling back into the user's ``fn``) fold into their caller.

    A command's start-up hook (``cell.hidden``: record's sitecustomize, the children's) is trimmed
    with the import frames that ran it: a sample of the hook alone (waiting for the recorder, putting
    the command's path back) is profmagic's, not the command's, and is dropped; one that reaches the
    process's own sitecustomize keeps it, under the frame that imported the hook."""
    own = {lab for lab, tid in zip(p.threads, p.thread_table["tid"]) if tid is not pd.NA and int(tid) in cell.own}
    if own:
        p = keep_threads(p, [t for t in p.threads if t not in own])
    files = p.frames["file"].astype(str)
    hooks = tuple(cell.hidden)
    hook = set(p.frames.index[[bool(hooks) and f.startswith(hooks) for f in files]].tolist())
    ours = hook | set(p.frames.index[[f.startswith(_PACKAGE) and not f.startswith(_OWN_EXEMPT)
                                      for f in files]].tolist())
    if not ours:
        return p
    imports = set(p.frames.index[files.isin(_IMPORTS).to_numpy()].tolist()) if hook else set()
    new, changed = [], False
    keep = np.ones(len(p.stacks), dtype=bool)
    for i, orig in enumerate(p.stacks["stack"]):
        s = orig
        h = next((j for j, f in enumerate(s) if f in hook), None) if hook else None
        if h is not None:
            above = next((j for j in range(h + 1, len(s)) if s[j] not in ours and s[j] not in imports), None)
            if above is None:
                keep[i] = False
                new.append(s)
                continue
            below = h
            while below > 0 and s[below - 1] in imports:
                below -= 1
            s = s[:below] + s[above:]
        kept = s[:1] + tuple(f for f in s[1:] if f not in ours) if s and s[0] not in ours else s
        new.append(kept)
        changed |= kept != orig
    if not changed and keep.all():
        return p
    note = {"profmagic_frames": "folded into their caller"}
    if not keep.all():
        note["hook_samples_dropped"] = int(p.stacks["samples"].to_numpy()[~keep].sum())
    p = regroup(p, p.thread_ids(), new, keep, note)
    return _without_frames(p, ours | imports) if hook else p


def _without_frames(p: Profile, drop: set) -> Profile:
    """``p`` without those frames of ``drop`` that no stack uses any more (a command's profile names
    no file of its start-up hook); frame ids renumbered 0..n-1."""
    used = set(itertools.chain.from_iterable(p.stacks["stack"]))
    gone = {f for f in drop if f not in used}
    if not gone:
        return p
    fr = p.frames
    kept = [f for f in fr.index.tolist() if f not in gone]
    new_id = {f: i for i, f in enumerate(kept)}
    frames = fr.loc[kept].reset_index(drop=True)
    frames.index.name = "frame"
    stacks = p.stacks.assign(stack=pd.Series([tuple(new_id[f] for f in s) for s in p.stacks["stack"]],
                                             dtype=object, index=p.stacks.index))
    return p.replace(frames=frames, stacks=stacks)


def native_to_cell(p: Profile, cell: Cell) -> Profile:
    """Stacks that name no frame of the cell's file (native stacks of perf or eu-stack): cut the cell's
    thread at its ``PyEval_EvalCode`` (``trim_native_to_cell``)."""
    if not cell.filename or (p.frames["file"] == cell.filename).any():
        return p
    return trim_native_to_cell(p, cell_thread(p, cell), cell.entries_above)


def to_cell(p: Profile, cell: Cell) -> Profile:
    if not cell.filename:
        return p
    return trim_to_cell(p, cell.filename, threads=[cell_thread(p, cell)])


def clocks(p: Profile, cell: Cell) -> Profile:
    """Under ``--mode both``, a wall and a cpu column: NaN (and said why) for a clock the backend
    does not measure, never zero."""
    if cell.mode != "both":
        return p
    st = p.stacks
    unknown = dict(p.meta.unknown)
    for m in TIME_METRICS:
        if m in cell.unmeasured:
            if m not in st or st[m].notna().any():
                if m == p.metric and (set(TIME_METRICS) - {m}) - set(st):
                    st = st.assign(**{(set(TIME_METRICS) - {m}).pop(): st[m]})
                st = st.assign(**{m: np.nan})
            unknown[m] = cell.unmeasured[m]
        elif m not in st:
            st = st.assign(**{m: np.nan})
    metric = p.metric if p.metric not in cell.unmeasured else next(
        (m for m in TIME_METRICS if m not in cell.unmeasured), "samples")
    return p.replace(stacks=st, metric=metric, meta=p.meta.replace(mode="both", unknown=unknown))


def named_files(p: Profile, cell: Cell) -> Profile:
    return rename_files(p, cell.file_names)

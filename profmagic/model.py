"""The model: frames, threads, stacks, time-ordered samples, typed meta and the raw capture.

Knows pandas and numpy. Knows no profiler, no format, no plotly and no IPython.

A Profile is immutable once built: every change makes a new Profile (``replace``, ``subset``,
the functions of ``transforms``). Readers pass everything to a ``StackBuilder`` and never patch
the Profile it builds.
"""
from __future__ import annotations

import itertools
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace as _dc_replace
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from .reasons import REASONS

from . import flatstacks, uncertainty

KINDS = ("python", "native", "kernel", "other")
TIME_METRICS = ("wall", "cpu")
# Memory (memray): bytes alive at the high-water mark (or, in leaks mode, at the end), every byte
# allocated, and the number of allocations: what memray attributed to each stack, not sums of samples.
MEMORY_METRICS = ("bytes", "allocated", "allocations")
METRICS = ("samples", "wall", "cpu", "off_cpu") + MEMORY_METRICS
INTEGER_METRICS = ("samples",) + MEMORY_METRICS
WEIGHT_METRICS = TIME_METRICS + MEMORY_METRICS   # measured per stack, stored as stacks columns
METRIC_LABELS = {
    "samples": "samples",
    "wall": "wall time (s)",
    "cpu": "CPU time (s)",
    "off_cpu": "off-CPU time (s) = wall − cpu",
    "bytes": "bytes alive at the memory high-water mark",
    "allocated": "bytes allocated (freed or not)",
    "allocations": "allocations (count)",
}
# Columns of the thread table, besides its id (the index).
THREAD_COLUMNS = ("label", "name", "pid", "tid", "process", "rank", "backend", "python")


@dataclass(frozen=True)
class Raw:
    """What the profiler wrote, kept as it was.

    ``data`` holds the bytes; for a capture too large to keep in memory, ``data`` is None and
    ``path`` points to the file on disk. ``options`` are the reader options that give back the
    same Profile: ``load(raw)`` uses them.
    """
    data: bytes | None
    format: str
    path: str | None = None
    filename: str | None = None  # a suggested download name
    options: Mapping = field(default_factory=dict)

    def read(self) -> bytes:
        if self.data is not None:
            return self.data
        if self.path is None:
            return b""
        with open(self.path, "rb") as f:
            return f.read()

    @property
    def size(self) -> int:
        if self.data is not None:
            return len(self.data)
        return os.path.getsize(self.path) if self.path and os.path.exists(self.path) else 0


# -- read-only containers ----------------------------------------------------------------------------
_READ_ONLY_FRAME = "a Profile's frames are read-only: change a copy (df.copy()), or make a new Profile (replace)"


class _Frozen:
    """What FrozenDict and FrozenList share: every change refused; copies are the object itself."""
    __slots__ = ()

    def _refuse(self, *a, **kw):
        raise TypeError("a Profile's meta is read-only: use Meta.replace / Profile.with_meta")

    def __reduce__(self):   # pickle rebuilds it whole, never item by item
        base = dict if isinstance(self, dict) else list
        return (type(self), (base(self),))

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self


class FrozenDict(_Frozen, dict):
    """A dict that refuses every change (meta's nested values). Still a dict, so json writes it as
    one; ``dict(d)`` is an ordinary, changeable copy."""
    __slots__ = ()
    __setitem__ = __delitem__ = __ior__ = _Frozen._refuse
    clear = pop = popitem = setdefault = update = _Frozen._refuse


class FrozenList(_Frozen, list):
    """A list that refuses every change; equal to the list it was made from, and json writes it as one."""
    __slots__ = ()
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _Frozen._refuse
    append = extend = insert = remove = pop = clear = sort = reverse = _Frozen._refuse


def freeze(v):
    """``v`` deep-frozen: mappings become FrozenDicts, lists FrozenLists, tuples tuples of frozen
    values, sets frozensets."""
    if isinstance(v, (FrozenDict, FrozenList)):
        return v
    if isinstance(v, Mapping):
        return FrozenDict({k: freeze(x) for k, x in v.items()})
    if isinstance(v, list):
        return FrozenList(freeze(x) for x in v)
    if isinstance(v, tuple) and not hasattr(v, "_fields"):   # a named tuple keeps its type
        return tuple(freeze(x) for x in v)
    if isinstance(v, (set, frozenset)):
        return frozenset(v)
    return v


class _ReadOnlyIndexer:
    """``loc``, ``iloc``, ``at`` and ``iat`` of a frozen frame: they read, they never write."""
    __slots__ = ("_ix",)

    def __init__(self, ix):
        self._ix = ix

    def __getitem__(self, key):
        return self._ix[key]

    def __setitem__(self, key, value):
        raise TypeError(_READ_ONLY_FRAME)

    def __call__(self, axis=None):
        return _ReadOnlyIndexer(self._ix(axis))


class FrozenFrame(pd.DataFrame):
    """A DataFrame of a Profile: reads, groupbys and copies work as usual and give ordinary
    DataFrames; setting a column or a value, or changing it in place, raises TypeError.
    Copy-on-write (pandas >= 3) keeps the frames it was built from, and those built from it,
    apart from it."""
    _metadata: list = []

    @property
    def _constructor(self):
        return pd.DataFrame

    def _refuse(self, *a, **kw):
        raise TypeError(_READ_ONLY_FRAME)

    __setitem__ = __delitem__ = insert = pop = isetitem = _update_inplace = _refuse

    def __setattr__(self, name, value):
        if name.startswith("_"):   # pandas' own state
            return super().__setattr__(name, value)
        raise TypeError(_READ_ONLY_FRAME)

    @property
    def loc(self):
        return _ReadOnlyIndexer(super().loc)

    @property
    def iloc(self):
        return _ReadOnlyIndexer(super().iloc)

    @property
    def at(self):
        return _ReadOnlyIndexer(super().at)

    @property
    def iat(self):
        return _ReadOnlyIndexer(super().iat)


def frozen_frame(df: pd.DataFrame | None) -> FrozenFrame | None:
    """``df`` as a FrozenFrame: itself when it is one; else a copy-on-write view of it."""
    if df is None or isinstance(df, FrozenFrame):
        return df
    return FrozenFrame(df)


# -- meta -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Meta(Mapping):
    """What is known about a profile, as named fields; anything else is kept in ``extra``.

    Read it like a dict (``meta["rate"]``, ``meta.get("partial")``): a field that is None (or an
    empty collection) counts as absent. Change it with ``replace(**changes)``, which puts unknown
    keys into ``extra`` and removes a key given as None.
    """
    format: str | None = None            # the file format read
    source: str | None = None            # file name, or "<input>"
    backend: str | None = None           # the profiler that recorded it
    backend_choice: str | None = None    # why that backend (auto)
    mode: str | None = None              # wall | cpu | both
    rate: float | None = None            # samples per second reached (or calibrated)
    requested_rate: float | None = None
    duration: float | None = None        # seconds the recording covers
    pid: int | None = None
    cell: str | None = None
    cell_thread: str | None = None       # the label of the thread that ran the cell
    cell_wall: float | None = None
    cell_cpu: float | None = None
    versions: Mapping = field(default_factory=dict)
    approximate: str | None = None       # why the numbers are reconstructed, when they are
    partial: str | None = None           # why the profile covers less than the code
    message: str | None = None           # what the user must be told (e.g. too few samples)
    unknown: Mapping = field(default_factory=dict)     # metric -> why it was not measured
    processes: Mapping = field(default_factory=dict)   # process label -> what is known of it
    timing: str | None = None            # how sample times were taken: "timed" | "calibrated" | a reader's note
    memray: str | None = None            # memray's version, when memray recorded memory
    memray_mode: str | None = None       # "every allocation" | "aggregated"
    metric_labels: Mapping = field(default_factory=dict)   # metric -> what it means here (overrides METRIC_LABELS)
    memory_timeline: Mapping = field(default_factory=dict)  # memray's heap over time (formats/memray.py)
    cluster: Mapping = field(default_factory=dict)          # a cluster recording's session and ranks
    warnings: tuple = ()
    extra: Mapping = field(default_factory=dict)

    @classmethod
    def of(cls, meta: "Meta | Mapping | None" = None, **changes) -> "Meta":
        if isinstance(meta, Meta) and not changes:
            return meta
        base = cls() if not isinstance(meta, Meta) else meta
        items = dict(meta or {}) if not isinstance(meta, Meta) else {}
        items.update(changes)
        return base.replace(**items) if items else base

    def replace(self, **changes) -> "Meta":
        names = _META_FIELDS
        known: dict[str, Any] = {}
        extra = dict(self.extra)
        for k, v in changes.items():
            if k == "version" and not isinstance(v, Mapping):   # one tool's version string
                tool = changes.get("backend") or changes.get("format") or self.backend or self.format or "tool"
                k, v = "versions", {**dict(self.versions), **dict(known.get("versions") or {}), str(tool): v}
            if k == "extra":
                extra.update(v or {})
            elif k in names:
                known[k] = _field_value(k, v)
                extra.pop(k, None)
            elif k in ("threads", "metric"):   # the thread table and Profile.metric hold these
                continue
            elif v is None:
                extra.pop(k, None)
            else:
                extra[k] = v
        known["extra"] = extra
        return _dc_replace(self, **known)

    def __post_init__(self):   # deep-frozen, however it was made
        for name in _META_MAPPINGS:
            object.__setattr__(self, name, freeze(getattr(self, name) or {}))
        object.__setattr__(self, "warnings", freeze(tuple(self.warnings or ())))

    # Mapping interface: set fields first, then extra.
    def __getitem__(self, key: str):
        if key in _META_FIELDS and key != "extra":
            v = getattr(self, key)
            if _is_set(v):
                return v
            raise KeyError(key)
        return self.extra[key]

    def __iter__(self):
        for k in _META_FIELDS:
            if k != "extra" and _is_set(getattr(self, k)):
                yield k
        yield from self.extra

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __contains__(self, key) -> bool:
        try:
            self[key]
        except KeyError:
            return False
        return True

    def __or__(self, other: Mapping) -> "Meta":
        return self.replace(**dict(other))

    def __hash__(self):  # a Mapping is unhashable; so is this
        raise TypeError("unhashable type: 'Meta'")

    def to_dict(self) -> dict:
        return {k: self[k] for k in self}


_META_FIELDS = tuple(f.name for f in fields(Meta))
_META_MAPPINGS = ("versions", "unknown", "processes", "metric_labels", "memory_timeline", "cluster", "extra")


def _is_set(v) -> bool:
    if v is None:
        return False
    if isinstance(v, (dict, tuple, list, Mapping)):
        return len(v) > 0
    return True


def _field_value(name: str, v):
    if name in _META_MAPPINGS:   # frozen by Meta.__post_init__
        return dict(v or {})
    if name == "warnings":
        return tuple(v or ())
    if name in ("rate", "requested_rate", "duration", "cell_wall", "cell_cpu") and v is not None:
        return float(v)
    if name == "pid" and v is not None:
        return int(v)
    return v


# -- the thread table ------------------------------------------------------------------------------
def thread_table(rows: Sequence[Mapping]) -> pd.DataFrame:
    """The thread table from one mapping per thread (keys of THREAD_COLUMNS; label required)."""
    df = pd.DataFrame({
        "label": pd.Series([str(r["label"]) for r in rows], dtype=object),
        "name": pd.Series([r.get("name") for r in rows], dtype=object),
        "pid": pd.array([_int_or_na(r.get("pid")) for r in rows], dtype="Int64"),
        "tid": pd.array([_int_or_na(r.get("tid")) for r in rows], dtype="Int64"),
        "process": pd.Series([r.get("process") for r in rows], dtype=object),
        "rank": pd.Series([r.get("rank") for r in rows], dtype=object),
        "backend": pd.Series([r.get("backend") for r in rows], dtype=object),
        "python": pd.array([r.get("python") for r in rows], dtype="boolean"),
    })
    df.index.name = "thread"
    return df


def _int_or_na(v):
    if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
        return pd.NA
    return int(v)


def unique_labels(labels: list[str], processes: list) -> list[str]:
    """Labels made unique: a label that several processes share is prefixed with the process."""
    count: dict[str, int] = {}
    for lab in labels:
        count[lab] = count.get(lab, 0) + 1
    out, seen = [], set()
    for lab, proc in zip(labels, processes):
        new = lab if count[lab] == 1 or proc is None else f"{proc} · {lab}"
        k = 2
        base = new
        while new in seen:
            new = f"{base} ({k})"
            k += 1
        seen.add(new)
        out.append(new)
    return out


def unique_ints(a: np.ndarray) -> np.ndarray:
    """``np.unique`` of an integer array, by sorting: numpy 2.x's hash-based ``np.unique`` took 22 s
    on 2.5 M distinct int64 values here, sorting 0.2 s (bench/RESULTS.md, "Display scale")."""
    s = np.sort(a)
    return s[np.r_[True, s[1:] != s[:-1]]] if len(s) else s


_PIECE = 1 << 20   # frames per piece of ``stack_functions``: its arrays stay near the cache


def stack_functions(fn: np.ndarray, lengths: np.ndarray, piece: int = _PIECE):
    """For stacks laid end to end (``fn``: a function id per frame, root first; ``lengths``: frames
    per stack), yield (function ids, stack rows) of every distinct (stack, function) pair: what a
    total counts, once per stack however often the function recurses. In pieces of whole stacks,
    each sorted as one integer per frame (row, function): the keys come mostly in order already,
    which numpy's stable sort runs through in about linear time."""
    if not len(fn):
        return
    bits = max(int(fn.max()).bit_length(), 1)
    mask = np.uint64((1 << bits) - 1)
    ends = np.cumsum(lengths)
    r0 = 0
    while r0 < len(lengths):
        a = int(ends[r0 - 1]) if r0 else 0
        r1 = min(int(np.searchsorted(ends, a + piece, "left")) + 1, len(lengths))
        b = int(ends[r1 - 1])
        if b > a:
            key = np.repeat(np.arange(r0, r1, dtype=np.uint64), lengths[r0:r1]) << np.uint64(bits)
            key |= fn[a:b].astype(np.uint64)
            key.sort(kind="stable")
            key = key[np.r_[True, key[1:] != key[:-1]]]
            yield (key & mask).astype(np.intp), (key >> np.uint64(bits)).astype(np.intp)
        r0 = r1


def _is_missing(v) -> bool:
    return v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v))


def _derive_threads(stacks: pd.DataFrame, order: Sequence[str] = ()) -> tuple[pd.DataFrame, np.ndarray]:
    """A thread table and per-row ids from stacks that carry thread labels (and maybe process and
    rank columns): one thread per distinct (label, process, rank), first seen first."""
    n = len(stacks)
    labels = stacks["thread"].astype(object).to_numpy() if n else np.zeros(0, dtype=object)
    procs = stacks["process"].astype(object).to_numpy() if "process" in stacks else np.full(n, None, object)
    ranks = stacks["rank"].astype(object).to_numpy() if "rank" in stacks else np.full(n, None, object)
    keys: dict[tuple, int] = {}
    rows: list[dict] = []
    for lab in order:
        k = (str(lab), None, None)
        if k not in keys:
            keys[k] = len(rows)
            rows.append({"label": str(lab), "process": None, "rank": None})
    ids = np.empty(n, dtype=np.int64)
    for i, (lab, proc, rank) in enumerate(zip(labels, procs, ranks)):
        proc = None if _is_missing(proc) else proc
        rank = None if _is_missing(rank) else rank
        k = (str(lab), proc, rank)
        tid = keys.get(k)
        if tid is None:
            bare = keys.get((str(lab), None, None))
            if bare is not None and rows[bare]["process"] is None and (proc is not None or rank is not None) \
                    and not any(r["label"] == str(lab) and (r["process"], r["rank"]) != (None, None) for r in rows):
                rows[bare].update(process=proc, rank=rank)  # a listed thread, now placed in its process
                keys[k] = tid = bare
            else:
                tid = keys[k] = len(rows)
                rows.append({"label": str(lab), "process": proc, "rank": rank})
        ids[i] = tid
    uniq = unique_labels([r["label"] for r in rows], [r["process"] if r["process"] is not None else r["rank"]
                                                        for r in rows])
    for r, lab in zip(rows, uniq):
        if lab != r["label"]:
            r["name"] = r["label"]
        r["label"] = lab
    return thread_table(rows), ids


def _normalise_threads(stacks: pd.DataFrame, threads) -> tuple[pd.DataFrame, np.ndarray]:
    """(thread table, thread id per stack row) from what a caller passed."""
    if threads is None:
        return _derive_threads(stacks)
    if not isinstance(threads, pd.DataFrame):
        threads = thread_table([t if isinstance(t, Mapping) else {"label": t} for t in threads])
    else:
        threads = threads.reset_index(drop=True)
        for c in THREAD_COLUMNS:
            if c not in threads:
                threads[c] = None
        threads = thread_table(threads.to_dict("records"))
    labels = threads["label"].tolist()
    if len(set(labels)) != len(labels):
        raise ValueError("thread labels must be unique within a profile")
    if not len(stacks):
        return threads, np.zeros(0, dtype=np.int64)
    col = stacks["thread"]
    if isinstance(col.dtype, pd.CategoricalDtype) and list(col.cat.categories) == labels:
        return threads, col.cat.codes.to_numpy(dtype=np.int64)
    if pd.api.types.is_integer_dtype(col.dtype):
        ids = col.to_numpy(dtype=np.int64)
        if len(ids) and (ids.min() < 0 or ids.max() >= len(labels)):
            raise ValueError(f"thread id out of range 0..{len(labels) - 1}")
        return threads, ids
    pos = {lab: i for i, lab in enumerate(labels)}
    vals = col.astype(object).to_numpy()
    missing = sorted({str(v) for v in vals if v not in pos})
    if missing:
        raise ValueError(f"stacks name threads that are not in the thread table: {missing[:5]}")
    return threads, np.fromiter((pos[v] for v in vals), dtype=np.int64, count=len(vals))


# -- the builder -------------------------------------------------------------------------------------
class StackBuilder:
    """Builds a Profile from frames, threads and samples; interns frames and (thread, stack) pairs.

    >>> b = StackBuilder()
    >>> f = b.frame("main", "app.py", 1, "python")
    >>> t = b.thread("MainThread", tid=7, pid=7, python=True)
    >>> b.add(b.stack(t, (f,)), samples=1, wall=0.01)
    >>> p = b.build(metric="wall", meta={"backend": "example"})
    """

    def __init__(self) -> None:
        self._frame_ids: dict[tuple, int] = {}
        self._frames: list[tuple] = []
        self._threads: list[dict] = []
        self._thread_ids: dict[str, int] = {}
        self._stack_ids: dict[tuple, int] = {}
        self._stack_thread: list[int] = []
        self._stack_frames: list[tuple] = []
        self._extra: dict[str, list] = {}
        self._agg: dict[str, list[float]] = {"samples": []}
        self._s_time: list[float] = []
        self._s_stack: list[int] = []
        self._s_weights: dict[str, list[float]] = {}
        self._s_extra: dict[str, list] = {}
        self._s_columns: dict[str, list[tuple[int, object]]] = {}  # name -> (first sample, values) chunks

    # -- frames, threads and stacks ------------------------------------------------------------
    def frame(self, name: str, file: str | None = None, line: int | None = None,
              kind: str = "other") -> int:
        key = (name, file or "", line, kind)
        fid = self._frame_ids.get(key)
        if fid is None:
            fid = len(self._frames)
            self._frame_ids[key] = fid
            self._frames.append(key)
        return fid

    def thread(self, label: str, **attrs) -> int:
        """The id of the thread labelled ``label``, created on first use; ``attrs`` (pid, tid, name,
        process, rank, backend, python) fill in what is known about it."""
        label = str(label)
        tid = self._thread_ids.get(label)
        if tid is None:
            tid = self._thread_ids[label] = len(self._threads)
            self._threads.append({"label": label})
        unknown = set(attrs) - set(THREAD_COLUMNS)
        if unknown:
            raise TypeError(f"unknown thread attribute(s): {', '.join(sorted(unknown))}")
        row = self._threads[tid]
        for k, v in attrs.items():
            if v is not None:
                row[k] = v
        return tid

    @property
    def threads(self) -> list[str]:
        return [t["label"] for t in self._threads]

    def stack(self, thread: int | str, frames: Sequence[int], **extra) -> int:
        """The row id of the (thread, stack[, extra columns]) pair, created on first use.
        ``thread`` is an id from ``thread()`` or a label (the thread is created if new)."""
        if not isinstance(thread, (int, np.integer)):
            thread = self.thread(thread)
        frames = tuple(frames)
        key = (thread, frames, tuple(sorted(extra.items()))) if extra else (thread, frames)
        sid = self._stack_ids.get(key)
        if sid is None:
            sid = len(self._stack_frames)
            self._stack_ids[key] = sid
            self._stack_thread.append(int(thread))
            self._stack_frames.append(frames)
            for col, vals in self._agg.items():
                vals.append(0)
            if extra or self._extra:
                for k in set(self._extra) | set(extra):
                    col = self._extra.get(k)
                    if col is None:   # not setdefault: its [None] * sid would cost O(rows) per new row
                        col = self._extra[k] = [None] * sid
                    col.append(extra.get(k))
        return sid

    # -- weights ---------------------------------------------------------------------------------
    def add(self, sid: int, samples: float = 1, time: float | None = None, columns: Mapping | None = None,
            **weights: float) -> None:
        """Add weight to a stack row. With ``time``, also record one time-ordered sample, with
        ``columns`` as per-sample values (a tid, an event name...)."""
        self._agg["samples"][sid] += samples
        for m, w in weights.items():
            col = self._agg.get(m)
            if col is None:
                col = self._agg[m] = [0.0] * len(self._stack_frames)
            col[sid] += w
        if time is not None:
            n = len(self._s_time)
            self._s_time.append(time)
            self._s_stack.append(sid)
            for m, w in weights.items():
                col = self._s_weights.get(m)
                if col is None:
                    col = self._s_weights[m] = [np.nan] * n
                col.append(w)
            for m, col in self._s_weights.items():
                if len(col) < n + 1:
                    col.append(np.nan)
            for k, v in (columns or {}).items():
                col = self._s_extra.get(k)
                if col is None:
                    col = self._s_extra[k] = [None] * n
                col.append(v)
            for k, col in self._s_extra.items():
                if len(col) < n + 1:
                    col.append(None)

    def sample_stacks(self) -> np.ndarray:
        """The stack row of every time-ordered sample added so far, in order."""
        return np.asarray(self._s_stack, dtype=np.int64)

    def sample_column(self, name: str, values) -> None:
        """A per-sample column for every time-ordered sample added so far, given at once (a recorder
        that derives it at the end instead of passing ``columns`` with each sample)."""
        if len(values) != len(self._s_time):
            raise ValueError(f"column {name!r} has {len(values)} values for {len(self._s_time)} samples")
        self._s_columns[name] = [(0, values)]

    def add_samples(self, sids, time=None, samples=None, columns: Mapping | None = None, **weights) -> None:
        """Many samples at once, as arrays aligned with ``sids`` (stack row ids). Counts (``samples``,
        default 1 each) and ``weights`` are summed per row as ``add`` does. With ``time``, each is also
        a time-ordered sample carrying its weights and ``columns``: per-sample values of any type (a
        state, a flag, a pid...), kept with their dtype."""
        sids = np.asarray(sids, dtype=np.int64)
        for name, values in (columns or {}).items():
            if len(values) != len(sids):
                raise ValueError(f"column {name!r} has {len(values)} values for {len(sids)} samples")
        n_rows = len(self._stack_frames)
        counts = np.ones(len(sids), dtype=np.int64) if samples is None else np.asarray(samples)
        per_row = np.bincount(sids, weights=counts, minlength=n_rows)
        integral = counts.dtype.kind in "iu"
        col = self._agg["samples"]
        for r in np.flatnonzero(per_row):
            col[r] += int(per_row[r]) if integral else float(per_row[r])
        for m, w in weights.items():
            col = self._agg.get(m)
            if col is None:
                col = self._agg[m] = [0.0] * n_rows
            sums = np.bincount(sids, weights=np.nan_to_num(np.asarray(w, dtype=np.float64)), minlength=n_rows)
            for r in np.flatnonzero(sums):
                col[r] += float(sums[r])
        if time is None:
            return
        n, k = len(self._s_time), len(sids)
        self._s_time.extend(np.asarray(time, dtype=np.float64).tolist())
        self._s_stack.extend(sids.tolist())
        for m in set(self._s_weights) | set(weights):
            col = self._s_weights.setdefault(m, [np.nan] * n)
            col.extend(np.asarray(weights[m], dtype=np.float64).tolist() if m in weights else [np.nan] * k)
        for k_, col in self._s_extra.items():   # per-sample columns of add(): None for these
            col.extend([None] * k)
        for name, values in (columns or {}).items():
            self._s_columns.setdefault(name, []).append((n, values))

    @staticmethod
    def _sample_column(chunks: list, n: int):
        """One per-sample column from its chunks; samples added without it hold None."""
        if chunks and chunks[0][0] == 0 and sum(len(v) for _, v in chunks) == n and all(
                a + len(v) == b for (a, v), (b, _) in zip(chunks, chunks[1:])):
            if len(chunks) == 1:
                return chunks[0][1]
            return pd.concat([pd.Series(v) for _, v in chunks], ignore_index=True)
        out = [None] * n
        for start, v in chunks:
            out[start:start + len(v)] = list(v)
        return pd.Series(out, dtype=object)

    # -- result ------------------------------------------------------------------------------------
    def rows(self) -> tuple[list, list, list]:
        """What has been added so far, as plain lists (no pandas: cheap to call once a second while
        another thread keeps adding): (frames as (name, file, line, kind), threads as dicts,
        rows as (thread id, frame ids, samples, wall, cpu))."""
        n, nf, nt = len(self._stack_frames), len(self._frames), len(self._threads)
        agg = self._agg
        cols = [agg.get(m) or [] for m in ("samples", "wall", "cpu")]
        rows = []
        for i in range(n):
            th, fr = self._stack_thread[i], self._stack_frames[i]
            if th < nt and all(f < nf for f in fr):
                rows.append((th, fr) + tuple(c[i] if i < len(c) else 0.0 for c in cols))
        return self._frames[:nf], [dict(t) for t in self._threads[:nt]], rows

    def frames_frame(self) -> pd.DataFrame:
        return make_frames([f[0] for f in self._frames], [f[1] for f in self._frames],
                           [f[2] for f in self._frames], [f[3] for f in self._frames])

    def build(self, metric: str | None = None, meta: Meta | Mapping | None = None, raw: Raw | None = None,
              unknown_metrics: Iterable[str] = (), metrics: Iterable[str] = ()) -> "Profile":
        """``unknown_metrics`` are metrics this source cannot know: they become NaN columns. ``metrics``
        are metrics it measured: a column of zeros when nothing was added to them."""
        n = len(self._stack_frames)
        stacks = {"thread": np.asarray(self._stack_thread, dtype=np.int64),
                  "stack": pd.Series(self._stack_frames, dtype=object)}
        counts = np.asarray(self._agg["samples"], dtype=np.float64) if n else np.zeros(0)
        whole = np.all(counts == np.round(counts)) and (not n or np.abs(counts).max() < 2.0 ** 53)
        stacks["samples"] = counts.astype(np.int64) if whole else counts   # huge counts stay float: no wrap
        for m, vals in self._agg.items():
            if m != "samples":
                stacks[m] = np.asarray(vals, dtype=np.float64)
        for m in unknown_metrics:
            stacks.setdefault(m, np.full(n, np.nan))
        for m in metrics:
            stacks.setdefault(m, np.zeros(n, dtype=np.int64 if m in INTEGER_METRICS else np.float64))
        for k, vals in self._extra.items():
            stacks[k] = pd.Series(vals + [None] * (n - len(vals)), dtype=object)
        samples = None
        if self._s_time:
            cols = {"time": np.asarray(self._s_time, dtype=np.float64),
                    "stack": np.asarray(self._s_stack, dtype=np.int64)}
            for m, vals in self._s_weights.items():
                cols[m] = np.asarray(vals, dtype=np.float64)
            for k, vals in self._s_extra.items():
                cols[k] = pd.Series(vals + [None] * (len(self._s_time) - len(vals)), dtype=object)
            samples = pd.DataFrame(cols)
            for name, chunks in self._s_columns.items():
                samples[name] = self._sample_column(chunks, len(samples))
        unknown = dict((meta or {}).get("unknown") or {})
        return Profile(self.frames_frame(), pd.DataFrame(stacks), samples, meta, raw, metric,
                       threads=thread_table(self._threads) if self._threads else thread_table([]),
                       unknown=unknown)


def make_frames(names, files, lines, kinds) -> pd.DataFrame:
    df = pd.DataFrame({
        "name": pd.Series(list(names), dtype=object),
        "file": pd.Series(["" if f is None else f for f in files], dtype=object),
        "line": pd.array(list(lines), dtype="Int64"),
        "kind": pd.Categorical(list(kinds), categories=KINDS),
    })
    df.index.name = "frame"
    return df


# -- the profile -----------------------------------------------------------------------------------
class Profile:
    """One profile; see docs/architecture.md, "The Profile contract".

    ``frames``: one row per frame id (name, file, line, kind). ``thread_table``: one row per thread
    id (label, name, pid, tid, process, rank, backend, python). ``stacks``: one row per distinct
    (thread, stack): ``thread`` (a categorical of labels whose codes are thread ids), ``stack``
    (frame ids, root first), ``samples`` and one column per metric; ``process`` and ``rank`` come
    from the thread table. ``samples``: time-ordered samples (``time``, ``stack`` row, weights), or
    None. A Profile is read-only: its attributes cannot be set, and its frames are FrozenFrames
    (reading works as usual; a derived frame, such as a copy or a groupby's result, is ordinary).
    """

    def __init__(self, frames: pd.DataFrame, stacks: pd.DataFrame, samples: pd.DataFrame | None = None,
                 meta: Meta | Mapping | None = None, raw: Raw | None = None, metric: str | None = None,
                 threads=None, unknown: Mapping | None = None):
        legacy_order = ()
        if meta is not None and not isinstance(meta, Meta) and meta.get("threads") and threads is None:
            legacy_order = [str(t) for t in meta["threads"]]
        stacks = stacks.reset_index(drop=True)
        if threads is None:
            table, ids = _derive_threads(stacks, legacy_order)
        else:
            table, ids = _normalise_threads(stacks, threads)
        labels = table["label"].tolist()
        st = stacks.drop(columns=[c for c in ("thread", "process", "rank") if c in stacks])
        st.insert(0, "thread", pd.Categorical.from_codes(ids, categories=pd.Index(labels, dtype=object))
                  if len(labels) else pd.Categorical([], categories=pd.Index([], dtype=object)))
        for c in ("process", "rank"):
            if table[c].notna().any():
                st[c] = table[c].to_numpy(dtype=object)[ids] if len(ids) else pd.Series([], dtype=object)
        if samples is not None:
            samples = samples.reset_index(drop=True)
            sid = samples["stack"].to_numpy(dtype=np.int64)
            if len(sid) and (sid.min() < 0 or sid.max() >= len(st)):
                raise ValueError("samples refer to stack rows that do not exist; use Profile.subset()")
            samples = samples.drop(columns=[c for c in ("thread",) if c in samples])
            samples.insert(1, "thread", st["thread"].take(sid).to_numpy() if len(sid) else
                           pd.Categorical([], categories=st["thread"].cat.categories))
            samples["thread"] = pd.Categorical(samples["thread"], categories=st["thread"].cat.categories)
        if "reason" in st:   # why off-CPU (reasons.py): one categorical, in stacks and samples alike
            st["reason"] = pd.Categorical(st["reason"], categories=REASONS)
        if samples is not None and "reason" in samples:
            samples["reason"] = pd.Categorical(samples["reason"], categories=REASONS)
        m = Meta.of(meta)
        if unknown:
            m = m.replace(unknown={**unknown, **m.unknown})
        for u in m.unknown:   # metrics known to be unmeasured are NaN columns, never missing
            if u in TIME_METRICS + MEMORY_METRICS and u not in st:
                st[u] = np.nan
        if metric is None:
            metric = next((x for x in ("wall", "cpu") + MEMORY_METRICS if x in st and st[x].notna().any()),
                          "samples")
        if metric not in METRICS:
            raise ValueError(f"unknown metric {metric!r}; expected one of {', '.join(METRICS)}")
        m = _derived_meta(m, st)
        for name, value in (("frames", frozen_frame(frames)), ("thread_table", frozen_frame(table)),
                            ("stacks", frozen_frame(st)), ("samples", frozen_frame(samples)), ("meta", m),
                            ("raw", raw), ("metric", metric)):
            object.__setattr__(self, name, value)

    def __setattr__(self, name, value):
        raise AttributeError(f"a Profile is read-only: Profile.replace({name}=...) makes a new one")

    def __delattr__(self, name):
        raise AttributeError(f"a Profile is read-only: {name} cannot be deleted")

    # -- basic facts -----------------------------------------------------------------------------
    @property
    def metrics(self) -> list[str]:
        """Metrics this profile really knows (NaN-only columns do not count; without rows, a column
        counts unless the metric is unknown: nothing leaked is still a measurement in bytes)."""
        out = ["samples"]
        empty = not len(self.stacks)
        for m in TIME_METRICS + MEMORY_METRICS:
            if m in self.stacks and (self.stacks[m].notna().any() or (empty and m not in self.meta.unknown)):
                out.append(m)
        if "wall" in out and "cpu" in out:
            out.insert(out.index("cpu") + 1, "off_cpu")
        return out

    @property
    def threads(self) -> list[str]:
        """Thread labels, in the thread table's order (threads without samples included)."""
        return self.thread_table["label"].tolist()

    def thread_ids(self) -> np.ndarray:
        """The thread id of every stack row."""
        return self.stacks["thread"].cat.codes.to_numpy(dtype=np.int64)

    def weights(self, metric: str | None = None) -> pd.Series:
        """One weight per stack row in ``metric``; off_cpu = wall − cpu."""
        metric = metric or self.metric
        if metric == "off_cpu":
            if "wall" not in self.stacks or "cpu" not in self.stacks:
                raise KeyError("off_cpu needs both wall and cpu; this profile has " + ", ".join(self.metrics))
            return (self.stacks["wall"] - self.stacks["cpu"]).clip(lower=0).rename("off_cpu")
        if metric not in self.stacks:
            raise KeyError(f"this profile has no {metric!r} metric; it has " + ", ".join(self.metrics))
        return self.stacks[metric]

    def total(self, metric: str | None = None) -> float:
        w = self.weights(metric)
        s = w.sum(min_count=1)
        if pd.isna(s):
            return float("nan")
        return int(s) if (metric or self.metric) in INTEGER_METRICS and float(s).is_integer() else float(s)

    @property
    def sample_count(self) -> int:
        return int(self.stacks["samples"].sum()) if len(self.stacks) else 0

    @property
    def is_empty(self) -> bool:
        """True when nothing was recorded: no weight in the primary metric and no samples.

        Deterministic profilers (cProfile) have no samples but do have time; they are not empty.
        """
        if self.sample_count:
            return False
        t = self.total()
        return not (t == t and t > 0)

    @property
    def duration(self) -> float | None:
        d = self.meta.get("duration")
        if d is not None:
            return float(d)
        if self.samples is not None and len(self.samples):
            return float(self.samples["time"].max() - self.samples["time"].min())
        return None

    def label(self, metric: str | None = None) -> str:
        """What ``metric`` means in this profile: ``meta["metric_labels"]`` overrides the generic label
        (in memray's leaks mode, "bytes" are the bytes still alive at the end)."""
        metric = metric or self.metric
        return self.meta.metric_labels.get(metric) or METRIC_LABELS.get(metric, metric)

    def describe(self) -> str:
        """A one-line honest label: metric, backend, rate, samples, duration."""
        m = self.meta
        backend = m.get("backend") or m.get("format") or "?"
        memory = self.metric in MEMORY_METRICS
        if memory and m.get("memray"):   # memray's version beside the backend that used it
            backend += f" {m['memray']}" if backend == "memray" else f" (memray {m['memray']})"
        parts = [self.label(), f"backend {backend}"]
        if m.get("memray") and not memory:   # memory recorded beside time
            parts.append(f"memory: memray {m['memray']}" + (f" ({m['memray_mode']})" if m.get("memray_mode") else ""))
        rate = m.get("rate")
        if rate and not memory and math.isfinite(float(rate)):
            parts.append(f"{float(rate):.4g} Hz")
        sampled = m.get("memory_sampling") or (m.get("memory") or {}).get("memory_sampling")
        if memory and sampled:   # profmagic's sampled tracker (formats/memsample.py)
            parts.append(f"{int(sampled['samples']):,} sampled allocations (estimated, not every one)")
        elif memory and "allocations" in self.stacks and self.stacks["allocations"].notna().any():
            parts.append(f"{int(self.stacks['allocations'].sum()):,} allocations (every one recorded, not sampled)")
        elif memory and m.get("memray_mode") == "aggregated":
            parts.append("aggregated while recording (no record of each allocation)")
        elif "calls" in self.stacks and not self.sample_count:
            parts.append(f"{int(self.stacks['calls'].sum()):,} calls (every call traced, not sampled)")
        else:
            parts.append(f"{self.sample_count:,} samples")
        d = self.duration
        if d is not None and math.isfinite(d):
            parts.append(f"{d:.3f} s")
        if m.get("approximate"):
            parts.append("approximate: " + str(m["approximate"]))
        return " · ".join(parts)

    # -- function table (sandwich) ----------------------------------------------------------------
    def function_ids(self) -> np.ndarray:
        """Function id per frame id: frames that share (name, file) are one function, numbered in
        the order of their first frame."""
        if not len(self.frames):
            return np.zeros(0, dtype=np.int64)
        name, names = pd.factorize(self.frames["name"], use_na_sentinel=False)
        file, files = pd.factorize(self.frames["file"], use_na_sentinel=False)
        codes, _ = pd.factorize(name.astype(np.int64) * max(len(files), 1) + file)
        out = np.full(int(self.frames.index.max()) + 1, -1, dtype=np.int64)
        out[self.frames.index.to_numpy()] = codes
        return out

    def functions(self, metric: str | None = None) -> pd.DataFrame:
        """One row per function on any stack (heaviest total first), indexed by a readable label:
        the function's name, with its file where two functions share a name.

        Columns: ``id`` (the function id of ``function_ids()``), ``name``, ``file``, ``self`` and
        ``total`` in ``metric``; when the profile measured both wall and CPU time, also ``wall``,
        ``cpu`` and ``off_cpu`` (totals) and ``self_wall``, ``self_cpu``, ``self_off_cpu``.
        Total counts once per stack even when the function recurses; self goes to the leaf.
        ``self_lo``, ``self_hi``, ``total_lo``, ``total_hi``: the 95% interval of self and total in
        ``metric`` (``profmagic.uncertainty``; equal to the figure where it is exact).
        """
        metric = metric or self.metric
        fn_of_frame = flatstacks.function_ids(self)
        f = flatstacks.flat(self)           # function id per frame (int32), stacks laid end to end
        fn, lengths = f.fn, f.lengths
        nfn = int(fn_of_frame.max()) + 1 if len(fn_of_frame) else 0
        both = "wall" in self.metrics and "cpu" in self.metrics
        names = list(dict.fromkeys([metric, *(("wall", "cpu", "off_cpu") if both else ())]))
        ws = [self.weights(m).to_numpy(dtype=np.float64) for m in names]
        totals = [np.zeros(nfn) for _ in names]
        present = np.zeros(nfn, dtype=bool)
        keep = uncertainty.kind(self, metric) == uncertainty.TIMED   # its intervals need every pair
        pairs = []
        for fs, rs in stack_functions(fn, lengths):    # (function, row) once per stack: one pass for all metrics
            for t, w in zip(totals, ws):
                t += np.bincount(fs, weights=w[rs], minlength=nfn)
            present[fs] = True
            if keep:
                pairs.append((fs, rs))
        leaf_rows, leaf_fn = f.leaves
        selfs = [np.bincount(leaf_fn, weights=w[leaf_rows], minlength=nfn) for w in ws]
        ids, first = np.unique(fn_of_frame[self.frames.index.to_numpy()], return_index=True)  # a function's first frame
        selfw, total = selfs[0], totals[0]
        out = pd.DataFrame({"id": ids, "name": self.frames["name"].to_numpy()[first],
                            "file": self.frames["file"].to_numpy()[first],
                            "self": selfw[ids], "total": total[ids]})
        if metric in INTEGER_METRICS and np.all(out["total"] == np.round(out["total"])):
            out["self"] = out["self"].astype(np.int64)
            out["total"] = out["total"].astype(np.int64)
        # 95% intervals from how the weights were sampled (profmagic.uncertainty, docs/uncertainty.md)
        bounds = uncertainty.function_intervals(self, metric, (leaf_rows, leaf_fn), pairs, selfw, total)
        for c, v in zip(("self_lo", "self_hi", "total_lo", "total_hi"), bounds):
            out[c] = v[ids]
        if both:
            for m in ("wall", "cpu", "off_cpu"):
                i = names.index(m)
                out[m] = totals[i][ids]
                out["self_" + m] = selfs[i][ids]
        out.index = pd.Index(_function_labels(out["name"], out["file"], ids), name="function")
        # Every function on some stack, even at 0 in this metric (a sleep has 0 s of CPU, not no row).
        out = out[present[ids]] if len(out) else out
        return out.sort_values(["total", "self"], ascending=False, kind="stable")

    # -- new profiles from this one ---------------------------------------------------------------
    def replace(self, **changes) -> "Profile":
        """A copy with some parts replaced. New ``stacks`` with other rows need new ``samples`` too
        (or use ``subset``): samples refer to stack rows by position."""
        if "meta" in changes and not isinstance(changes["meta"], Meta):
            changes["meta"] = Meta.of(changes["meta"])
        kw = dict(frames=self.frames, stacks=self.stacks, samples=self.samples, meta=self.meta,
                  raw=self.raw, metric=self.metric, threads=self.thread_table)
        if "stacks" in changes and "samples" not in changes and self.samples is not None \
                and len(changes["stacks"]) != len(self.stacks):
            raise ValueError("new stacks with other rows leave the samples stale: pass samples= too, "
                             "or use Profile.subset(rows)")
        if "stacks" in changes and "threads" not in changes:
            new = changes["stacks"]
            col = new["thread"] if "thread" in new else None
            same = col is not None and isinstance(col.dtype, pd.CategoricalDtype) \
                and list(col.cat.categories) == self.threads
            if not same and col is not None and not pd.api.types.is_integer_dtype(col.dtype):
                changes["threads"] = _table_for_labels(self.thread_table, new)
        kw.update(changes)
        if "stacks" in changes:
            _check_columns(changes["stacks"])
        same = "frames" not in changes and "stacks" in changes \
            and len(changes["stacks"]) == len(self.stacks) \
            and np.shares_memory(changes["stacks"]["stack"].to_numpy(), self.stacks["stack"].to_numpy())
        if ("stacks" in changes or "frames" in changes) and not same:   # new frame ids: check them
            _check_stacks(kw["frames"], kw["stacks"])
        return Profile(**kw)

    def with_meta(self, **changes) -> "Profile":
        return self.replace(meta=self.meta.replace(**changes))

    def subset(self, rows, *, drop_threads: bool = False) -> "Profile":
        """The stack rows ``rows`` (a boolean mask or row positions), with the time-ordered samples
        of those rows renumbered. With ``drop_threads``, threads left without rows leave the table."""
        idx = np.asarray(rows)
        if idx.dtype == bool:
            idx = np.flatnonzero(idx)
        idx = idx.astype(np.int64)
        st = self.stacks.iloc[idx].reset_index(drop=True)
        samples = self.samples
        if samples is not None:
            new_pos = np.full(len(self.stacks), -1, dtype=np.int64)
            new_pos[idx] = np.arange(len(idx))
            mapped = new_pos[samples["stack"].to_numpy(dtype=np.int64)]
            keep = mapped >= 0
            samples = samples[keep].assign(stack=mapped[keep]).reset_index(drop=True)
        table = self.thread_table
        ids = st["thread"].cat.codes.to_numpy(dtype=np.int64)
        if drop_threads:
            present = np.unique(ids)
            remap = np.full(len(table), -1, dtype=np.int64)
            remap[present] = np.arange(len(present))
            table = table.iloc[present].reset_index(drop=True)
            ids = remap[ids]
        st = st.assign(thread=ids)
        return Profile(self.frames, st, samples, self.meta, self.raw, self.metric, threads=table)

    def chain(self, hops: int = 4) -> pd.DataFrame:
        """Who the cell's thread waited on, and what they did (profmagic/waits.py)."""
        from . import waits
        return waits.chain(self, hops)

    def __repr__(self) -> str:
        return f"<Profile {self.describe()}; {len(self.threads)} thread(s), {len(self.frames)} frames>"


def _check_columns(stacks: pd.DataFrame) -> None:
    missing = [c for c in ("thread", "stack", "samples") if c not in stacks]
    if missing:
        raise ValueError(f"stacks need the column(s) {', '.join(missing)}")


def _check_stacks(frames: pd.DataFrame, stacks: pd.DataFrame) -> None:
    """New stacks (or frames) given to ``replace`` fit together: the columns a Profile needs, and
    every frame id of every stack a row of ``frames`` (``replace`` checked the columns)."""
    col = stacks["stack"].to_numpy()
    n = sum(map(len, col))
    fids = np.fromiter(itertools.chain.from_iterable(col), dtype=np.int64, count=n)
    if not n:
        return
    ids = frames.index.to_numpy()
    if len(ids) and ids[0] == 0 and ids[-1] == len(ids) - 1 and (np.diff(ids) == 1).all():   # 0..n-1: the usual
        if fids.min() >= 0 and fids.max() < len(ids):
            return
    fids = unique_ints(fids)
    unknown = fids[~np.isin(fids, ids)]
    if len(unknown):
        raise ValueError(f"stacks refer to frame ids that are not in frames: {unknown[:5].tolist()}")


def _derived_meta(m: Meta, stacks: pd.DataFrame) -> Meta:
    """Meta's figures that follow from the stacks, recomputed so that none goes stale after a
    ``subset`` or ``replace``: ``sample_count`` and ``cell_thread_samples`` (the samples of the
    thread that ran the cell)."""
    changes = {}
    n = len(stacks)
    if "sample_count" in m.extra:
        changes["sample_count"] = int(stacks["samples"].sum()) if n else 0
    if "cell_thread_samples" in m.extra:
        rows = (stacks["thread"] == m.cell_thread).to_numpy() if n and m.cell_thread is not None else []
        changes["cell_thread_samples"] = int(stacks["samples"].to_numpy()[rows].sum()) if n else 0
    if all(m.extra.get(k) == v for k, v in changes.items()):
        return m
    return m.replace(**changes)


def _table_for_labels(table: pd.DataFrame, stacks: pd.DataFrame) -> pd.DataFrame:
    """The thread table for stacks whose ``thread`` column holds labels: this profile's rows for
    labels it knows, new rows (label only) for the others."""
    labels = table["label"].tolist()
    known = set(labels)
    extra = [str(x) for x in pd.unique(stacks["thread"].astype(object)) if str(x) not in known]
    if not extra:
        return table
    rows = table.reset_index(drop=True).to_dict("records") + [{"label": x} for x in extra]
    return thread_table(rows)


def _function_labels(names, files, ids) -> list[str]:
    """A readable, unique label per function: its name; "name (file)" where names repeat; and
    "name (file) #id" where even that repeats."""
    names = [str(n) for n in names]
    count: dict[str, int] = {}
    for n in names:
        count[n] = count.get(n, 0) + 1
    out = []
    for n, f in zip(names, files):
        if count[n] == 1:
            out.append(n)
        else:
            parts = [x for x in str(f or "").replace("\\", "/").split("/") if x]
            out.append(f"{n} ({'/'.join(parts[-2:]) or '?'})")
    again: dict[str, int] = {}
    for lab in out:
        again[lab] = again.get(lab, 0) + 1
    return [lab if again[lab] == 1 else f"{lab} #{i}" for lab, i in zip(out, ids)]

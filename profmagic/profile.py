"""The model: frames, stacks, time-ordered samples, meta and the raw capture.

Knows pandas and numpy. Knows no profiler, no plotly and no IPython.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

KINDS = ("python", "native", "kernel", "other")
TIME_METRICS = ("wall", "cpu")
METRICS = ("samples", "wall", "cpu", "off_cpu")
METRIC_LABELS = {
    "samples": "samples",
    "wall": "wall time (s)",
    "cpu": "CPU time (s)",
    "off_cpu": "off-CPU time (s) = wall − cpu",
}


@dataclass
class Raw:
    """What the profiler wrote, kept as it was.

    ``data`` holds the bytes; for a capture too large to keep in memory, ``data`` is
    None and ``path`` points to the file on disk.
    """
    data: bytes | None
    format: str
    path: str | None = None
    filename: str | None = None  # a suggested download name

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


class StackBuilder:
    """Builds a Profile from frames and samples; interns frames and (thread, stack) pairs.

    >>> b = StackBuilder()
    >>> f = b.frame("main", "app.py", 1, "python")
    >>> s = b.stack("MainThread", (f,))
    >>> b.add(s, samples=1, wall=0.01)
    >>> p = b.build(metric="wall", meta={"backend": "example"})
    """

    def __init__(self) -> None:
        self._frame_ids: dict[tuple, int] = {}
        self._frames: list[tuple] = []
        self._stack_ids: dict[tuple, int] = {}
        self._stack_thread: list[str] = []
        self._stack_frames: list[tuple] = []
        self._extra: dict[str, list] = {}
        # Aggregated weights per stack row.
        self._agg: dict[str, list[float]] = {"samples": []}
        # Time-ordered samples (optional).
        self._s_time: list[float] = []
        self._s_stack: list[int] = []
        self._s_weights: dict[str, list[float]] = {}
        self._s_columns: dict[str, list[tuple[int, object]]] = {}  # name -> (first sample, values) chunks
        self.threads: list[str] = []  # ordered, includes threads that have no samples
        self._thread_set: set[str] = set()

    # -- frames and stacks ---------------------------------------------------
    def frame(self, name: str, file: str | None = None, line: int | None = None,
              kind: str = "other") -> int:
        key = (name, file or "", line, kind)
        fid = self._frame_ids.get(key)
        if fid is None:
            fid = len(self._frames)
            self._frame_ids[key] = fid
            self._frames.append(key)
        return fid

    def thread(self, name: str) -> str:
        if name not in self._thread_set:
            self._thread_set.add(name)
            self.threads.append(name)
        return name

    def stack(self, thread: str, frames: Sequence[int], **extra) -> int:
        """The row id of the (thread, stack[, extra columns]) pair, created on first use."""
        frames = tuple(frames)
        key = (thread, frames, tuple(sorted(extra.items()))) if extra else (thread, frames)
        sid = self._stack_ids.get(key)
        if sid is None:
            sid = len(self._stack_frames)
            self._stack_ids[key] = sid
            self.thread(thread)
            self._stack_thread.append(thread)
            self._stack_frames.append(frames)
            for col, vals in self._agg.items():
                vals.append(0.0 if col != "samples" else 0)
            if extra or self._extra:
                for k in set(self._extra) | set(extra):
                    self._extra.setdefault(k, [None] * sid).append(extra.get(k))
        return sid

    # -- weights ---------------------------------------------------------------
    def add(self, sid: int, samples: float = 1, time: float | None = None, **weights: float) -> None:
        """Add weight to a stack row. With ``time``, also record one time-ordered sample."""
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

    def add_samples(self, sids, time=None, samples=None, columns: dict | None = None, **weights) -> None:
        """Many samples at once, as arrays aligned with ``sids`` (stack row ids). Counts (``samples``,
        default 1 each) and ``weights`` are summed per row as ``add`` does. With ``time``, each is also
        a time-ordered sample carrying its weights and ``columns``: per-sample values of any type
        (a state, a flag, a pid...), kept with their dtype."""
        sids = np.asarray(sids, dtype=np.int64)
        for name, values in (columns or {}).items():
            if len(values) != len(sids):
                raise ValueError(f"column {name!r} has {len(values)} values for {len(sids)} samples")
        n_rows = len(self._stack_frames)
        counts = np.ones(len(sids), dtype=np.int64) if samples is None else np.asarray(samples)
        per_row = np.bincount(sids, weights=counts, minlength=n_rows)
        rows = np.flatnonzero(per_row)
        integral = counts.dtype.kind in "iu"
        col = self._agg["samples"]
        for r in rows:
            col[r] += int(per_row[r]) if integral else float(per_row[r])
        for m, w in weights.items():
            w = np.asarray(w, dtype=np.float64)
            col = self._agg.get(m)
            if col is None:
                col = self._agg[m] = [0.0] * n_rows
            sums = np.bincount(sids, weights=np.nan_to_num(w), minlength=n_rows)
            for r in np.flatnonzero(sums):
                col[r] += float(sums[r])
        if time is None:
            return
        n = len(self._s_time)
        k = len(sids)
        self._s_time.extend(np.asarray(time, dtype=np.float64).tolist())
        self._s_stack.extend(sids.tolist())
        for m in set(self._s_weights) | set(weights):
            col = self._s_weights.setdefault(m, [np.nan] * n)
            col.extend(np.asarray(weights[m], dtype=np.float64).tolist() if m in weights else [np.nan] * k)
        for name, values in (columns or {}).items():
            self._s_columns.setdefault(name, []).append((n, values))

    def _sample_column(self, chunks: list, n: int):
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

    # -- result -------------------------------------------------------------
    def frames_frame(self) -> pd.DataFrame:
        return make_frames(
            [f[0] for f in self._frames], [f[1] for f in self._frames],
            [f[2] for f in self._frames], [f[3] for f in self._frames])

    def build(self, metric: str | None = None, meta: dict | None = None, raw: Raw | None = None,
              unknown_metrics: Iterable[str] = ()) -> "Profile":
        """``unknown_metrics`` are time metrics this source cannot know: they become NaN columns."""
        stacks = {
            "thread": pd.Series(self._stack_thread, dtype=object),
            "stack": pd.Series(self._stack_frames, dtype=object),
        }
        samples_col = np.asarray(self._agg["samples"]) if self._stack_frames else np.zeros(0, np.int64)
        if samples_col.dtype.kind == "f" and np.all(samples_col == np.round(samples_col)):
            samples_col = samples_col.astype(np.int64)
        stacks["samples"] = samples_col
        for m, vals in self._agg.items():
            if m != "samples":
                stacks[m] = np.asarray(vals, dtype=np.float64)
        for m in unknown_metrics:
            stacks.setdefault(m, np.full(len(self._stack_frames), np.nan))
        for k, vals in self._extra.items():
            vals = vals + [None] * (len(self._stack_frames) - len(vals))
            stacks[k] = pd.Series(vals, dtype=object)
        stacks_df = pd.DataFrame(stacks)
        samples_df = None
        if self._s_time:
            cols = {"time": np.asarray(self._s_time, dtype=np.float64),
                    "stack": np.asarray(self._s_stack, dtype=np.int64)}
            cols["thread"] = stacks_df["thread"].to_numpy()[cols["stack"]]
            for m, vals in self._s_weights.items():
                cols[m] = np.asarray(vals, dtype=np.float64)
            samples_df = pd.DataFrame(cols)
            for name, chunks in self._s_columns.items():
                samples_df[name] = self._sample_column(chunks, len(samples_df))
        meta = dict(meta or {})
        meta.setdefault("threads", list(self.threads))
        return Profile(self.frames_frame(), stacks_df, samples_df, meta, raw, metric)


def make_frames(names, files, lines, kinds) -> pd.DataFrame:
    df = pd.DataFrame({
        "name": pd.Series(list(names), dtype=object),
        "file": pd.Series(["" if f is None else f for f in files], dtype=object),
        "line": pd.array(list(lines), dtype="Int64"),
        "kind": pd.Categorical(list(kinds), categories=KINDS),
    })
    df.index.name = "frame"
    return df


class Profile:
    """One profile: see ARCHITECTURE.md, "The model"."""

    def __init__(self, frames: pd.DataFrame, stacks: pd.DataFrame, samples: pd.DataFrame | None = None,
                 meta: dict | None = None, raw: Raw | None = None, metric: str | None = None):
        self.frames = frames
        self.stacks = stacks.reset_index(drop=True)
        self.samples = samples
        self.meta = dict(meta or {})
        self.raw = raw
        if metric is None:
            metric = next((m for m in ("wall", "cpu") if m in stacks and stacks[m].notna().any()), "samples")
        if metric not in METRICS:
            raise ValueError(f"unknown metric {metric!r}; expected one of {', '.join(METRICS)}")
        self.metric = metric
        self.meta.setdefault("metric", metric)

    # -- basic facts -----------------------------------------------------------
    @property
    def metrics(self) -> list[str]:
        """Metrics this profile really knows (NaN-only columns do not count)."""
        out = ["samples"]
        for m in TIME_METRICS:
            if m in self.stacks and self.stacks[m].notna().any():
                out.append(m)
        if "wall" in out and "cpu" in out:
            out.append("off_cpu")
        return out

    @property
    def threads(self) -> list[str]:
        seen = list(self.meta.get("threads") or [])
        present = set(seen)
        for t in pd.unique(self.stacks["thread"]):
            if t not in present:
                seen.append(t)
                present.add(t)
        return seen

    def weights(self, metric: str | None = None) -> pd.Series:
        """One weight per stack row in ``metric``; off_cpu = wall − cpu."""
        metric = metric or self.metric
        if metric == "off_cpu":
            if "wall" not in self.stacks or "cpu" not in self.stacks:
                raise KeyError("off_cpu needs both wall and cpu; this profile has "
                               + ", ".join(self.metrics))
            return (self.stacks["wall"] - self.stacks["cpu"]).clip(lower=0).rename("off_cpu")
        if metric not in self.stacks:
            raise KeyError(f"this profile has no {metric!r} metric; it has " + ", ".join(self.metrics))
        return self.stacks[metric]

    def total(self, metric: str | None = None) -> float:
        w = self.weights(metric)
        s = w.sum(min_count=1)
        if pd.isna(s):
            return float("nan")
        return int(s) if (metric or self.metric) == "samples" and float(s).is_integer() else float(s)

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

    def describe(self) -> str:
        """A one-line honest label: metric, backend, rate, samples, duration."""
        m = self.meta
        parts = [METRIC_LABELS.get(self.metric, self.metric), f"backend {m.get('backend', m.get('format', '?'))}"]
        rate = m.get("rate")
        if rate:
            parts.append(f"{float(rate):.4g} Hz")
        if "calls" in self.stacks and not self.sample_count:
            parts.append(f"{int(self.stacks['calls'].sum()):,} calls (every call traced, not sampled)")
        else:
            parts.append(f"{self.sample_count:,} samples")
        d = self.duration
        if d is not None:
            parts.append(f"{d:.3f} s")
        if m.get("approximate"):
            parts.append("approximate: " + str(m["approximate"]))
        return " · ".join(parts)

    # -- function table (sandwich) ------------------------------------------------
    def _exploded(self):
        """(row index per entry, frame id per entry, position in stack) for every frame of every stack."""
        stacks = self.stacks["stack"].to_numpy()
        lengths = np.fromiter((len(s) for s in stacks), dtype=np.int64, count=len(stacks))
        rows = np.repeat(np.arange(len(stacks), dtype=np.int64), lengths)
        if lengths.sum():
            fids = np.fromiter((f for s in stacks for f in s), dtype=np.int64, count=int(lengths.sum()))
        else:
            fids = np.zeros(0, dtype=np.int64)
        return rows, fids, lengths

    def function_ids(self) -> np.ndarray:
        """Function id per frame id: frames that share (name, file) are one function."""
        if not len(self.frames):
            return np.zeros(0, dtype=np.int64)
        codes = self.frames.groupby(["name", "file"], sort=False, dropna=False).ngroup().to_numpy()
        out = np.full(int(self.frames.index.max()) + 1, -1, dtype=np.int64)
        out[self.frames.index.to_numpy()] = codes
        return out

    def functions(self, metric: str | None = None) -> pd.DataFrame:
        """One row per function on any stack: name, file, self, total (heaviest total first).

        Total counts once per stack even when the function recurses; self goes to the leaf.
        """
        metric = metric or self.metric
        w = self.weights(metric).to_numpy(dtype=np.float64)
        fn_of_frame = self.function_ids()
        rows, fids, lengths = self._exploded()
        nfn = int(fn_of_frame.max()) + 1 if len(fn_of_frame) else 0
        total = np.zeros(nfn)
        selfw = np.zeros(nfn)
        present = np.zeros(nfn, dtype=bool)
        if len(fids):
            fn = fn_of_frame[fids]
            pair = np.unique(rows * nfn + fn)  # one entry per (row, function)
            np.add.at(total, pair % nfn, w[pair // nfn])
            present[pair % nfn] = True
            nonempty = lengths > 0
            ends = np.cumsum(lengths)[nonempty] - 1
            np.add.at(selfw, fn[ends], w[nonempty])
        first = self.frames.groupby(fn_of_frame[self.frames.index.to_numpy()], sort=True).head(1)
        first = first.assign(_fn=fn_of_frame[first.index.to_numpy()]).set_index("_fn").sort_index()
        out = pd.DataFrame({
            "name": first["name"].to_numpy(),
            "file": first["file"].to_numpy(),
            "self": selfw[first.index.to_numpy()],
            "total": total[first.index.to_numpy()],
        }, index=pd.Index(first.index.to_numpy(), name="function"))
        if metric == "samples" and np.all(out["total"] == np.round(out["total"])):
            out["self"] = out["self"].astype(np.int64)
            out["total"] = out["total"].astype(np.int64)
        # Every function on some stack, even at 0 in this metric (a sleep has 0 s of CPU, not no row).
        out = out[present[out.index.to_numpy()]] if len(out) else out
        return out.sort_values(["total", "self"], ascending=False, kind="stable")

    @staticmethod
    def concat(profiles, key: str = "rank", labels=None) -> "Profile":
        """Merge per-process profiles into one, keeping which process each stack came from."""
        from .multi import concat
        return concat(profiles, key=key, labels=labels)

    # -- exports ---------------------------------------------------------------
    def to_speedscope(self) -> dict:
        from .formats import speedscope
        return speedscope.to_dict(self)

    def to_folded(self, metric: str | None = None) -> str:
        from .formats import folded
        return folded.write_text(self, metric=metric)

    def save(self, path: str | os.PathLike) -> str:
        """Write by extension: .folded/.txt → folded; anything else → speedscope JSON."""
        from .formats import write_by_name
        return write_by_name(self, os.fspath(path))

    # -- views (plotly; imported lazily so the model does not depend on them) ---------
    def icicle(self, metric: str | None = None, thread: str | None = None, **kw):
        from .views import icicle
        return icicle.figure(self, metric=metric, thread=thread, **kw)

    def sandwich(self, function: str | None = None, metric: str | None = None, **kw):
        from .views import sandwich
        return sandwich.figure(self, function=function, metric=metric, **kw)

    def timeline(self, **kw):
        from .views import timeline
        return timeline.figure(self, **kw)

    # -- display -------------------------------------------------------------
    def _repr_mimebundle_(self, include=None, exclude=None):
        try:
            from . import report
        except ImportError:  # the report is optional at this layer
            return {"text/plain": repr(self)}
        return report.mimebundle(self)

    def __repr__(self) -> str:
        return f"<Profile {self.describe()}; {len(self.threads)} thread(s), {len(self.frames)} frames>"

    # -- helpers for readers and transforms ------------------------------------------
    def replace(self, **changes) -> "Profile":
        kw = dict(frames=self.frames, stacks=self.stacks, samples=self.samples, meta=dict(self.meta),
                  raw=self.raw, metric=self.metric)
        kw.update(changes)
        return Profile(**kw)

    def frame_label(self, fid: int) -> str:
        return str(self.frames.at[fid, "name"])

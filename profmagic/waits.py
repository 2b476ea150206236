"""Who a thread waited on: off-CPU intervals with their reason and waker, and the wait chain.

``waits(p)`` is a pandas frame, one row per (thread, reason, function, waker, waker function,
ended): the off-CPU seconds (``wall - cpu`` of the samples) and their share of the cell's wall.
``function`` is the leafmost Python frame of the stack the thread waited in (a private helper
called from its own file gives way to its caller there: ``_stack_functions``), else its leafmost
native frame, else its leaf; ``waker_function`` the same of the waker's stack at the wakeup.
``waker`` is a thread label of the profile, or ``COMM (pid P)`` for another process (perf
``--system``); ``ended`` says how the wait ended: ``thread``/``process`` (a waker), ``timeout``,
``signal``, ``interrupt``, or empty where no wakeup was recorded.

``chain(p)`` follows the cell's largest waits: start at the cell's thread (``meta.cell_thread``,
else the thread with the most wall), take its largest wait, by reason and by who ended it (a thread
of the profile, or other processes as one: a lock that several processes hand over in turn is one
wait), go to the waker that ended most of it, and say what that thread was doing: its own CPU (the
end of the chain) or its own largest wait; at most ``HOPS`` hops. Each hop has its share of the
cell's wall, the reason, the functions it waited in (each holding ``FUNCTION_SHARE`` of it, joined
by " / ") and the function the waker was in. ``sentence(p)`` states the chain in one line.

Only perf ``--mode both`` records wakers (formats/perf_sched.py); other backends give the waits
and reasons with no waker (``has_wakers`` says which).
"""
from __future__ import annotations

import sys
import types

import numpy as np
import pandas as pd

from . import reasons
from .derived import memo

HOPS = 4
OTHERS = "\0other processes"   # chain(): other processes' wakers, one wait
FUNCTION_SHARE = 0.25         # chain(): a hop names each function holding this share of its wait
NO_WAKERS = "wakers need `--backend perf --mode both` (without `--lean-switches`)"
COLUMNS = ["thread", "reason", "function", "waker", "waker_function", "ended", "seconds", "share"]


def has_reasons(p) -> bool:
    """A profile whose backend gives reasons, with both clocks (perf --mode both/wall, eu-stack, the
    sampler): its report has a Waits tab even when nothing waited, so the tabs do not come and go
    between runs of one cell."""
    sm = p.samples
    return sm is not None and len(sm) > 0 and "reason" in sm and "wall" in sm and "cpu" in sm


def has_wakers(p) -> bool:
    sm = p.samples
    return sm is not None and "ended" in sm and bool(sm["ended"].notna().any())


def cell_wall(p) -> float:
    """The cell's wall time: the recording's duration, else its longest thread."""
    d = p.duration
    if d:
        return float(d)
    sm = p.samples
    if sm is None or not len(sm) or "wall" not in sm:
        return 0.0
    return float(sm.groupby("thread", observed=True)["wall"].sum().max())


def _kinds(p) -> dict:
    return dict(zip(p.frames["name"], p.frames["kind"]))


def _pick(names: list, kinds: dict) -> str | None:
    """The leafmost Python frame of a root-first list of names, else the leafmost native, else the leaf."""
    names = [n for n in names if n]
    for want in ("python", "native"):
        for n in reversed(names):
            if kinds.get(n) == want:
                return n
    return names[-1] if names else None


def _private(name: str) -> bool:
    last = name.rsplit(".", 1)[-1]
    return last.startswith("_") and not (last.startswith("__") and last.endswith("__"))


def _stack_functions(p) -> np.ndarray:
    """Per stacks row: the function it waited in (_pick). A Python function that is a private helper
    (``Engine._wait``) called from its own file names its caller there instead: the call the user
    made (``Tensor.result``), not the library's internals; one called from another file (a thread's
    ``_loop`` that threading's ``Thread.run`` called) is the user's own and keeps its name."""
    names = p.frames["name"].to_numpy()
    kinds = p.frames["kind"].to_numpy()
    files = p.frames["file"].to_numpy() if "file" in p.frames else np.full(len(names), None, dtype=object)
    out = []
    for frames in p.stacks["stack"]:
        fn = None
        py = [f for f in frames if kinds[f] == "python" and names[f]]
        if py:
            k = len(py) - 1
            while k and _private(names[py[k]]) and files[py[k]] and files[py[k - 1]] == files[py[k]]:
                k -= 1
            fn = names[py[k]]
        else:
            for f in reversed(frames):
                if kinds[f] == "native" and names[f]:
                    fn = names[f]
                    break
        out.append(fn if fn else (names[frames[-1]] if len(frames) else None))
    return np.asarray(out, dtype=object)


def waits(p) -> pd.DataFrame:
    """Off-CPU seconds by thread, reason, function, waker, waker function and how the wait ended,
    largest first (module docstring); computed once per profile (the header, the tab and the static
    block all ask; each caller gets its own copy)."""
    return memo(p, "waits", lambda: _waits(p)).copy()


def _waits(p) -> pd.DataFrame:
    sm = p.samples
    if sm is None or not len(sm) or "wall" not in sm or "cpu" not in sm:
        return pd.DataFrame(columns=COLUMNS)
    off = (sm["wall"] - sm["cpu"]).to_numpy(dtype=np.float64)
    keep = off > 0
    if "reason" in sm:
        keep &= (sm["reason"].astype(object) != reasons.CPU).to_numpy()
    sm = sm[keep]
    fn = _stack_functions(p)[sm["stack"].to_numpy()]
    kinds = _kinds(p)
    cache: dict = {}

    def waker_fn(s):
        if not isinstance(s, tuple):
            return None
        hit = cache.get(s)
        if hit is None:
            hit = cache[s] = _pick(list(s), kinds) or ""
        return hit or None
    col = (lambda c: sm[c].astype(object).where(sm[c].notna(), None).to_numpy() if c in sm
           else np.full(len(sm), None, dtype=object))
    df = pd.DataFrame({
        "thread": sm["thread"].astype(str).to_numpy(),
        "reason": sm["reason"].astype(str).to_numpy() if "reason" in sm else reasons.UNKNOWN,
        "function": fn,
        "waker": col("woken_by"),
        "waker_function": [waker_fn(s) for s in col("waker_stack")],
        "ended": col("ended"),
        "seconds": off[keep],
    })
    keys = COLUMNS[:6]
    out = (df.fillna({k: "" for k in keys}).groupby(keys, sort=False)["seconds"].sum().reset_index()
           .sort_values("seconds", ascending=False, kind="stable").reset_index(drop=True))
    wall = cell_wall(p)
    out["share"] = out["seconds"] / wall if wall else np.nan
    return out


def _start(p) -> str | None:
    t = p.meta.get("cell_thread") if hasattr(p.meta, "get") else None
    if t is not None and t in set(p.threads):
        return t
    sm = p.samples
    if sm is None or not len(sm):
        return None
    return str(sm.groupby("thread", observed=True)["wall"].sum().idxmax())


def _cpu_of(p, thread: str) -> tuple[float, str | None]:
    """A thread's CPU seconds and the function most of it went to (leafmost Python frame)."""
    sm = p.samples
    rows = sm[(sm["thread"].astype(str) == thread).to_numpy()]
    if not len(rows):
        return 0.0, None
    fn = _stack_functions(p)[rows["stack"].to_numpy()]
    by = pd.Series(rows["cpu"].to_numpy(dtype=np.float64)).groupby(fn).sum()
    return float(by.sum()), (str(by.idxmax()) if len(by) and by.max() > 0 else None)


def chain(p, hops: int = HOPS) -> pd.DataFrame:
    """The wait chain (``_chain``), once per profile and number of hops."""
    return memo(p, ("chain", hops), lambda: _chain(p, hops)).copy()


def _chain(p, hops: int) -> pd.DataFrame:
    """The wait chain from the cell's thread (module docstring): one row per hop, with ``thread``,
    ``doing`` (``wait`` or ``cpu``), ``reason``, ``function``, ``waker``, ``waker_function``,
    ``ended``, ``seconds`` and ``share`` of the cell's wall."""
    cols = ["thread", "doing", "reason", "function", "waker", "waker_function", "ended", "seconds", "share"]
    w = waits(p)
    wall = cell_wall(p)
    rows: list[dict] = []
    thread, seen = _start(p), set()
    threads = set(p.threads)
    while thread is not None and len(rows) < hops and thread not in seen:
        seen.add(thread)
        mine = w[(w["thread"] == thread) & (w["reason"] != reasons.CORE)]
        # The largest wait is by reason and by who ended it: a thread, or other processes as one (a
        # lock that several processes hand over in turn is one wait); its waker is the one that
        # ended most of it, its function those holding at least FUNCTION_SHARE of it.
        key = mine["waker"].where(mine["waker"].isin(threads) | (mine["waker"] == ""), OTHERS)
        by_wait = mine.groupby([mine["reason"], key], sort=False)["seconds"].sum()
        cpu, cpu_fn = _cpu_of(p, thread)
        top = by_wait.idxmax() if len(by_wait) else None
        if top is None or (rows and cpu >= by_wait.max()):
            rows.append(dict(thread=thread, doing="cpu", reason=reasons.CPU, function=cpu_fn, waker="",
                             waker_function="", ended="", seconds=cpu))
            break
        reason, who = top
        same = mine[((mine["reason"] == reason) & (key == who)).to_numpy()]
        fns = same.groupby("function", sort=False)["seconds"].sum().sort_values(ascending=False, kind="stable")
        function = " / ".join(str(f) for f in fns.index[(fns >= FUNCTION_SHARE * fns.sum()).to_numpy()][:3])
        waker = str(same.groupby("waker", sort=False)["seconds"].sum().idxmax())
        part = same[same["waker"] == waker]
        wf = part.groupby("waker_function")["seconds"].sum()
        ended = part.groupby("ended")["seconds"].sum()
        rows.append(dict(thread=thread, doing="wait", reason=reason, function=function, waker=waker,
                         waker_function=str(wf.idxmax()) if len(wf) else "",
                         ended=str(ended.idxmax()) if len(ended) else "", seconds=float(by_wait.max())))
        thread = waker if waker in threads else None
        if waker and waker not in threads and len(rows) < hops:   # another process: the chain ends there
            rows.append(dict(thread=waker, doing="process", reason="", function=rows[-1]["waker_function"],
                             waker="", waker_function="", ended="", seconds=np.nan))
    out = pd.DataFrame(rows, columns=cols)
    out["share"] = out["seconds"] / wall if wall else np.nan
    return out


def _pct(x) -> str:
    return "?" if x is None or not np.isfinite(x) else f"{100 * x:.0f}%"


def sentence(p) -> str | None:
    """The chain in one sentence, or None when there is nothing to say (no off-CPU time)."""
    c = chain(p)
    if not len(c) or (len(c) == 1 and c["doing"].iloc[0] == "cpu"):
        return None
    parts = []
    for i, h in enumerate(c.itertuples()):
        who = "the cell's thread" if i == 0 else h.thread
        if h.doing == "wait":
            how = (f" (ended by {h.ended})" if h.ended in ("timeout", "signal", "interrupt")
                   else f", woken by {h.waker}" + (f" in {h.waker_function}" if h.waker_function else "")
                   if h.waker else " (no waker recorded)")
            parts.append(f"{who} waited {_pct(h.share)} of the cell on {reasons.LABELS.get(h.reason, h.reason)}"
                         f" in {h.function}{how}")
        elif h.doing == "cpu":
            parts.append(f"{who} was on CPU {_pct(h.share)} of the cell" + (f" in {h.function}" if h.function else ""))
        else:
            parts.append(f"{h.thread} is another process")
    s = "; ".join(parts) + "."
    if not has_wakers(p):
        s += f" ({NO_WAKERS}.)"
    return s[0].upper() + s[1:]


class _Module(types.ModuleType):
    """``profmagic.waits(p)``: the module called is ``waits(p)``."""
    def __call__(self, p) -> pd.DataFrame:
        return waits(p)


sys.modules[__name__].__class__ = _Module

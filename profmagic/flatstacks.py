"""Every stack of a Profile in one integer array: the function id of each frame (``flat``, built
once per profile) or its frame id (``frame_ids``, built per call), root first, stack after stack,
with each stack row's offset and length. The call trees, the function table and the views read
their stacks from here (``derived.memo`` keeps the function ids with the profile); the per-line
table reads the frame ids.
"""
from __future__ import annotations

import itertools
import marshal
import mmap
from dataclasses import dataclass

import numpy as np

from .derived import memo


def function_ids(profile) -> np.ndarray:
    """``profile.function_ids()``, once."""
    return memo(profile, "function_ids", profile.function_ids)


@dataclass
class Flat:
    """Every stack of a profile in one array: ``fn`` (the function id of each frame, or with
    ``frame_ids`` its frame id; root first, stack after stack; int32), and per stack row its
    ``starts`` offset into ``fn`` and its length."""
    fn: np.ndarray
    starts: np.ndarray
    lengths: np.ndarray
    _rows: np.ndarray | None = None

    def rows(self) -> np.ndarray:
        """The stack row of every frame (int32: a row number per frame costs 4 bytes)."""
        if self._rows is None:
            self._rows = np.repeat(np.arange(len(self.lengths), dtype=np.int32), self.lengths)
        return self._rows

    def having(self, fns) -> np.ndarray:
        """Positions in ``fn`` of the frames of the functions ``fns`` (a look-up table, not np.isin)."""
        table = np.zeros(int(self.fn.max()) + 1 if len(self.fn) else 0, bool)
        table[np.asarray(fns, dtype=np.int64)] = True
        return np.flatnonzero(table[self.fn]) if len(table) else np.zeros(0, np.int64)

    @property
    def leaves(self) -> tuple[np.ndarray, np.ndarray]:
        """(rows with a frame, the ``fn`` of their leaf)."""
        rows = np.flatnonzero(self.lengths > 0)
        return rows, self.fn[self.starts[rows] + self.lengths[rows] - 1]


def flat(profile) -> Flat:
    """The profile's stacks as a ``Flat`` of function ids, built once per profile."""
    return memo(profile, "flat", lambda: _laid(profile, function_ids(profile).astype(np.int32)))


def frame_ids(profile) -> Flat:
    """The profile's stacks as a ``Flat`` of frame ids (``fn`` holds frame ids) for the per-line
    table, built per call: a Source view asks once a click, and keeping it would hold 4 bytes a
    frame more for the profile's life (bench/bench_display.py --line-table)."""
    n = int(profile.frames.index.max()) + 1 if len(profile.frames) else 0
    return _laid(profile, np.arange(n, dtype=np.int32 if n <= 1 << 31 else np.int64))


def _laid(profile, table: np.ndarray) -> Flat:
    """The profile's stacks laid end to end, each frame id ``f`` as ``table[f]`` (of table's dtype)."""
    stacks = profile.stacks["stack"].to_numpy()
    got = _marshalled(stacks.tolist(), table)
    if got is not None:
        fn, lengths = got
        ends = np.cumsum(lengths)
        return Flat(fn, ends - lengths, lengths)
    lengths = np.fromiter(map(len, stacks), dtype=np.int64, count=len(stacks))
    ends = np.cumsum(lengths)
    fn = np.empty(int(ends[-1]) if len(ends) else 0, table.dtype)
    frames = itertools.chain.from_iterable(stacks)
    for a in range(0, len(fn), 1 << 20):   # through the table a piece at a time: one frame-wide array
        b = min(a + (1 << 20), len(fn))
        fn[a:b] = table[np.fromiter(itertools.islice(frames, b - a), dtype=table.dtype, count=b - a)]
    return Flat(fn, ends - lengths, lengths)


def _lazy(n: int, dtype) -> np.ndarray:
    """An array of ``n`` items on an anonymous mapping: its pages cost nothing until written, and
    they are small pages (numpy asks for huge pages on its own big arrays, and a fresh huge page's
    first touch cost 5-10 ms on the test VM: 0.5-1 s for one array of 50M frames)."""
    size = max(n, 1) * np.dtype(dtype).itemsize
    return np.frombuffer(mmap.mmap(-1, size), dtype=dtype, count=n)


_REC = 5   # marshal (version 2) writes a tuple as "(" and a 4-byte count, an int below 2**31 as "i" and 4 bytes


def _marshalled(stacks: list, table: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(``table`` of every frame id, frames per stack) of a list of tuples of ints, read from
    marshal's bytes of a block of stacks at a time: about twice as fast as pulling the ints one by
    one (np.fromiter), and the lengths come with them. None when anything is not a plain tuple of
    ints below 2**31 (the caller reads them one by one)."""
    lens = []
    fn, at = None, 0
    block = 1024
    for a in range(0, len(stacks), block):
        chunk = stacks[a:a + block]
        try:
            b = marshal.dumps(chunk, 2)
        except ValueError:   # a tuple subclass, a numpy integer: not marshal's own types
            return None
        r = (len(b) - _REC) // _REC
        if len(b) != _REC * (r + 1) or b[0] != 0x5B or int.from_bytes(b[1:5], "little") != len(chunk):
            return None
        code = np.ndarray((r,), np.uint8, b, _REC, (_REC,))
        val = np.ndarray((r,), "<i4", b, _REC + 1, (_REC,))
        head = code == 0x28
        pos = np.flatnonzero(head)
        n = val[pos]
        # Each record is a tuple's head or an int, and the heads sit where the counts say: nothing
        # of another size (a long int, a bool, a nested tuple) shifted the records.
        if len(pos) != len(chunk) or int(np.count_nonzero(code == 0x69)) != r - len(pos) or \
                (len(pos) and (pos[0] != 0 or (np.diff(pos) != n[:-1] + 1).any() or pos[-1] + n[-1] + 1 != r)):
            return None
        k = r - len(pos)
        if fn is None or at + k > len(fn):   # room for the frames of all stacks at this block's mean, and more
            more = _lazy(max(2 * (at + k), int(1.25 * (at + k) * len(stacks) / (a + len(chunk)))) + 1024, table.dtype)
            if fn is not None:
                more[:at] = fn[:at]
            fn = more
        fn[at:at + k] = table[val[~head]]
        at += k
        lens.append(n)
    if fn is None:
        return np.zeros(0, table.dtype), np.zeros(0, np.int64)
    return fn[:at], np.concatenate(lens).astype(np.int64)

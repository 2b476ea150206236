"""What several readers share: text decoding, JSON with byte offsets, our extension block and the types
of the meta it carries, and the bounds on the work a file can ask for.

Bounds (issue 28): a stack at most ``MAX_DEPTH`` deep, at most ``MAX_THREADS`` threads, and the distinct
stacks' frames in all at most ``frame_budget(file size)``; chains and nesting are walked once, in time
linear in the file. Memory: the JSON readers peak at about 8-13x the file over the interpreter's own
(measured on the hostile shapes of tests/hostile.py at 5-43 MB), plus 8 bytes per frame the stacks hold."""
from __future__ import annotations

import json
import math
from functools import lru_cache

from ..errors import ProfileFormatError

# Our extension block in JSON formats that other tools ignore (speedscope, pyinstrument sessions).
EXT = "x-profmagic"


@lru_cache(maxsize=1)
def version() -> str:
    """profmagic's version, from the installed package's metadata."""
    from importlib.metadata import PackageNotFoundError, version as _v
    try:
        return _v("profmagic")
    except PackageNotFoundError:
        return "0+unknown"


def decode(data: bytes) -> str:
    """Text with a UTF-16 (LE/BE) or UTF-8 BOM honoured; UTF-8 otherwise, undecodable bytes kept."""
    if data[:2] == b"\xff\xfe":
        return data[2:].decode("utf-16-le")
    if data[:2] == b"\xfe\xff":
        return data[2:].decode("utf-16-be")
    if data[:3] == b"\xef\xbb\xbf":
        data = data[3:]
    return data.decode("utf-8", errors="surrogateescape")


def parse_json(data: bytes):
    """The parsed document, or ValueError. The standard library's parser: orjson and msgspec were
    measured beside it (bench/RESULTS.md, issue 27) and took as much memory or more on our files."""
    return json.loads(data)


def json_error(e: json.JSONDecodeError, source: str) -> ProfileFormatError:
    """A ProfileFormatError naming the line and the byte offset of ``e`` (whose pos counts characters)."""
    offset = len(e.doc[:e.pos].encode("utf-8", "surrogatepass")) if isinstance(e.doc, str) else e.pos
    return ProfileFormatError(f"invalid JSON: {e.msg}", source=source, line=e.lineno, offset=offset)


def load_json(data: bytes, source: str):
    """The parsed document; a JSON or encoding error names its line and byte offset."""
    try:
        return parse_json(data)
    except json.JSONDecodeError as e:
        raise json_error(e, source) from None
    except UnicodeDecodeError as e:
        raise ProfileFormatError(f"not UTF-8 text: {e.reason}", source=source, offset=e.start) from None
    except ValueError as e:   # an integer with more digits than Python converts
        raise ProfileFormatError(f"invalid JSON: {e}", source=source) from None


def ext_block(doc) -> dict:
    """Our extension block of a JSON object, or {}."""
    block = doc.get(EXT) if isinstance(doc, dict) else None
    return block if isinstance(block, dict) else {}


_THREAD_TYPES = {"pid": (int,), "tid": (int,), "name": (str,), "process": (str,), "rank": (int, str),
                 "backend": (str,), "python": (bool,)}


def thread_attrs(row: dict) -> dict:
    """The attributes of a thread row our writer carried, those of the right type only (the row
    comes from a file, which may be hostile)."""
    return {k: v for k, v in row.items() if type(v) in _THREAD_TYPES.get(k, ())}


# -- the work a file can ask for ---------------------------------------------------------------------
# A stack deeper than this is refused: CPython's default recursion limit is 1,000 Python frames, a few
# native frames each; perf keeps 127 by default.
MAX_DEPTH = 16_384
# The frames that the distinct stacks of one profile hold in all (each stack is a tuple of frame ids in
# the Profile, 8 bytes a frame): at most this many, or FRAMES_PER_BYTE per byte of input when that is more.
MAX_FRAMES = 16_000_000
FRAMES_PER_BYTE = 2

# Threads in one profile: each costs a row of the thread table and its own walk.
MAX_THREADS = 16_384


def too_many_threads(source: str, where: str | None = None, line: int | None = None) -> ProfileFormatError:
    return ProfileFormatError(f"more than {MAX_THREADS:,} threads; profmagic reads at most {MAX_THREADS:,} "
                              "threads in one profile", source=source, where=where, line=line)


def frame_budget(nbytes: int) -> int:
    return max(MAX_FRAMES, FRAMES_PER_BYTE * int(nbytes))


class StackTree:
    """Stacks as parent links, for formats whose stacks are chains (a gecko prefix, a Chrome ``parent``)
    or nesting (B/E events, speedscope's O/C events): node k is stack ``parent[k]`` plus ``frame[k]``,
    node -1 the empty stack. Building a node costs O(1); a node becomes a tuple (what the Profile
    holds) only when asked for, in O(its depth), at most once. Depth is capped at ``MAX_DEPTH`` and the
    tuples' frames in all at ``frame_budget``: a breach is a ProfileFormatError naming the limit."""

    def __init__(self, source: str, nbytes: int, max_depth: int = MAX_DEPTH):
        self.source = source
        self.max_depth = max_depth
        self.budget = frame_budget(nbytes)
        self.frames = 0
        self.parent: list[int] = []
        self.frame: list[int] = []
        self.depth: list[int] = []
        self._child: dict[tuple[int, int], int] = {}
        self._tuples: dict[int, tuple] = {}

    def push(self, parent: int, frame: int, where: str | None = None) -> int:
        """The node of ``parent``'s stack plus ``frame`` (one node per distinct pair)."""
        key = (parent, frame)
        node = self._child.get(key)
        if node is None:
            d = self.depth[parent] + 1 if parent >= 0 else 1
            if d > self.max_depth:
                raise too_deep(self.source, where, self.max_depth)
            node = self._child[key] = len(self.parent)
            self.parent.append(parent)
            self.frame.append(frame)
            self.depth.append(d)
        return node

    def stack(self, node: int, where: str | None = None) -> tuple:
        """Node ``node`` as a root-first tuple of frames."""
        if node < 0:
            return ()
        got = self._tuples.get(node)
        if got is not None:
            return got
        self.frames += self.depth[node]
        if self.frames > self.budget:
            raise ProfileFormatError(
                f"the distinct stacks hold more than {self.budget:,} frames in all; profmagic reads at most "
                f"max({MAX_FRAMES:,}, {FRAMES_PER_BYTE} per byte of input)", source=self.source, where=where)
        up, k = [], node
        while k >= 0 and k not in self._tuples:
            up.append(self.frame[k])
            k = self.parent[k]
        up.reverse()
        got = self._tuples[node] = (self._tuples[k] if k >= 0 else ()) + tuple(up)
        return got


def too_deep(source: str, where: str | None, limit: int = MAX_DEPTH, line: int | None = None) -> ProfileFormatError:
    return ProfileFormatError(f"a stack deeper than {limit:,} frames; profmagic reads stacks up to "
                              f"{limit:,} deep", source=source, where=where, line=line)


# -- meta carried in a file ---------------------------------------------------------------------------
def _number(v) -> bool:
    return type(v) in (int, float) and math.isfinite(v)


def _int(v) -> bool:
    return type(v) is int


def _str(v) -> bool:
    return isinstance(v, str)


def _strings(v) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _object(v) -> bool:
    return isinstance(v, dict)


def _str_map(v) -> bool:
    return isinstance(v, dict) and all(isinstance(x, str) for x in v.values())


# What each meta field must hold, as JSON, with the words an error uses. Meta's own fields first, then
# the extra keys profmagic computes with; other keys are kept as they are, in Meta.extra.
META_TYPES = {
    **dict.fromkeys(("format", "source", "backend", "backend_choice", "mode", "cell", "cell_thread",
                     "approximate", "partial", "message", "name", "process_name", "timing", "trimmed_to",
                     "trim_note", "metric_note", "timing_note", "cost", "memray_mode"), (_str, "a string")),
    **dict.fromkeys(("duration", "rate", "requested_rate", "rate_requested", "target_rate", "start_time",
                     "cell_wall", "cell_cpu", "cpu_only_seconds", "time_started_unix", "t0_unix"),
                    (_number, "a finite number")),
    **dict.fromkeys(("pid", "ppid", "boilerplate_folded"), (_int, "an integer")),
    "version": (lambda v: isinstance(v, str) or _object(v), "a string or an object"),
    **dict.fromkeys(("versions", "extra", "cluster", "other_data", "ignored_events", "reader_options"),
                    (_object, "an object")),
    **dict.fromkeys(("unknown", "metric_labels", "renamed_files"), (_str_map, "an object of strings")),
    **dict.fromkeys(("warnings", "argv", "threads", "units"), (_strings, "a list of strings")),
    "dropped_threads": (lambda v: isinstance(v, list), "a list"),
    "folded_thread_roots": (lambda v: type(v) is bool, "true or false"),
    "processes": (lambda v: _object(v) and all(_object(x) for x in v.values()), "an object of objects"),
    "memory_timeline": (_object, "an object"),
}


def carried_meta(meta, source: str, where: str) -> dict:
    """Meta a file carries in our ``x-profmagic`` block, each known field of the type profmagic computes
    with (durations and rates finite numbers): a wrong type is a ProfileFormatError naming the field
    and the type expected, never a traceback later."""
    if meta is None:
        return {}
    if not isinstance(meta, dict):
        raise ProfileFormatError("expected an object of meta fields", source=source, where=where)
    for k, v in meta.items():
        ok = META_TYPES.get(k)
        if v is not None and ok is not None and not ok[0](v):
            raise ProfileFormatError(f"meta field {k!r} is {_json_type(v)}; expected {ok[1]}",
                                     source=source, where=f"{where}.{k}")
    return dict(meta)


def text_meta(facts: dict, source: str, line: int | None = None) -> dict:
    """Meta from a text header's ``key=value`` facts, each converted to the type ``META_TYPES`` wants
    (a number, an integer; text otherwise): a value that does not convert, or a field that text cannot
    hold (an object, a list), is a ProfileFormatError naming the field."""
    out = {}
    for k, v in facts.items():
        ok, what = META_TYPES.get(k, (_str, ""))
        try:
            if ok is _str:
                out[k] = v
                continue
            if ok is _number:
                x = float(v)
            elif ok is _int:
                x = int(v)
            else:
                raise ValueError
        except ValueError:
            x = None
        if x is None or not ok(x):
            raise ProfileFormatError(f"header field {k}={v[:40]!r}; expected {what}", source=source, line=line)
        out[k] = x
    return out


def _json_type(v) -> str:
    if isinstance(v, dict) and v:
        return "an object holding " + _json_type(next(iter(v.values())) if len({type(x) for x in v.values()}) == 1
                                                 else object())
    if isinstance(v, list) and v:
        return "a list holding " + _json_type(v[0] if len({type(x) for x in v}) == 1 else object())
    if isinstance(v, bool):
        return "a boolean"
    return {int: "an integer", float: "a number", str: "a string", list: "a list", dict: "an object",
            type(None): "null"}.get(type(v), "values of several types")


def checked_ext(doc, source: str, where: str = EXT) -> dict:
    """Our extension block of ``doc``, its shared fields checked: ``metric`` and ``axis`` strings, ``t0``
    a number, ``unknown_metrics`` a list of strings, ``threads`` a list of objects and ``meta``
    as ``carried_meta`` wants it ({} when there is no block)."""
    block = ext_block(doc)
    for key, ok, what in (("metric", _str, "a metric name"), ("axis", _str, "a metric name"),
                          ("t0", _number, "a finite number"), ("unknown_metrics", _strings, "a list of metric names"),
                          ("threads", lambda v: isinstance(v, list) and all(isinstance(x, dict) for x in v),
                           "a list of objects")):
        if block.get(key) is not None and not ok(block[key]):
            raise ProfileFormatError(f"{key!r} is {_json_type(block[key])}; expected {what}", source=source,
                                     where=f"{where}.{key}")
    carried_meta(block.get("meta"), source, f"{where}.meta")
    return block

"""Several captures of one run in one zip, with a manifest saying how they make one Profile.

``manifest.json`` (the zip's first member)::

    {"profmagic": "container", "version": 1,
     "combine": "idle-pair" | "thread-sources" | "memory-children" | "time-memory",
     "parts": [{"name": "wall.speedscope.json", "format": "speedscope", "role": "wall",
                "options": {...reader options...}}, ...],
     "meta": {...}}

``combine``: ``idle-pair`` = a wall recording and an on-CPU one of the same run (py-spy with and
without ``--idle``, ``transforms.combine_idle``); ``thread-sources`` = a primary recording and
the threads only a secondary one saw (py-spy + eu-stack, ``transforms.merge_thread_sources``),
with ``meta.primary_started`` / ``secondary_started`` (unix seconds) to put both on one clock;
``memory-children`` = memray's capture of a process (role ``parent``) and of each child it forked
(roles ``child <pid>``), one process each (``multi.forked_children``); ``time-memory`` = a time
recording and a memray recording of one run (roles ``time`` and ``memory``), side by side per stack
(``transforms.time_and_memory``), without the threads ``meta.helpers`` (native ids) names.

A container is input like any file, so what it may ask for is bounded before anything is read:
members, parts and nesting are counted, the sizes the zip declares are checked against totals and
against the compression ratio (a zip bomb), and members are read in chunks that stop at the size
declared. A part's reader options are data-shaping choices from ``OPTIONS`` (per format, each of
its type); isolation, limits and paths are never taken from a file.
"""
from __future__ import annotations

import io
import json
import math
import re
import zipfile
import zlib

from ..errors import ProfileFormatError
from ..model import MEMORY_METRICS, Meta, Profile, Raw
from .. import multi, transforms
from .registry import Format

NAME = "profmagic-container"
FORMAT = Format(NAME, __name__, raw_suffix=".zip", mime="application/zip")
MANIFEST = "manifest.json"
MAX_MEMBERS = 260          # zip members (a manifest and its parts), at most
MAX_PARTS = 256            # parts in a manifest (memory-children: a parent and up to 255 forked children)
MAX_MANIFEST = 16 << 20    # bytes of manifest.json
MAX_TOTAL = 2 << 30        # bytes of all members together, as declared and as read
MAX_RATIO = 100            # declared size / compressed size, for members and in all ...
RATIO_FLOOR = 32 << 20     # ... once they declare more than this (small members compress as they like)
MAX_NESTING = 1            # a container part may itself be a container (time-memory of memory-children)
_CHUNK = 1 << 20
COMBINES = ("idle-pair", "thread-sources", "memory-children", "time-memory")
ROLES = {"idle-pair": ("wall", "cpu"), "thread-sources": ("primary", "secondary"), "time-memory": ("time", "memory")}
_CHILD_ROLE = re.compile(r"child [0-9]{1,10}")


def sniff(head: bytes) -> bool:
    return head[:4] == b"PK\x03\x04" and MANIFEST.encode() in head[:200]


def write(parts: list[tuple[str, bytes, str, str, dict]], combine: str, meta: dict | None = None) -> bytes:
    """A container of ``parts``: (member name, data, format, role, reader options) each."""
    manifest = {"profmagic": "container", "version": 1, "combine": combine,
                "parts": [{"name": n, "format": f, "role": r, "options": o} for n, _, f, r, o in parts],
                "meta": meta or {}}
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(MANIFEST, json.dumps(manifest, default=str))
        for name, data, *_ in parts:
            z.writestr(name, data)
    return buf.getvalue()


# -- reader options a file may give: per format, option -> (check, what it must be) -----------------------
def _bool(v):
    return type(v) is bool


def _number(v):
    return type(v) in (int, float) and math.isfinite(v)


def _one_of(*values):
    return lambda v: isinstance(v, str) and v in values


def _str(v):
    return isinstance(v, str)


def _str_map(check):
    return lambda v: isinstance(v, dict) and all(check(x) for x in v.values())


def _label(v):   # chrome_trace labels: "label" or {"label": str, "tid": int, "name": str}
    if isinstance(v, str):
        return True
    return (isinstance(v, dict) and isinstance(v.get("label"), str) and set(v) <= {"label", "tid", "name"}
            and (v.get("tid") is None or type(v["tid"]) is int) and (v.get("name") is None or _str(v["name"])))


def _window(v):
    return isinstance(v, list) and len(v) == 2 and all(x is None or _number(x) for x in v)


_THREAD_ATTRS = {"pid": int, "tid": int, "name": str, "process": str, "rank": (int, str), "backend": str,
                 "python": bool}


def _thread_attrs(v):
    return isinstance(v, dict) and all(k in _THREAD_ATTRS and (v[k] is None or type(v[k]) in
                                       (_THREAD_ATTRS[k] if isinstance(_THREAD_ATTRS[k], tuple) else (_THREAD_ATTRS[k],)))
                                       for k in v)


_WALL_CPU = (_one_of("wall", "cpu"), "'wall' or 'cpu'")
_BOOL = (_bool, "true or false")
OPTIONS = {
    "speedscope": {"metric": (_one_of("wall", "cpu", *MEMORY_METRICS), "'wall', 'cpu' or a memory metric")},
    "gecko": {"metric": _WALL_CPU, "weigh": (_one_of("interval", "count"), "'interval' or 'count'")},
    "chrome_trace": {"metric": _WALL_CPU, "weigh": (_one_of("interval", "count"), "'interval' or 'count'"),
                     "rate": (lambda v: _number(v) and v > 0, "a positive number (Hz)"),
                     "labels": (_str_map(_label), '{tid: label or {"label", "tid", "name"}}'),
                     "window": (_window, "[start, end] in microseconds (numbers or null)"),
                     "ends": (_str_map(_number), "{tid: microseconds}"),
                     "starts": (_str_map(_number), "{tid: microseconds}")},
    "pyinstrument": {"metric": _WALL_CPU, "thread_labels": (_str_map(_str), "{thread ident: label}")},
    "pstats": {"metric": _WALL_CPU, "thread": (_str, "a string"),
               "thread_attrs": (_thread_attrs, "{pid, tid, name, process, rank, backend, python} of their types")},
    "folded": {"lenient": _BOOL, "thread": (_str, "a string")},
    "eu-stack": {"raw_names": _BOOL, "fold": (lambda v: v is None or _bool(v), "true, false or null"),
                 "pid": _BOOL, "tid": _BOOL},
    "perf_script": {**dict.fromkeys(("pid", "tid", "kernel", "jit", "all", "addrs", "keep_unterminated", "strict",
                                     "python_names"), _BOOL),
                    "event_filter": (lambda v: v is None or _str(v), "an event name or null"),
                    "thread_labels": (_one_of("perf", "threads"), "'perf' or 'threads'")},
    "memray": {"leaks": _BOOL, "threads": (lambda v: isinstance(v, dict), "an object (see formats/memray.py)"),
               "own": (lambda v: isinstance(v, dict), "an object (see formats/memray.py)")},
    "profmagic-children": {"t0": (lambda v: v is None or _number(v), "a number or null")},
}
# Named in the refusal: what a file asked for that only the caller chooses.
CALLER_ONLY = {"isolate": "isolation", "max_bytes": "a limit", "source": "a source name", "path": "a path",
               "depth": "a limit", "meta": "meta (a part's meta is its own file's)"}


def part_options(fmt: str, options, source: str, where: str) -> dict:
    """The reader options of a part, each one ``OPTIONS`` allows for ``fmt`` and of its type."""
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise ProfileFormatError(f"expected an object of reader options, got {options!r:.80}", source=source,
                                 where=where)
    allowed = OPTIONS.get(fmt, {})
    for k, v in options.items():
        if k in CALLER_ONLY:
            raise ProfileFormatError(f"reader option {k!r} is {CALLER_ONLY[k]}, which the caller chooses, never "
                                     "a file", source=source, where=f"{where}.{k}")
        if k not in allowed:
            raise ProfileFormatError(f"unknown reader option {k!r} for {fmt}; a container may set "
                                     + (", ".join(allowed) or "none"), source=source, where=f"{where}.{k}")
        check, what = allowed[k]
        if not check(v):
            raise ProfileFormatError(f"reader option {k!r} is {v!r:.80}; expected {what}", source=source,
                                     where=f"{where}.{k}")
    return dict(options)


# -- the archive ---------------------------------------------------------------------------------------------
def _check_archive(z: zipfile.ZipFile, size: int, source: str) -> None:
    """Members, declared sizes and compression ratios within the limits, before anything is extracted."""
    infos = z.infolist()
    if len(infos) > MAX_MEMBERS:
        raise ProfileFormatError(f"the zip holds {len(infos):,} members; a container holds at most {MAX_MEMBERS} "
                                 "(member limit)", source=source)
    total = 0
    for info in infos:
        total += info.file_size
        if info.file_size > RATIO_FLOOR and info.file_size > MAX_RATIO * max(info.compress_size, 1):
            raise ProfileFormatError(f"member {info.filename!r} declares {info.file_size:,} bytes from "
                                     f"{info.compress_size:,} compressed; at most {MAX_RATIO}x (compression ratio "
                                     "limit: a zip bomb?)", source=source, where=info.filename)
    if total > MAX_TOTAL:
        raise ProfileFormatError(f"the members declare {total:,} bytes in all; at most {MAX_TOTAL:,} (size limit)",
                                 source=source)
    if total > RATIO_FLOOR and total > MAX_RATIO * max(size, 1):
        raise ProfileFormatError(f"the members declare {total:,} bytes from a {size:,}-byte zip; at most "
                                 f"{MAX_RATIO}x (compression ratio limit: a zip bomb?)", source=source)


def _member(z: zipfile.ZipFile, name: str, source: str, cap: int = MAX_TOTAL) -> bytes:
    """A member's bytes, read in chunks: never more than it declared, nor than ``cap``."""
    try:
        info = z.getinfo(name)
    except KeyError:
        raise ProfileFormatError(f"the manifest names {name!r}, which the zip does not hold", source=source,
                                 where=name) from None
    limit = min(info.file_size, cap)
    if info.file_size > cap:
        raise ProfileFormatError(f"member {name!r} declares {info.file_size:,} bytes; at most {cap:,} (size limit)",
                                 source=source, where=name)
    chunks, n = [], 0
    try:
        with z.open(info) as f:
            while True:
                chunk = f.read(_CHUNK)
                if not chunk:
                    break
                n += len(chunk)
                if n > limit:
                    raise ProfileFormatError(f"member {name!r} holds more than the {limit:,} bytes it declares "
                                             "(size limit)", source=source, where=name)
                chunks.append(chunk)
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError, RuntimeError, NotImplementedError, ValueError) as e:
        if isinstance(e, ProfileFormatError):
            raise
        raise ProfileFormatError(f"member {name!r} is damaged ({type(e).__name__}: {e})", source=source,
                                 where=name) from None
    return b"".join(chunks)


def _manifest_parts(manifest, source: str) -> list[dict]:
    """The manifest's parts, checked: strings, a known format, a role the combine uses, once each."""
    if not isinstance(manifest, dict) or manifest.get("profmagic") != "container" \
            or not isinstance(manifest.get("parts"), list):
        raise ProfileFormatError('expected a manifest {"profmagic": "container", "parts": [...]}',
                                 source=source, where=MANIFEST)
    from . import available
    formats = available()
    combine = manifest.get("combine")
    if combine not in COMBINES:
        raise ProfileFormatError(f"unknown combine {combine!r:.80}; expected " + ", ".join(COMBINES),
                                 source=source, where=f"{MANIFEST}: combine")
    parts = manifest["parts"]
    if len(parts) > MAX_PARTS:
        raise ProfileFormatError(f"the manifest lists {len(parts):,} parts; at most {MAX_PARTS} (part limit)",
                                 source=source, where=f"{MANIFEST}: parts")
    roles = set()
    for i, part in enumerate(parts):
        where = f"{MANIFEST}: parts[{i}]"
        if not isinstance(part, dict) or not all(isinstance(part.get(k), str) for k in ("name", "format", "role")):
            raise ProfileFormatError("expected a part with string name, format and role", source=source, where=where)
        if part["format"] not in formats:
            raise ProfileFormatError(f"unknown format {part['format']!r:.80}; expected one of " + ", ".join(formats),
                                     source=source, where=f"{where}.format")
        role = part["role"]
        ok = role in ROLES[combine] if combine in ROLES else (role == "parent" or _CHILD_ROLE.fullmatch(role))
        if not ok:
            raise ProfileFormatError(f"role {role!r:.80} is not one combine {combine!r} uses", source=source,
                                     where=f"{where}.role")
        if role in roles:
            raise ProfileFormatError(f"a second part with role {role!r}", source=source, where=f"{where}.role")
        roles.add(role)
        part_options(part["format"], part.get("options"), source, f"{where}.options")
    return parts


def parts(data: bytes, source: str = "<input>") -> tuple[dict, dict[str, tuple[bytes, dict]]]:
    """(manifest, role -> (member bytes, part entry)), every limit checked."""
    try:
        z = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:
        raise ProfileFormatError(f"not a zip container ({e})", source=source, offset=0) from None
    with z:
        _check_archive(z, len(data), source)
        try:
            manifest = json.loads(_member(z, MANIFEST, source, MAX_MANIFEST))
        except (ValueError, RecursionError) as e:
            if isinstance(e, ProfileFormatError):
                raise
            raise ProfileFormatError(f"unreadable manifest.json ({type(e).__name__}: {e})", source=source,
                                     where=MANIFEST) from None
        out = {}
        read = 0
        for part in _manifest_parts(manifest, source):
            blob = _member(z, part["name"], source, MAX_TOTAL - read)
            read += len(blob)
            out[part["role"]] = (blob, part)
    return manifest, out


_META_NUMBERS = ("primary_started", "secondary_started", "time_started_unix")


def _combine_meta(m, source: str) -> dict:
    """The manifest's meta, each field a combine uses of its type."""
    from ._common import carried_meta
    m = carried_meta(m, source, f"{MANIFEST}: meta")
    for k in _META_NUMBERS:
        if m.get(k) is not None and not _number(m[k]):
            raise ProfileFormatError(f"unexpected value {m[k]!r:.80}; expected unix seconds", source=source,
                                     where=f"{MANIFEST}: meta.{k}")
    if m.get("helpers") is not None and not (isinstance(m["helpers"], list)
                                             and all(type(t) is int for t in m["helpers"])):
        raise ProfileFormatError(f"unexpected value {m['helpers']!r:.80}; expected a list of thread ids",
                                 source=source, where=f"{MANIFEST}: meta.helpers")
    if m.get("children") is not None and not isinstance(m["children"], str):
        raise ProfileFormatError(f"unexpected value {m['children']!r:.80}; expected a note", source=source,
                                 where=f"{MANIFEST}: meta.children")
    return m


def read(data: bytes, source: str = "<input>", depth: int = 0) -> Profile:
    """``depth``: how many containers this one is inside (set by this reader for a nested part)."""
    from . import read as read_format
    if depth > MAX_NESTING:
        raise ProfileFormatError(f"a container nested {depth} deep; at most {MAX_NESTING} (nesting limit)",
                                 source=source)
    manifest, members = parts(data, source)
    m = _combine_meta(manifest.get("meta"), source)
    profiles = {}
    for role, (blob, part) in members.items():
        opts = dict(part.get("options") or {})
        if part["format"] == NAME:
            opts["depth"] = depth + 1
        profiles[role] = read_format(blob, part["format"], source=f"{source}:{part['name']}", **opts)
    combine = manifest["combine"]
    try:
        if combine == "idle-pair":
            p = transforms.combine_idle(profiles["wall"], profiles["cpu"])
        elif combine == "thread-sources":
            # Sample times onto the secondary's clock, through each recorder's start time (unix s).
            t0 = profiles["secondary"].meta.get("t0_unix")
            t0 = float(t0 if _number(t0) else m.get("secondary_started") or 0)
            offset = (float(m.get("primary_started") or t0) - t0) if t0 else 0.0
            p = transforms.merge_thread_sources(profiles["primary"], profiles["secondary"], offset=offset)
        elif combine == "memory-children":
            kids = sorted((r for r in profiles if r.startswith("child ")), key=lambda r: (len(r), r))
            p = multi.forked_children(profiles["parent"], [profiles[r] for r in kids], m.get("children"))
        else:
            p = transforms.time_and_memory(profiles["time"], profiles["memory"], drop_tids=m.get("helpers") or (),
                                           time_started=m.get("time_started_unix"))
    except KeyError as e:
        raise ProfileFormatError(f"combine {combine!r} needs a part with role {e}", source=source,
                                 where=MANIFEST) from None
    m = {k: v for k, v in m.items() if k not in ("format", "source")}
    meta = Meta.of(p.meta).replace(**m, format=NAME, source=source)
    return p.replace(meta=meta, raw=Raw(data, NAME))

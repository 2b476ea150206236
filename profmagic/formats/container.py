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
"""
from __future__ import annotations

import io
import json
import zipfile

from ..errors import ProfileFormatError
from ..model import Meta, Profile, Raw
from .. import multi, transforms

NAME = "profmagic-container"
MANIFEST = "manifest.json"
MAX_MEMBER = 1 << 31   # a member's declared size is checked before it is read


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


def _member(z: zipfile.ZipFile, name: str, source: str) -> bytes:
    try:
        info = z.getinfo(name)
    except KeyError:
        raise ProfileFormatError(f"the manifest names {name!r}, which the zip does not hold", source=source,
                                 where=name) from None
    if info.file_size > MAX_MEMBER:
        raise ProfileFormatError(f"member {name!r} declares {info.file_size} bytes; at most {MAX_MEMBER}",
                                 source=source, where=name)
    return z.read(info)


def parts(data: bytes, source: str = "<input>") -> tuple[dict, dict[str, tuple[bytes, dict]]]:
    """(manifest, role -> (member bytes, part entry))."""
    try:
        z = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, OSError) as e:
        raise ProfileFormatError(f"not a zip container ({e})", source=source, offset=0) from None
    with z:
        try:
            manifest = json.loads(_member(z, MANIFEST, source))
        except (ValueError, zipfile.BadZipFile, OSError) as e:
            raise ProfileFormatError(f"unreadable manifest.json ({e})", source=source, where=MANIFEST) from None
        if not isinstance(manifest, dict) or manifest.get("profmagic") != "container" \
                or not isinstance(manifest.get("parts"), list):
            raise ProfileFormatError('expected a manifest {"profmagic": "container", "parts": [...]}',
                                     source=source, where=MANIFEST)
        out = {}
        for i, part in enumerate(manifest["parts"]):
            if not isinstance(part, dict) or not all(isinstance(part.get(k), str) for k in ("name", "format", "role")):
                raise ProfileFormatError("expected a part with string name, format and role", source=source,
                                         where=f"{MANIFEST}: parts[{i}]")
            try:
                out[part["role"]] = (_member(z, part["name"], source), part)
            except (zipfile.BadZipFile, OSError, EOFError) as e:
                raise ProfileFormatError(f"member {part['name']!r} is damaged ({e})", source=source,
                                         where=part["name"]) from None
    return manifest, out


def read(data: bytes, source: str = "<input>") -> Profile:
    from . import read as read_format
    manifest, members = parts(data, source)
    profiles = {role: read_format(blob, part["format"], source=f"{source}:{part['name']}",
                                  **dict(part.get("options") or {}))
                for role, (blob, part) in members.items()}
    combine = manifest.get("combine")
    try:
        if combine == "idle-pair":
            p = transforms.combine_idle(profiles["wall"], profiles["cpu"])
        elif combine == "thread-sources":
            # Sample times onto the secondary's clock, through each recorder's start time (unix s).
            m = manifest.get("meta") or {}
            t0 = float(profiles["secondary"].meta.get("t0_unix") or m.get("secondary_started") or 0)
            offset = (float(m.get("primary_started") or t0) - t0) if t0 else 0.0
            p = transforms.merge_thread_sources(profiles["primary"], profiles["secondary"], offset=offset)
        elif combine == "memory-children":
            kids = sorted((r for r in profiles if r.startswith("child ")), key=lambda r: (len(r), r))
            p = multi.forked_children(profiles["parent"], [profiles[r] for r in kids],
                                      (manifest.get("meta") or {}).get("children"))
        elif combine == "time-memory":
            m = manifest.get("meta") or {}
            p = transforms.time_and_memory(profiles["time"], profiles["memory"], drop_tids=m.get("helpers") or (),
                                           time_started=m.get("time_started_unix"))
        else:
            raise ProfileFormatError(f"unknown combine {combine!r}; expected idle-pair, thread-sources, "
                                     "memory-children or time-memory",
                                     source=source, where=MANIFEST)
    except KeyError as e:
        raise ProfileFormatError(f"combine {combine!r} needs a part with role {e}", source=source,
                                 where=MANIFEST) from None
    meta = Meta.of(p.meta).replace(**dict(manifest.get("meta") or {}), format=NAME, source=source)
    return p.replace(meta=meta, raw=Raw(data, NAME))

"""The header and downloads of a Profile's display: its honest one-line description, the notes a
reader needs to trust it, and download links for its speedscope JSON and raw capture.

Downloads are ``data:`` URIs up to ``MAX_DATA_URI`` bytes each, so a saved notebook (and its
nbconvert HTML) keeps them with no server. A larger file is written next to the notebook (the
kernel's working directory) once, under a name made from its content, and the link names it.
"""
from __future__ import annotations

import base64
import hashlib
import html
import json
import os
import shutil

from ..model import MEMORY_METRICS, METRIC_LABELS, Profile
from .tree import flat

MAX_DATA_URI = 10 * 1024 * 1024  # bytes per file; docs/report.md
MAX_EXPORT = 1_000_000   # frames: a larger profile's speedscope JSON is built only when asked
RAW_EXT = {"speedscope": ".speedscope.json", "folded": ".folded", "pstats": ".pstats", "perf_script": ".perf.txt",
           "perf": ".perf.data", "pyinstrument": ".pyisession", "eu_stack": ".eu-stack.txt", "stap": ".stap.txt",
           "memray": ".bin"}


def escape(s) -> str:
    return html.escape(str(s), quote=True)


def notes(profile: Profile) -> list[str]:
    """What the reader must know to trust the numbers: approximations and unknown metrics."""
    out = []
    m = profile.meta
    if m.get("partial"):
        out.append(f"Partial: {m['partial']}")
    if m.get("message"):
        out.append(str(m["message"]))
    if m.get("approximate"):
        out.append(f"Approximate: {m['approximate']}")
    out += [f"Warning: {w}" for w in m.warnings]
    ended = [(k, v.get("ended_at")) for k, v in (m.get("processes") or {}).items()
             if isinstance(v, dict) and v.get("ended")]
    if ended:
        out.append("Ended during the recording (nothing after that is in the profile): " + "; ".join(
            f"{k} at +{at:.2f} s" if isinstance(at, (int, float)) and at == at else str(k) for k, at in ended))
    backend = profile.meta.get("backend") or profile.meta.get("format") or "this source"
    for metric in ("wall", "cpu") + MEMORY_METRICS:
        if metric in profile.stacks and not profile.stacks[metric].notna().any():
            why = m.unknown.get(metric) or f"{backend} cannot know it"
            out.append(f"{METRIC_LABELS[metric]}: not measured ({why})")
    if m.get("cost"):
        out.append(f"Cost: {m['cost']}")
    return out


def header_html(profile: Profile) -> str:
    lines = [f"<b>{escape(profile.describe())}</b>"]
    lines += [f"<span style='color:#b45309'>⚠ {escape(n)}</span>" for n in notes(profile)]
    return ("<div class='profmagic-header' style='font-family:sans-serif;font-size:13px'>" + "<br>".join(lines)
            + "</div>")


def data_uri(data: bytes, mime: str) -> str:
    return f"data:{mime};base64," + base64.b64encode(data).decode("ascii")


def stem(profile: Profile) -> str:
    keep = "".join(c if c.isalnum() or c in "-_" else "_" for c in str(profile.meta.get("backend")
                   or profile.meta.get("format") or "profile"))
    return f"profmagic-{keep[:40]}"


def _beside_notebook(name: str, data: bytes | None = None, path: str | None = None,
                     directory: str | None = None) -> str:
    """Write ``data`` (or copy ``path``) into ``directory`` (default: the working directory, which
    is the notebook's in a Jupyter kernel) as ``name`` with a content hash; the file name."""
    digest = hashlib.sha256(data if data is not None else path.encode()).hexdigest()[:10]
    base, dot, ext = name.partition(".")
    out = f"{base}-{digest}{dot}{ext}"
    target = os.path.join(directory or os.getcwd(), out)
    if not os.path.exists(target):
        if data is not None:
            with open(target, "wb") as f:
                f.write(data)
        else:
            shutil.copyfile(path, target)
    return out


def _link(cls: str, name: str, what: str, data: bytes | None, mime: str, path: str | None = None,
          directory: str | None = None) -> str:
    size = len(data) if data is not None else os.path.getsize(path)
    if data is None and size <= MAX_DATA_URI:
        with open(path, "rb") as f:
            data = f.read()
    if size <= MAX_DATA_URI:
        return (f"<a class='{cls}' download='{escape(name)}' href='{data_uri(data, mime)}'>"
                f"⬇ {escape(what)} ({size:,} bytes)</a>")
    try:
        written = _beside_notebook(name, data, path, directory)
    except OSError as e:
        return f"{escape(what)} ({size:,} bytes) is too large for a link and could not be written: {escape(e)}"
    return (f"<a class='{cls}' download='{escape(written)}' href='{escape(written)}'>⬇ {escape(what)} "
            f"({size:,} bytes)</a>: larger than {MAX_DATA_URI // 2 ** 20} MB, so written next to the notebook "
            f"as <code>{escape(written)}</code>")


def speedscope_bytes(profile: Profile) -> bytes:
    from ..formats import speedscope
    return json.dumps(speedscope.to_dict(profile), ensure_ascii=True, separators=(",", ":")).encode("ascii")


def large_export(profile: Profile) -> bool:
    """True when the profile's speedscope JSON is built only when asked (over ``MAX_EXPORT`` frames)."""
    return int(flat(profile).lengths.sum()) > MAX_EXPORT


def downloads_html(profile: Profile, directory: str | None = None, export_large: bool = False) -> str:
    """Download links for the speedscope JSON and the raw capture (see the module docstring). The
    speedscope JSON of a profile of more than ``MAX_EXPORT`` frames (seconds to build) is made
    only with ``export_large``."""
    items = []
    raw = profile.raw
    if raw is None:
        items.append("Raw capture: none kept (this profile was built in memory).")
    else:
        name = raw.filename or stem(profile) + RAW_EXT.get(raw.format, "." + str(raw.format))
        what = f"raw capture ({raw.format})"
        if raw.data is not None or (raw.path and os.path.exists(raw.path)):
            items.append(_link("profmagic-raw", name, what, raw.data, "application/octet-stream", raw.path,
                               directory))
        else:
            items.append(f"Raw capture ({escape(raw.format)}): its file {escape(raw.path)} is gone.")
    if large_export(profile) and not export_large:
        items.append(f"speedscope JSON: not built for this display ({int(flat(profile).lengths.sum()):,} frames "
                     "would take seconds); "
                     "the live report's Raw tab writes it next to the notebook, or "
                     "<code>profmagic.save(p, 'profile.speedscope.json')</code>")
    else:
        items.append(_link("profmagic-speedscope", stem(profile) + ".speedscope.json", "speedscope JSON",
                           speedscope_bytes(profile), "application/json", directory=directory)
                     + " — opens in speedscope (www.speedscope.app: drop the file on the page; it stays in "
                       "your browser)")
    return "<div class='profmagic-downloads' style='font:13px sans-serif;line-height:1.8'>" + "<br>".join(items) \
        + "</div>"

"""The files a profile offers for download, the same in the notebook report and on the ``profmagic
view`` page: the profile as speedscope, gecko (Firefox Profiler) and Chrome trace (Perfetto) JSON,
and the profiler's raw capture. Names, suffixes and MIME types come from the formats' descriptors.

Each file is a ``data:`` URI of up to ``MAX_DATA_URI`` bytes (no server: a saved notebook, its
nbconvert HTML and the view page keep it). A larger one is written into ``beside`` (the notebook's
folder) once, under a name made from its content, and the link names it; with no ``beside`` the
link says how to make the file instead. An export of more frames than its ``MAX_EXPORT`` (seconds
to write) is built only when asked (``export_large``: the live report's button, the view page)."""
from __future__ import annotations

import base64
import hashlib
import html
import os
import re
import shutil
from dataclasses import dataclass

import numpy as np

from .model import Profile

MAX_DATA_URI = 10 * 1024 * 1024   # bytes per file; docs/report.md
# Frames (of the samples in time order, else of the stacks) each export is built for unasked: about
# 2 s each (gecko 6 us a frame, Chrome trace 22 us when every sample's stack differs).
MAX_EXPORT = {"speedscope": 1_000_000, "gecko": 300_000, "chrome_trace": 100_000}
WRITERS = ("speedscope", "gecko", "chrome_trace")   # the exports offered, in this order
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class Download:
    kind: str                # a format's NAME, or "raw"
    label: str
    filename: str
    mime: str = "application/octet-stream"
    data: bytes | None = None
    path: str | None = None  # a raw capture kept on disk
    note: str = ""           # why there is no file, when data and path are None
    opens: str = ""

    @property
    def size(self) -> int:
        return len(self.data) if self.data is not None else os.path.getsize(self.path) if self.path else 0


def stem(profile: Profile) -> str:
    keep = "".join(c if c.isalnum() or c in "-_" else "_" for c in str(profile.meta.get("backend")
                   or profile.meta.get("format") or "profile"))
    return f"profmagic-{keep[:40]}"


def frame_count(profile: Profile) -> int:
    """The frames a writer walks (what its time grows with): of every sample in time order when the
    profile has them, else of every stack."""
    from .derived import cached
    known = cached(profile, "flat")   # a view's stacks laid flat already know their lengths
    stacks = profile.stacks["stack"].to_numpy()
    depth = known.lengths if known is not None else np.fromiter(map(len, stacks), dtype=np.int64, count=len(stacks))
    if profile.samples is not None and len(depth):
        return int(depth[profile.samples["stack"].to_numpy(dtype=np.int64)].sum())
    return int(depth.sum())


def large_export(profile: Profile) -> bool:
    """True when some export is built only when asked (more frames than its ``MAX_EXPORT``)."""
    return frame_count(profile) > min(MAX_EXPORT.values())


def files(profile: Profile, export_large: bool = False) -> list[Download]:
    """Every download of ``profile``: the writers' files (``WRITERS``), then the raw capture."""
    from . import formats
    base = stem(profile)
    out = []
    frames = frame_count(profile)
    for name in WRITERS:
        fmt = formats.descriptor(name)
        filename = base + fmt.suffixes[0]
        if frames > MAX_EXPORT[name] and not export_large:
            out.append(Download(name, fmt.label, filename, fmt.mime, note=(
                f"not built for this display ({frames:,} frames would take seconds); the live "
                f"report's Raw tab builds it, or profmagic.save(p, 'profile{fmt.suffixes[0]}')")))
            continue
        try:
            data = fmt.writer(profile)
        except Exception as e:  # noqa: BLE001 - one writer failing must not hide the others
            out.append(Download(name, fmt.label, filename, fmt.mime,
                                note=f"could not be written ({type(e).__name__}: {e})"))
            continue
        out.append(Download(name, fmt.label, filename, fmt.mime, data=data, opens=fmt.opens))
    out.append(_raw(profile, base))
    return out


def _raw(profile: Profile, base: str) -> Download:
    from . import formats
    raw = profile.raw
    if raw is None:
        return Download("raw", "raw capture", "", note="none kept (this profile was built in memory)")
    fmt = formats.descriptor(raw.format)
    name = raw.filename or base + ".raw" + (fmt.raw_suffix if fmt else "." + str(raw.format))
    label = f"raw capture ({raw.format})"
    mime = fmt.mime if fmt else "application/octet-stream"
    if raw.data is not None:
        return Download("raw", label, name, mime, data=raw.data)
    if raw.path and os.path.exists(raw.path):
        return Download("raw", label, name, mime, path=raw.path)
    return Download("raw", label, name, mime, note=f"its file {raw.path} is gone")


def data_uri(data: bytes, mime: str = "application/octet-stream") -> str:
    return f"data:{mime};base64," + base64.b64encode(data).decode("ascii")


def _beside(d: Download, directory: str) -> str:
    """Write ``d`` (or copy its file) into ``directory`` as its name with a content hash, once; the name."""
    if d.data is not None:
        digest = hashlib.sha256(d.data).hexdigest()[:10]
    else:
        with open(d.path, "rb") as f:
            digest = hashlib.file_digest(f, "sha256").hexdigest()[:10]
    head, dot, ext = d.filename.partition(".")
    out = f"{head}-{digest}{dot}{ext}"
    target = os.path.join(directory, out)
    if not os.path.exists(target):
        if d.data is not None:
            with open(target, "wb") as f:
                f.write(d.data)
        else:
            shutil.copyfile(d.path, target)
    return out


def link_html(d: Download, beside: str | None = None) -> str:
    """One download: an <a download> link with its size, or what stands in for it."""
    e = html.escape
    cls = "profmagic-" + d.kind.replace("_", "-")
    opens = f" — {e(d.opens)}" if d.opens else ""
    if d.data is None and d.path is None:
        return f"{e(d.label)}: {e(d.note)}"
    size = d.size
    if size <= MAX_DATA_URI:
        data = d.data
        if data is None:
            with open(d.path, "rb") as f:
                data = f.read()
        return (f"<a class='{cls}' download='{e(d.filename)}' href='{data_uri(data, d.mime)}'>"
                f"⬇ {e(d.label)}</a> <span style='color:#666'>{e(d.filename)}, {size:,} bytes</span>{opens}")
    too_large = f"larger than {MAX_DATA_URI // 2 ** 20} MB"
    if beside is None:
        how = f"on disk at {e(d.path)}" if d.path else (
            f"profmagic convert FILE {e(d.filename)}" if d.kind != "raw" else "open(path, 'wb').write(p.raw.read())")
        return f"{e(d.label)}: {size:,} bytes, {too_large} to inline: {how}"
    try:
        written = _beside(d, beside)
    except OSError as err:
        return f"{e(d.label)} ({size:,} bytes) is too large for a link and could not be written: {e(str(err))}"
    return (f"<a class='{cls}' download='{e(written)}' href='{e(written)}'>⬇ {e(d.label)}</a> "
            f"<span style='color:#666'>{size:,} bytes</span>: {too_large}, so written next to the notebook "
            f"as <code>{e(written)}</code>{opens}")


def links_html(profile: Profile, beside: str | None = None, export_large: bool = False) -> str:
    """Every download of ``profile``, one line each (see the module docstring for ``beside``)."""
    rows = [link_html(d, beside) for d in files(profile, export_large)]
    return encodable("<div class='profmagic-downloads' style='font:13px sans-serif;line-height:1.8'>"
                     + "<br>".join(rows) + "</div>")


def encodable(text: str) -> str:
    """``text`` with each lone surrogate (a name from JSON's "\\ud800", or an undecodable byte kept by
    surrogateescape) as the text ``\\ud800``: a page is UTF-8, which has none."""
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text) if _SURROGATE.search(text) else text

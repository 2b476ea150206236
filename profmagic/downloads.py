"""The files a report offers for download: the profile as speedscope, gecko (Firefox Profiler) and
Chrome trace (Perfetto) JSON, and the profiler's raw capture, each as a data URI (no server).
A file larger than MAX_DATA_URI is not inlined: the page says how to write it instead."""
from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass

from .model import Profile

MAX_DATA_URI = 20 * 1024 * 1024
_SURROGATE = re.compile("[\ud800-\udfff]")
# (format module, file suffix, what it opens in)
WRITERS = (("speedscope", ".speedscope.json", "speedscope (speedscope.app)"),
           ("gecko", ".gecko.json", "gecko (Firefox Profiler, profiler.firefox.com)"),
           ("chrome_trace", ".trace.json", "Chrome trace (Perfetto, ui.perfetto.dev; chrome://tracing)"))
RAW_EXT = {"speedscope": ".speedscope.json", "folded": ".folded", "pstats": ".pstats", "perf_script": ".perf.txt",
           "pyinstrument": ".pyisession", "eu_stack": ".eu-stack.txt", "stap": ".stap.txt", "memray": ".bin",
           "chrome_trace": ".trace.json", "gecko": ".gecko.json", "profmagic-container": ".zip",
           "profmagic-children": ".jsonl"}


@dataclass
class Download:
    label: str
    filename: str
    data: bytes | None       # None: not inlined (see note)
    note: str = ""


def stem(profile: Profile) -> str:
    keep = "".join(c if c.isalnum() or c in "-_" else "_" for c in str(profile.meta.get("backend")
                   or profile.meta.get("format") or "profile"))
    return f"profmagic-{keep[:40]}"


def files(profile: Profile) -> list[Download]:
    """Every download of ``profile``: the three writers' files, then the raw capture."""
    from . import formats
    out = []
    base = stem(profile)
    for fmt, suffix, label in WRITERS:
        try:
            data = formats.get(fmt).write(profile)
        except Exception as e:  # noqa: BLE001 - one writer failing must not hide the others
            out.append(Download(label, base + suffix, None, f"could not be written ({type(e).__name__}: {e})"))
            continue
        if len(data) > MAX_DATA_URI:
            out.append(Download(label, base + suffix, None, f"{len(data):,} bytes, too large to inline: "
                                f"profmagic convert FILE {base + suffix}"))
        else:
            out.append(Download(label, base + suffix, data))
    raw = profile.raw
    if raw is None:
        out.append(Download("raw capture", "", None, "none kept (this profile was built in memory)"))
    else:
        name = raw.filename or base + ".raw" + RAW_EXT.get(raw.format, "." + str(raw.format))
        label = f"raw capture ({raw.format})"
        if raw.data is not None and raw.size <= MAX_DATA_URI:
            out.append(Download(label, name, raw.data))
        elif raw.path:
            out.append(Download(label, name, None, f"{raw.size:,} bytes, on disk at {raw.path}"))
        else:
            out.append(Download(label, name, None, f"{raw.size:,} bytes, too large to inline: "
                                "open(path, 'wb').write(p.raw.read())"))
    return out


def data_uri(data: bytes, mime: str = "application/octet-stream") -> str:
    return f"data:{mime};base64," + base64.b64encode(data).decode("ascii")


def links_html(profile: Profile) -> str:
    """One line per download: an <a download> link, or what stands in for it."""
    rows = []
    for d in files(profile):
        e = html.escape
        if d.data is not None:
            mime = "application/json" if d.filename.endswith(".json") else "application/octet-stream"
            rows.append(f"<a class='profmagic-download' download='{e(d.filename, quote=True)}' "
                        f"href='{data_uri(d.data, mime)}'>⬇ {e(d.label)}</a> "
                        f"<span style='color:#666'>{e(d.filename)}, {len(d.data):,} bytes</span>")
        else:
            rows.append(f"{e(d.label)}: {e(d.note)}")
    return encodable("<div class='profmagic-downloads' style='font:13px sans-serif;line-height:1.8'>"
                     + "<br>".join(rows) + "</div>")


def encodable(text: str) -> str:
    """``text`` with each lone surrogate (a name from JSON's "\\ud800", or an undecodable byte kept by
    surrogateescape) as the text ``\\ud800``: a page is UTF-8, which has none."""
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text) if _SURROGATE.search(text) else text

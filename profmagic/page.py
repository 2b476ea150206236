"""A profile as one self-contained HTML page (``profmagic view``): the static report (header, SVG
icicle, function table; no script, no network) with the notebook report's downloads inlined."""
from __future__ import annotations

import html

from .model import Profile


def standalone(profile: Profile, title: str | None = None) -> str:
    """The page, as text that encodes to UTF-8 (names are kept; lone surrogates shown as escapes)."""
    from . import downloads, report
    # The notebook report's downloads; a file too large for a link says how to make it (the page
    # writes no file beside itself).
    links = downloads.links_html(profile, beside=None, export_large=True)
    title = title or f"profmagic · {profile.describe()}"
    return downloads.encodable("<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            f"<title>{html.escape(title)}</title>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            "<style>body{margin:16px;font-family:sans-serif}"
            "table.profmagic-functions{border-collapse:collapse;font-size:12px}"
            "table.profmagic-functions td,table.profmagic-functions th{padding:2px 8px;text-align:left}"
            "</style></head><body>\n"
            + report.static_html(profile, downloads=links)
            + facts_html(profile)
            + "\n</body></html>\n")


FACTS = (("command", "Command"), ("exit_status", "Exit status"), ("ended_by", "Ended by"), ("timing", "Timing"),
         ("cpu_method", "CPU"), ("partial", "Partial"))


def facts_html(profile: Profile) -> str:
    """What the recording was: the command, how it ended, how its seconds were made."""
    rows = []
    for key, label in FACTS:
        v = profile.meta.get(key)
        if v is None:
            continue
        text = " ".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)
        rows.append(f"<tr><th>{html.escape(label)}</th><td>{html.escape(text)}</td></tr>")
    if not rows:
        return ""
    return ("\n<table class='profmagic-facts' style='font:12px sans-serif;margin:12px 0;text-align:left'>"
            + "".join(rows) + "</table>")

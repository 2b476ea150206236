"""The header and downloads of a Profile's display: its honest one-line description, the notes a
reader needs to trust it, and its downloads (``profmagic.downloads``: the same as the ``profmagic
view`` page's)."""
from __future__ import annotations

import html
import os

from .. import uncertainty
from ..downloads import links_html
from ..model import MEMORY_METRICS, METRIC_LABELS, Profile
from .memo import functions


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
    why = m.get("reasons")   # why off-CPU (reasons.py): what this backend cannot see
    if isinstance(why, dict) and why.get("cannot_see"):
        out.append(f"Off-CPU reasons: {backend} cannot see {why['cannot_see']}")
    if m.get("cost"):
        out.append(f"Cost: {m['cost']}")
    py = m.get("python_names")   # perf on 3.11: names from the poller's snapshots (formats/perf_pyframes.py)
    if isinstance(py, dict) and (py.get("from") or py.get("error")):
        out.append("Python names: " + ("; ".join(str(py[k]) for k in ("from", "off_cpu", "on_cpu", "unnamed") if py.get(k))
                                       if py.get("from") else "none (perf sees interpreter frames only)")
                   + (f" ({py['error']})" if py.get("error") else ""))
    return out


def resolution(profile: Profile) -> str:
    """How sure the figures are, in words (``uncertainty.resolution``); empty for an empty profile."""
    if profile.is_empty:
        return ""
    try:
        return uncertainty.resolution(profile, profile.metric, functions(profile, profile.metric))
    except (KeyError, ValueError):   # a metric without weights: nothing to resolve
        return ""


def chain_sentence(profile: Profile) -> str | None:
    """The wait chain in one sentence (profmagic/waits.py), for profiles with reasons."""
    from .. import waits
    try:
        return waits.sentence(profile) if waits.has_reasons(profile) else None
    except Exception as e:   # the header still helps without it
        return f"(the wait chain is unavailable: {type(e).__name__}: {e})"


def header_html(profile: Profile) -> str:
    lines = [f"<b>{escape(profile.describe())}</b>"]
    why = chain_sentence(profile)
    if why:
        lines.append(f"<span class='profmagic-chain-sentence'>{escape(why)}</span>")
    res = resolution(profile)
    if res:
        lines.append(f"<span class='profmagic-resolution' style='color:#444'>{escape(res)}</span>")
    lines += [f"<span style='color:#b45309'>⚠ {escape(n)}</span>" for n in notes(profile)]
    return ("<div class='profmagic-header' style='font-family:sans-serif;font-size:13px'>" + "<br>".join(lines)
            + "</div>")


def downloads_html(profile: Profile, directory: str | None = None, export_large: bool = False) -> str:
    """The notebook's downloads (``downloads.links_html``, as on the ``profmagic view`` page): a file
    too large for a link is written into ``directory`` (default: the working directory, which is the
    notebook's in a Jupyter kernel)."""
    return links_html(profile, beside=directory or os.getcwd(), export_large=export_large)

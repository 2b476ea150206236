"""Static HTML of a Profile: header, SVG icicle, function table, tables and downloads; no script.

For outputs seen without a kernel (nbconvert, GitHub, nbviewer), and as pieces of the live widget.
"""
from __future__ import annotations

import base64
import html
import json

import numpy as np
import pandas as pd

from .. import multi
from ..model import METRIC_LABELS, Profile
MAX_DATA_URI = 20 * 1024 * 1024  # larger captures are pointed to on disk
RAW_EXT = {"speedscope": ".speedscope.json", "folded": ".folded", "pstats": ".pstats", "perf_script": ".perf.txt",
           "perf": ".perf.data", "pyinstrument": ".pyisession", "eu_stack": ".eu-stack.txt", "stap": ".stap.txt"}
TOP_FUNCTIONS = 25


def escape(s) -> str:
    return html.escape(str(s), quote=True)


# -- pieces shared by the widget and the static HTML ------------------------------------------
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
    ended = [(k, v.get("ended_at")) for k, v in (m.get("processes") or {}).items()
             if isinstance(v, dict) and v.get("ended")]
    if ended:
        out.append("Ended during the recording (nothing after that is in the profile): " + "; ".join(
            f"{k} at +{at:.2f} s" if isinstance(at, (int, float)) and at == at else str(k) for k, at in ended))
    backend = profile.meta.get("backend") or profile.meta.get("format") or "this source"
    for m in ("wall", "cpu"):
        if m in profile.stacks and not profile.stacks[m].notna().any():
            out.append(f"{METRIC_LABELS[m]}: not measured ({backend} cannot know it)")
    return out


def header_html(profile: Profile) -> str:
    lines = [f"<b>{escape(profile.describe())}</b>"]
    lines += [f"<span style='color:#b45309'>⚠ {escape(n)}</span>" for n in notes(profile)]
    return "<div class='profmagic-header' style='font-family:sans-serif;font-size:13px'>" + "<br>".join(lines) + "</div>"


def functions_html(profile: Profile, metric: str, top: int = TOP_FUNCTIONS, thread: str | None = None) -> str:
    from ..views import sandwich
    df = sandwich.table(profile, metric, thread).head(top)
    unit = METRIC_LABELS.get(metric, metric)
    show = pd.DataFrame({
        "function": df["name"].astype(str),
        f"total ({unit})": [f"{v:.4g}" for v in df["total"]],
        "total %": [f"{v:.1f}" for v in df["total_pct"]],
        f"self ({unit})": [f"{v:.4g}" for v in df["self"]],
        "self %": [f"{v:.1f}" for v in df["self_pct"]],
        "file": df["file"].astype(str),
    })
    return show.to_html(index=False, escape=True, border=0, classes="profmagic-functions")


def static_html(profile: Profile, uid: str = "") -> str:
    """Self-contained HTML, no script and no network: header, SVG icicle and the function table.
    A live widget with the same ``uid`` hides it (see ``Report``)."""
    from ..views import icicle
    metric = profile.metric
    try:
        pic = icicle.svg(profile, metric)
    except Exception as e:  # the table and header still help; say what failed
        pic = f"<p>(icicle unavailable: {escape(e)})</p>"
    procs = ""
    if len(multi.processes(profile)) > 1:
        from ..views import ranks
        try:
            procs = ("<div style='font:12px sans-serif;margin:6px 0 2px'>Processes side by side</div>"
                     + ranks.html(profile, metric, include_plotlyjs=False))
        except Exception as e:  # the rest still helps; say what failed
            procs = f"<p>(ranks unavailable: {escape(type(e).__name__)}: {escape(e)})</p>"
    return (f"<div class='profmagic-report profmagic-static profmagic-static-{uid}' "
            "style='max-width:100%;overflow-x:auto'>"
            + header_html(profile)
            + f"<div style='font:12px sans-serif;margin:4px 0'>Icicle · {escape(profile.describe())} · "
              "all threads; hover a box for its numbers</div>" + pic
            + procs
            + f"<div style='font:12px sans-serif;margin:6px 0 2px'>Top {TOP_FUNCTIONS} functions by total</div>"
            + functions_html(profile, metric) + "</div>")


def _data_uri(data: bytes, mime: str) -> str:
    return f"data:{mime};base64," + base64.b64encode(data).decode("ascii")


def _stem(profile: Profile) -> str:
    keep = "".join(c if c.isalnum() or c in "-_" else "_" for c in str(profile.meta.get("backend")
                   or profile.meta.get("format") or "profile"))
    return f"profmagic-{keep[:40]}"


def downloads_html(profile: Profile) -> str:
    """<a download> links with data URIs (no server); a large raw capture is pointed to on disk."""
    items = []
    raw = profile.raw
    if raw is None:
        items.append("Raw capture: none kept (this profile was built in memory).")
    else:
        name = raw.filename or _stem(profile) + RAW_EXT.get(raw.format, "." + str(raw.format))
        size = raw.size
        if raw.data is not None and size <= MAX_DATA_URI:
            items.append(f"<a class='profmagic-raw' download='{escape(name)}' "
                         f"href='{_data_uri(raw.data, 'application/octet-stream')}'>"
                         f"⬇ raw capture ({escape(raw.format)}, {size:,} bytes)</a>")
        elif raw.path:
            items.append(f"Raw capture ({escape(raw.format)}, {size:,} bytes) is on disk: "
                         f"<code>{escape(raw.path)}</code>")
        else:
            items.append(f"Raw capture ({escape(raw.format)}, {size:,} bytes) is too large for a link; "
                         "save it with <code>open(path, 'wb').write(p.raw.read())</code>.")
    doc = json.dumps(profile.to_speedscope(), ensure_ascii=True, separators=(",", ":")).encode("ascii")
    if len(doc) <= MAX_DATA_URI:
        items.append(f"<a class='profmagic-speedscope' download='{_stem(profile)}.speedscope.json' "
                     f"href='{_data_uri(doc, 'application/json')}'>⬇ speedscope JSON ({len(doc):,} bytes)</a>"
                     " — opens in <a href='https://www.speedscope.app' target='_blank' rel='noopener'>speedscope</a>")
    else:
        items.append(f"speedscope JSON is {len(doc):,} bytes, too large for a link: "
                     "<code>p.save('profile.speedscope.json')</code>")
    return "<div style='font:13px sans-serif;line-height:1.8'>" + "<br>".join(items) + "</div>"


def table_html(profile: Profile, metric: str, thread: str | None) -> str:
    """The pandas frames behind the views: functions, per-thread totals, heaviest stacks."""
    from ..views import tree as T
    parts = ["<div style='font:12px sans-serif'>", "<b>Functions</b> (<code>p.functions()</code>)",
             functions_html(profile, metric, top=100, thread=thread)]
    st = profile.stacks
    per = st.groupby("thread", sort=False)[[c for c in ("samples", "wall", "cpu") if c in st]].sum(min_count=1)
    parts += ["<b>Threads</b>", per.to_html(escape=True, border=0, na_rep="n/a (not measured)")]
    w, _ = T.metric_weights(profile, metric)
    rows = T.thread_rows(profile, thread)
    top = rows[np.argsort(-w[rows], kind="stable")][:30]
    names = profile.frames["name"]
    heavy = pd.DataFrame({"thread": st["thread"].to_numpy()[top],
                          metric: w[top],
                          "stack (root;…;leaf)": [";".join(str(names.get(f, f)) for f in st.at[i, "stack"])[-400:]
                                                  for i in top]})
    parts += ["<b>Heaviest stacks</b> (<code>p.stacks</code>)", heavy.to_html(index=False, escape=True, border=0)]
    if profile.samples is not None:
        parts.append(f"<code>p.samples</code>: {len(profile.samples):,} samples in time order")
    return "".join(parts) + "</div>"

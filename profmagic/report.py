"""The display of every Profile: a live widget (tabs Icicle | Sandwich | Time order | Table | Raw,
thread and metric pickers, downloads) and a static fallback (SVG icicle + summary table) for
outputs seen without a kernel (nbconvert, GitHub, nbviewer).

Figures go into ipywidgets.Output as plotly's own mime type, drawn by the plotly renderer the
front end already has: a plotly FigureWidget would send its 5 MB JavaScript bundle per figure.
"""
from __future__ import annotations

import base64
import html
import json

import numpy as np
import pandas as pd

from . import multi
from .model import MEMORY_METRICS, METRIC_LABELS, Profile

PLOTLY_MIME = "application/vnd.plotly.v1+json"
MAX_DATA_URI = 20 * 1024 * 1024  # larger captures are pointed to on disk
RAW_EXT = {"speedscope": ".speedscope.json", "folded": ".folded", "pstats": ".pstats", "perf_script": ".perf.txt",
           "perf": ".perf.data", "pyinstrument": ".pyisession", "eu_stack": ".eu-stack.txt", "stap": ".stap.txt",
           "memray": ".bin"}
TOP_FUNCTIONS = 25


def _e(s) -> str:
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
    lines = [f"<b>{_e(profile.describe())}</b>"]
    lines += [f"<span style='color:#b45309'>⚠ {_e(n)}</span>" for n in notes(profile)]
    return "<div class='profmagic-header' style='font-family:sans-serif;font-size:13px'>" + "<br>".join(lines) + "</div>"


def functions_html(profile: Profile, metric: str, top: int = TOP_FUNCTIONS, thread: str | None = None) -> str:
    from .views import fmt, sandwich
    df = sandwich.table(profile, metric, thread).head(top)
    unit = profile.label(metric)
    num = (lambda v: fmt(metric, v)) if metric in MEMORY_METRICS else (lambda v: f"{v:.4g}")
    show = pd.DataFrame({
        "function": df["name"].astype(str),
        f"total ({unit})": [num(v) for v in df["total"]],
        "total %": [f"{v:.1f}" for v in df["total_pct"]],
        f"self ({unit})": [num(v) for v in df["self"]],
        "self %": [f"{v:.1f}" for v in df["self_pct"]],
        "file": df["file"].astype(str),
    })
    return show.to_html(index=False, escape=True, border=0, classes="profmagic-functions")


def static_html(profile: Profile, uid: str = "") -> str:
    """Self-contained HTML, no script and no network: header, SVG icicle and the function table.
    A live widget with the same ``uid`` hides it (see ``Report``)."""
    from .views import icicle
    metric = profile.metric
    try:
        pic = icicle.svg(profile, metric)
    except Exception as e:  # the table and header still help; say what failed
        pic = f"<p>(icicle unavailable: {_e(e)})</p>"
    procs = ""
    if len(multi.processes(profile)) > 1:
        from .views import ranks
        try:
            procs = ("<div style='font:12px sans-serif;margin:6px 0 2px'>Processes side by side</div>"
                     + ranks.html(profile, metric, include_plotlyjs=False))
        except Exception as e:  # the rest still helps; say what failed
            procs = f"<p>(ranks unavailable: {_e(type(e).__name__)}: {_e(e)})</p>"
    return (f"<div class='profmagic-report profmagic-static profmagic-static-{uid}' "
            "style='max-width:100%;overflow-x:auto'>"
            + header_html(profile)
            + f"<div style='font:12px sans-serif;margin:4px 0'>Icicle · {_e(profile.describe())} · "
              "all threads; hover a box for its numbers</div>" + pic
            + _memory_static(profile)
            + procs
            + f"<div style='font:12px sans-serif;margin:6px 0 2px'>Top {TOP_FUNCTIONS} functions by total</div>"
            + functions_html(profile, metric) + "</div>")


# -- memory (views/memory.py): the strip under the icicle, time beside memory per function ---------------
def _memory_static(profile: Profile) -> str:
    from .views import memory
    if not memory.available(profile)[0]:
        return ""
    try:
        out = memory.strip_html(profile)
        if memory.has_time_and_memory(profile):
            out += ("<div style='font:12px sans-serif;margin:6px 0 2px'>Time beside memory (totals per function)"
                    "</div>" + memory.side_by_side_html(profile))
        return out
    except Exception as e:  # the rest of the report still helps; say what failed
        return f"<p>(memory over time unavailable: {_e(type(e).__name__)}: {_e(e)})</p>"


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
            items.append(f"<a class='profmagic-raw' download='{_e(name)}' "
                         f"href='{_data_uri(raw.data, 'application/octet-stream')}'>"
                         f"⬇ raw capture ({_e(raw.format)}, {size:,} bytes)</a>")
        elif raw.path:
            items.append(f"Raw capture ({_e(raw.format)}, {size:,} bytes) is on disk: "
                         f"<code>{_e(raw.path)}</code>")
        else:
            items.append(f"Raw capture ({_e(raw.format)}, {size:,} bytes) is too large for a link; "
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
    from .views import tree as T
    from .views import memory
    parts = ["<div style='font:12px sans-serif'>", "<b>Functions</b> (<code>p.functions()</code>)",
             functions_html(profile, metric, top=100, thread=thread)]
    if memory.has_time_and_memory(profile):
        parts += ["<b>Time beside memory</b> (wall, CPU and bytes at the high-water mark per function, all threads)",
                  memory.side_by_side_html(profile, top=100)]
    st = profile.stacks
    per = st.groupby("thread", sort=False)[[c for c in ("samples", "wall", "cpu") + MEMORY_METRICS
                                            if c in st]].sum(min_count=1)
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


def _plotly_output(fig) -> dict:
    return {"output_type": "display_data", "metadata": {},
            "data": {PLOTLY_MIME: json.loads(fig.to_json()), "text/plain": "<plotly figure>"}}


def _html_output(text: str) -> dict:
    return {"output_type": "display_data", "metadata": {}, "data": {"text/html": text, "text/plain": ""}}


# -- the live widget --------------------------------------------------------------------------------
class Report:
    """The interactive report. ``Report(p).widget`` is an ipywidgets.VBox."""

    TABS = ("Icicle", "Sandwich", "Time order", "Table", "Raw")

    def __init__(self, profile: Profile, uid: str = ""):
        import ipywidgets as W
        self.p = profile
        self.W = W
        # A multi-process profile gets a Ranks tab (processes side by side) after Time order.
        self.TABS = self.TABS[:3] + ("Ranks",) + self.TABS[3:] if len(multi.processes(profile)) > 1 else self.TABS
        metrics = profile.metrics
        self.metric = W.Dropdown(options=[(profile.label(m), m) for m in metrics],
                                 value=profile.metric if profile.metric in metrics else metrics[0],
                                 description="metric", layout=W.Layout(width="260px"))
        threads = profile.threads
        self.thread = W.Dropdown(options=[("all threads (merged)", -1)] + [(str(t), i) for i, t in enumerate(threads)],
                                 value=-1, description="thread", layout=W.Layout(width="300px"))
        self.colour = W.Dropdown(options=[("kind", "kind"), ("module", "module")], value="kind",
                                 description="colour", layout=W.Layout(width="170px"))
        self.min_pct = W.BoundedFloatText(value=0.0, min=0.0, max=50.0, step=0.1, description="fold < %",
                                          tooltip="fold call-tree nodes under this share of the view into (other)",
                                          layout=W.Layout(width="150px"))
        self.panes = [W.VBox() for _ in self.TABS]
        self.tabs = W.Tab(children=self.panes, titles=self.TABS)
        self.built = [False] * len(self.TABS)
        self.sw_list = None
        # Its static twin (a separate output, for viewers without a widget manager) stays visible
        # until this widget's first plotly figure is drawn: JupyterLab loads plotly.js (4.8 MB) on
        # first use, and the static SVG icicle fills that second.
        hide = (f"<style>body:has(.profmagic-w-{uid} .js-plotly-plot) .profmagic-static-{uid}{{display:none}}"
                f"body:has(.profmagic-w-{uid} .js-plotly-plot) .jp-OutputArea-child:has(.profmagic-static-{uid})"
                "{display:none}</style>") if uid else ""
        header = W.HTML(hide + header_html(profile))
        controls = W.HBox([self.thread, self.metric, self.colour, self.min_pct])
        # Click a node in an icicle -> "show in Sandwich" (ClickBridge relays plotly's click event).
        self.clicked = None
        self.click_label = W.HTML("<span style='font:12px sans-serif;color:#555'>click a box in the icicle, "
                                  "then show its function in Sandwich</span>")
        self.to_sandwich = W.Button(description="show in Sandwich", disabled=True, icon="columns",
                                    layout=W.Layout(width="170px"))
        self.to_sandwich.add_class("profmagic-to-sandwich")
        self.to_sandwich.on_click(lambda _: self.show_in_sandwich())
        click_row = [self.to_sandwich, self.click_label]
        try:
            self.bridge = ClickBridge()
            self.bridge.observe(lambda ch: self.clicked_node(ch["new"]), names="clicked")
            click_row.append(self.bridge)
        except ImportError:  # no anywidget: the Sandwich tab's own list still works
            self.bridge = None
        self.widget = W.VBox([header, controls, W.HBox(click_row), self.tabs])
        self.widget.add_class("profmagic-widget")
        if uid:
            self.widget.add_class(f"profmagic-w-{uid}")
        for c in (self.metric, self.thread, self.colour, self.min_pct):
            c.observe(self._changed, names="value")
        self.tabs.observe(lambda ch: self._show(ch["new"]), names="selected_index")
        self._show(0)

    # state
    @property
    def thread_name(self):
        i = self.thread.value
        return None if i == -1 else self.p.threads[i]

    def _changed(self, _=None):
        self.built = [False] * len(self.TABS)
        self._show(self.tabs.selected_index or 0)

    def _show(self, i):
        if i is None or self.built[i]:
            return
        self.built[i] = True
        try:
            self.panes[i].children = getattr(self, "_tab_" + self.TABS[i].split()[0].lower())()
        except Exception as e:  # show the error in the tab rather than a dead widget
            self.panes[i].children = [self.W.HTML(f"<pre>{_e(type(e).__name__)}: {_e(e)}</pre>")]

    def _out(self, output: dict):
        o = self.W.Output()
        o.outputs = (output,)
        return o

    # tabs
    def _tab_icicle(self):
        fig = self.p.icicle(metric=self.metric.value, thread=self.thread_name, colour=self.colour.value,
                            min_share=self.min_pct.value / 100)
        return [self._out(_plotly_output(fig))]

    def _tab_sandwich(self):
        from .views import sandwich
        W = self.W
        self.sw_filter = W.Text(placeholder="regex on name or file", description="filter",
                                layout=W.Layout(width="320px"))
        self.sw_sort = W.Dropdown(options=["total", "self", "name"], value="total", description="sort by",
                                  layout=W.Layout(width="180px"))
        self.sw_list = W.Select(options=[], rows=12, layout=W.Layout(width="100%"))
        self.sw_list.add_class("profmagic-functions-list")
        self.sw_msg = W.HTML()
        self.sw_fig = W.Output()

        def refresh(_=None):
            try:
                df = sandwich.table(self.p, self.metric.value, self.thread_name, self.sw_filter.value or None,
                                    self.sw_sort.value)
                self.sw_msg.value = f"{len(df):,} functions"
            except Exception as e:  # a bad regex, typically
                self.sw_msg.value = f"<span style='color:#b91c1c'>{_e(e)}</span>"
                return
            df = df.head(500)
            # Select options render as text, never HTML.
            self.sw_list.options = [(f"{t:6.1f}% total {s:6.1f}% self   {n}   {f}", int(i)) for i, n, f, t, s in
                                    zip(df.index, df["name"], df["file"], df["total_pct"], df["self_pct"])]
            self.sw_list.value = None

        def pick(ch):
            if ch["new"] is None:
                return
            fig = self.p.sandwich(int(ch["new"]), metric=self.metric.value, thread=self.thread_name,
                                  colour=self.colour.value, min_share=self.min_pct.value / 100)
            self.sw_fig.outputs = (_plotly_output(fig),)

        self.sw_filter.observe(refresh, names="value")
        self.sw_sort.observe(refresh, names="value")
        self.sw_list.observe(pick, names="value")
        refresh()
        return [W.HBox([self.sw_filter, self.sw_sort, self.sw_msg]), self.sw_list, self.sw_fig]

    def clicked_node(self, ev):
        """A box was clicked in a report icicle: ``ev["key"]`` is its function id (views.icicle.trace)."""
        key = (ev or {}).get("key")
        if not isinstance(key, int) or key < 0:
            return
        names = self.p.frames.groupby(self.p.function_ids()[self.p.frames.index.to_numpy()])["name"].first()
        if key not in names.index:
            return
        self.clicked = key
        self.click_label.value = (f"<span style='font:12px sans-serif'>clicked: <b class='profmagic-clicked'>"
                                  f"{_e(names[key])}</b></span>")
        self.to_sandwich.disabled = False

    def show_in_sandwich(self, key: int | None = None):
        """Open the Sandwich tab on function ``key`` (default: the last clicked box)."""
        key = self.clicked if key is None else int(key)
        if key is None:
            return
        i = self.TABS.index("Sandwich")
        self.tabs.selected_index = i
        self._show(i)
        if self.sw_filter.value:
            self.sw_filter.value = ""
        if key not in [v for _, v in self.sw_list.options]:
            df = self.p.functions(self.metric.value)
            row = df.loc[key] if key in df.index else None
            label = f"(picked) {row['name']}   {row['file']}" if row is not None else f"(picked) function {key}"
            self.sw_list.options = list(self.sw_list.options) + [(label, key)]
        self.sw_list.value = key

    def _tab_ranks(self):
        from .views import ranks
        note = "" if self.thread_name is None else " (all threads of each process; the thread picker does not apply)"
        box = ranks.widget(self.p, metric=self.metric.value)
        self.ranks = box
        return [self.W.HTML(f"<span style='font:12px sans-serif'>{_e(note)}</span>"), box] if note else [box]

    def _tab_time(self):
        from .views import memory, timeline
        ok, why = timeline.available(self.p)
        out = [self._out(_plotly_output(self.p.timeline(thread=self.thread_name, metric=self.metric.value)))] if ok \
            else [self.W.HTML(f"<p style='font:13px sans-serif'>{_e(why)}.</p>")]
        if memory.available(self.p)[0]:   # memray's heap over time under the samples (or alone)
            out.append(self._out(_plotly_output(memory.figure(self.p))))
        return out

    def _tab_table(self):
        return [self._out(_html_output(header_html(self.p) + table_html(self.p, self.metric.value,
                                                                         self.thread_name)))]

    def _tab_raw(self):
        return [self.W.HTML(header_html(self.p) + downloads_html(self.p))]


_CLICK_ESM = """
function render({ model, el }) {
  // Relay plotly_click on any icicle in this report to Python: customdata[5] is the function id.
  let n = 0;
  const bind = () => {
    const root = el.closest('.profmagic-widget');
    if (!root) return;
    for (const plot of root.querySelectorAll('.js-plotly-plot')) {
      if (plot.__profmagicClick || typeof plot.on !== 'function') continue;
      plot.__profmagicClick = true;
      plot.on('plotly_click', (ev) => {
        const pt = ev && ev.points && ev.points[0];
        const key = pt && pt.customdata ? pt.customdata[5] : null;
        if (typeof key !== 'number' || key < 0) return;
        model.set('clicked', { key: key, label: String(pt.label), n: ++n });
        model.save_changes();
      });
    }
  };
  const timer = setInterval(bind, 300);
  return () => clearInterval(timer);
}
export default { render };
"""


def _click_bridge_class():
    import anywidget
    import traitlets

    class _ClickBridge(anywidget.AnyWidget):
        _esm = _CLICK_ESM
        clicked = traitlets.Dict().tag(sync=True)
    return _ClickBridge


_BRIDGE = None


def ClickBridge():
    """A hidden anywidget that reports the last icicle box clicked in its report."""
    global _BRIDGE
    if _BRIDGE is None:
        _BRIDGE = _click_bridge_class()
    return _BRIDGE()


def _live_kernel() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    ip = get_ipython()
    return ip is not None and getattr(ip, "kernel", None) is not None


def widget(profile: Profile, uid: str = ""):
    return Report(profile, uid).widget


def fallback(profile: Profile, error: BaseException) -> dict:
    """When building the report fails: the profile's repr and the error, never nothing."""
    try:
        text = repr(profile)
    except Exception as e:  # a profile too broken to describe itself
        text = f"<Profile (repr failed: {type(e).__name__}: {e})>"
    why = f"profmagic: the report could not be built ({type(error).__name__}: {error})"
    return {"text/plain": f"{text}\n{why}",
            "text/html": f"<pre>{_e(text)}</pre><pre style='color:#b91c1c'>{_e(why)}</pre>"}


def mimebundle(profile: Profile) -> dict:
    """The display of a Profile (see ``_mimebundle``); if building it fails for any reason, the
    repr and the error, so a broken view never hides the profile."""
    try:
        return _mimebundle(profile)
    except Exception as e:
        return fallback(profile, e)


def _mimebundle(profile: Profile) -> dict:
    """text/plain and a static text/html; under a live kernel, the widget view instead.

    With a kernel, the static HTML goes out first as its own output: nbconvert prefers the widget
    view whenever widget state was saved (nbclient saves it) and would then draw nothing offline.
    The live widget hides that twin with a style scoped to ``uid``.
    """
    if not _live_kernel():
        return {"text/plain": repr(profile), "text/html": static_html(profile)}
    import uuid
    from IPython.display import display
    uid = uuid.uuid4().hex[:12]
    try:
        view = widget(profile, uid)._repr_mimebundle_()
    except ImportError:  # ipywidgets missing: the static HTML alone
        return {"text/plain": repr(profile), "text/html": static_html(profile)}
    display({"text/html": static_html(profile, uid)}, raw=True)
    return {"text/plain": repr(profile), **{k: v for k, v in (view or {}).items() if k != "text/plain"}}

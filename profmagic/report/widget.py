"""The live report widget: tabs built from (title, builder) pairs, thread, metric, colour and
boilerplate pickers, and "show in Sandwich" / "show source" for a box clicked in an icicle.

Figures go into ipywidgets.Output as plotly's own mime type (``views.mime``). A tab is built when
it is first shown, and again after a picker changes.
"""
from __future__ import annotations

import weakref

from .. import multi
from ..model import Profile
from ..downloads import large_export
from ..views.mime import figure_output, html_output, widget as output_widget
from . import keep
from .clickbridge import ClickBridge
from .static import downloads_html, escape, header_html, table_html


class ProfileGone(RuntimeError):
    """The report's profile was deleted from the kernel."""


DELETED = "this profile was deleted from the kernel (del); run its cell again to explore it"
RELEASED = ("the live profile of this report was released: the {live} newest reports keep theirs "
            "(profmagic.report.keep.LIVE), and nothing else held this one. The static view above still "
            "shows it, with its downloads. To keep a profile explorable, name it right after its cell "
            "(p = _profile), or save it (profmagic.save(_profile, 'run.json')) and load it again "
            "(p = profmagic.load('run.json'))")


class Report:
    """The interactive report. ``Report(p).widget`` is an ipywidgets.VBox; ``TABS`` its tab titles.

    ``hold=False`` keeps only a weak reference to the profile, so ``del p`` frees it and all the
    report derived from it; the tabs already drawn stay, the others then say so. ``hold=True`` holds
    it while the report is among the ``keep.LIVE`` newest that do (report/keep.py); then the report
    lets go. A report whose profile was freed collapses to a notice at the next report."""

    def __init__(self, profile: Profile, uid: str = "", hold: bool = True):
        import ipywidgets as W
        from ..views import readable
        self._held = profile if hold else None
        self._let_go = False    # True once keep.py made it let go of its profile
        self.collapsed = False  # True once the profile was freed and the report became a notice
        # Names with lone surrogates shown escaped (views/readable.py): a copy, kept while the profile lives.
        shown = readable.profile(profile)
        self._shown = shown if shown is not profile else None
        if self._shown is not None:
            weakref.finalize(profile, _forget_copy, weakref.ref(self))
        profile = shown
        self._ref = weakref.ref(profile)
        self.W = W
        self.tab_builders = [("Icicle", self._tab_icicle), ("Sandwich", self._tab_sandwich),
                             ("Source", self._tab_source), ("Time order", self._tab_time)]
        if len(multi.processes(profile)) > 1:  # processes side by side
            self.tab_builders.append(("Ranks", self._tab_ranks))
        from ..views import tasks
        if tasks.has_tasks(profile):  # a cluster profile: time by task prefix, per worker
            self.tab_builders.append(("Tasks", self._tab_tasks))
        from ..views import waits
        if waits.available(profile):  # reasons, wakers and the wait chain
            self.tab_builders.append(("Waits", self._tab_waits))
        self.tab_builders += [("Table", self._tab_table), ("Raw", self._tab_raw)]
        self.TABS = tuple(title for title, _ in self.tab_builders)
        self._pickers()
        self.panes = [W.VBox() for _ in self.TABS]
        self.tabs = W.Tab(children=self.panes, titles=self.TABS)
        self.built = [False] * len(self.TABS)
        self.sw_list = None
        self.source_of = None
        self.widget = W.VBox([W.HTML(_hide_twin(uid) + header_html(profile)),
                              W.HBox([self.thread, self.metric, self.colour, self.min_pct, self.fold]),
                              W.HBox(self._click_row()), self.tabs])
        self.widget.add_class("profmagic-widget")
        if uid:
            self.widget.add_class(f"profmagic-w-{uid}")
        for c in (self.metric, self.thread, self.colour, self.min_pct, self.fold):
            c.observe(self._changed, names="value")
        self.tabs.observe(lambda ch: self._show(ch["new"]), names="selected_index")
        self._show(0)
        keep.add(self)

    def _pickers(self) -> None:
        W, profile = self.W, self.p
        metrics = profile.metrics
        self.metric = W.Dropdown(options=[(profile.label(m), m) for m in metrics],
                                 value=profile.metric if profile.metric in metrics else metrics[0],
                                 description="metric", layout=W.Layout(width="260px"))
        self.thread = W.Dropdown(options=[("all threads (merged)", -1)] +
                                 [(str(t), i) for i, t in enumerate(profile.threads)],
                                 value=-1, description="thread", layout=W.Layout(width="300px"))
        self.colour = W.Dropdown(options=[("function", "function"), ("kind", "kind"), ("module", "module")],
                                 value="function", description="colour", layout=W.Layout(width="190px"))
        self.min_pct = W.BoundedFloatText(value=0.0, min=0.0, max=50.0, step=0.1, description="fold < %",
                                          tooltip="fold call-tree nodes under this share of the view into (other)",
                                          layout=W.Layout(width="150px"))
        self.fold = W.Checkbox(value=True, description="fold boilerplate", indent=False,
                               tooltip="interpreter start-up, thread start, asyncio and kernel plumbing above the "
                                       "first frame of user code, as one box (profmagic.boilerplate.RULES)",
                               layout=W.Layout(width="150px"))
        self.fold.add_class("profmagic-fold")

    def _click_row(self) -> list:
        """A box clicked in an icicle -> "show in Sandwich" (the click bridge relays plotly's click)."""
        W = self.W
        self.clicked = None
        self.click_label = W.HTML("<span style='font:12px sans-serif;color:#555'>click a box in the icicle, "
                                  "then show its function in Sandwich</span>")
        self.to_sandwich = W.Button(description="show in Sandwich", disabled=True, icon="columns",
                                    layout=W.Layout(width="170px"))
        self.to_sandwich.add_class("profmagic-to-sandwich")
        self.to_sandwich.on_click(lambda _: self.show_in_sandwich())
        self.to_source = W.Button(description="show source", disabled=True, icon="code",
                                  layout=W.Layout(width="140px"))
        self.to_source.add_class("profmagic-to-source")
        self.to_source.on_click(lambda _: self.show_source())
        row = [self.to_sandwich, self.to_source, self.click_label]
        try:
            self.bridge = ClickBridge()
        except ImportError:  # no anywidget: the Sandwich tab's own list still works
            self.bridge = None
        else:
            self.bridge.observe(lambda ch: self.clicked_node(ch["new"]), names="clicked")
            row.append(self.bridge)
        return row

    # -- state -------------------------------------------------------------------------------------
    @property
    def p(self) -> Profile:
        p = self._ref()
        if p is None:
            raise ProfileGone(RELEASED.format(live=keep.LIVE) if self._let_go else DELETED)
        return p

    # -- lifetime (report/keep.py) -------------------------------------------------------------------
    @property
    def holds(self) -> bool:
        """Whether this report keeps its profile alive."""
        return self._held is not None

    def let_go(self) -> None:
        """Keep only the weak reference: the profile lives on while something else holds it."""
        self._held = None
        self._let_go = True

    def profile_alive(self) -> bool:
        return self._ref() is not None

    def collapse(self) -> None:
        """The profile was freed: the report becomes one notice (what happened, how to keep a profile)
        and closes every other widget of it, with the figures and tables they held. The front end
        then shows the static twin again (``_hide_twin`` hides it only beside a drawn figure)."""
        W = self.W
        self.collapsed = True   # first: closing the tabs may call their observers
        text = RELEASED.format(live=keep.LIVE) if self._let_go else DELETED
        notice = W.HTML(f"<p class='profmagic-released' style='font:13px sans-serif;color:#555'>{escape(text)}.</p>")
        old = list(self.widget.children)
        self.widget.children = [notice]
        _close(old)
        self.panes, self.built, self.sw_list = [], [], None

    @property
    def thread_name(self):
        i = self.thread.value
        return None if i == -1 else self.p.threads[i]

    def _changed(self, _=None):
        self.built = [False] * len(self.TABS)
        self._show(self.tabs.selected_index or 0)

    def _show(self, i):
        if i is None or self.collapsed or self.built[i]:
            return
        self.built[i] = True
        old = self.panes[i].children
        try:
            self.p  # noqa: B018 -- raises ProfileGone once the profile was deleted
            self.panes[i].children = self.tab_builders[i][1]()
        except ProfileGone as e:
            self.panes[i].children = [self.W.HTML(f"<p style='font:13px sans-serif'>{escape(e)}.</p>")]
        except Exception as e:  # show the error in the tab rather than a dead widget
            self.panes[i].children = [self.W.HTML(f"<pre>{escape(type(e).__name__)}: {escape(e)}</pre>")]
        # The tab's previous widgets are closed: ipywidgets keeps every open widget (and its figure) alive.
        _close([w for w in old if w not in self.panes[i].children])

    # -- tabs --------------------------------------------------------------------------------------
    def _tab_icicle(self):
        from ..views import icicle
        fig = icicle.figure(self.p, metric=self.metric.value, thread=self.thread_name, colour=self.colour.value,
                            min_share=self.min_pct.value / 100, boilerplate=self.fold.value)
        return [output_widget(figure_output(fig))]

    def _tab_sandwich(self):
        W = self.W
        self.sw_filter = W.Text(placeholder="regex on name or file", description="filter",
                                layout=W.Layout(width="320px"))
        self.sw_sort = W.Dropdown(options=["self", "total", "name"], value="self", description="sort by",
                                  layout=W.Layout(width="180px"))
        self.sw_list = W.Select(options=[], rows=12, layout=W.Layout(width="100%"))
        self.sw_list.add_class("profmagic-functions-list")
        self.sw_msg = W.HTML()
        self.sw_fig = W.Output()
        self.sw_filter.observe(self._sw_refresh, names="value")
        self.sw_sort.observe(self._sw_refresh, names="value")
        self.sw_list.observe(self._sw_pick, names="value")
        self._sw_refresh()
        return [W.HBox([self.sw_filter, self.sw_sort, self.sw_msg]), self.sw_list, self.sw_fig]

    def _sw_refresh(self, _=None):
        """The Sandwich list for the filter and sort order (text options, never HTML)."""
        from ..views import sandwich
        try:
            df = sandwich.table(self.p, self.metric.value, self.thread_name, self.sw_filter.value or None,
                                self.sw_sort.value, boilerplate=self.fold.value, limit=sandwich.PAGE)
        except Exception as e:  # a bad regex, typically
            self.sw_msg.value = f"<span style='color:#b91c1c'>{escape(e)}</span>"
            return
        self.sw_msg.value = f"{len(df):,} functions"
        df = df.head(500)
        self.sw_list.options = [(f"{s:6.1f}% self {t:6.1f}% total   {n}   {f}", int(i)) for i, n, f, t, s in
                                zip(df["id"], df["name"], df["file"], df["total_pct"], df["self_pct"])]
        self.sw_list.value = None

    def _sw_pick(self, change):
        """A function picked in the list: its callers and callees."""
        if change["new"] is None:
            return
        from ..views import sandwich
        fig = sandwich.figure(self.p, int(change["new"]), metric=self.metric.value, thread=self.thread_name,
                              colour=self.colour.value, min_share=self.min_pct.value / 100,
                              boilerplate=self.fold.value)
        self.sw_fig.outputs = (figure_output(fig),)
        self.clicked = int(change["new"])
        self.to_source.disabled = False

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
                                  f"{escape(names[key])}</b></span>")
        self.to_sandwich.disabled = self.to_source.disabled = False

    def show_in_sandwich(self, key: int | None = None):
        """Open the Sandwich tab on function ``key`` (default: the last clicked box)."""
        key = self.clicked if key is None else int(key)
        if key is None:
            return
        self.p  # noqa: B018 -- raises ProfileGone once the profile was freed
        i = self.TABS.index("Sandwich")
        self.tabs.selected_index = i
        self._show(i)
        if self.sw_filter.value:
            self.sw_filter.value = ""
        if key not in [v for _, v in self.sw_list.options]:
            df = self.p.functions(self.metric.value)
            row = df[df["id"] == key]
            label = f"(picked) {row['name'].iloc[0]}   {row['file'].iloc[0]}" if len(row) else f"(picked) function {key}"
            self.sw_list.options = list(self.sw_list.options) + [(label, key)]
        self.sw_list.value = key

    def _tab_source(self):
        """The cell's lines (or a picked function's) with their time: ``views.source``."""
        from ..views import sandwich
        W = self.W
        fns = sandwich.table(self.p, None, self.thread_name, boilerplate=self.fold.value, limit=50, totals=False)
        fns = fns[fns["file"].astype(str) != ""].head(50)
        options = ([("this cell", -1)] if self.p.meta.get("cell") else []) + \
            [(f"{n}   {f}", int(i)) for i, n, f in zip(fns["id"], fns["name"], fns["file"])]
        value = self.source_of if self.source_of in [v for _, v in options] else \
            (options[0][1] if options else None)
        if self.source_of is not None and value != self.source_of:   # picked, but below the top 50
            options.append((f"(picked) function {self.source_of}", self.source_of))
            value = self.source_of
        self.src_pick = W.Dropdown(options=options, value=value, description="source of",
                                   layout=W.Layout(width="600px"))
        self.src_pick.add_class("profmagic-source-pick")
        self.src_view = W.HTML()
        self.src_pick.observe(self._src_show, names="value")
        self._src_show()
        return [self.src_pick, self.src_view]

    def _src_show(self, _=None):
        from ..views import source
        key = self.src_pick.value
        if key is None:
            body = "<p style='font:13px sans-serif'>No source: this profile has no cell and no frame with a file.</p>"
        elif key == -1:
            body = source.cell_html(self.p, self.thread_name) or "<p>This profile has no cell.</p>"
        else:
            body = source.function_html(self.p, key, self.thread_name)
        self.source_of = key
        self.src_view.value = header_html(self.p) + body

    def show_source(self, key: int | None = None):
        """Open the Source tab on function ``key`` (default: the last clicked or picked one)."""
        key = self.clicked if key is None else int(key)
        if key is None:
            return
        self.p  # noqa: B018 -- raises ProfileGone once the profile was freed
        self.source_of = key
        i = self.TABS.index("Source")
        self.built[i] = False
        self.tabs.selected_index = i
        self._show(i)

    def _tab_ranks(self):
        from ..views import ranks
        box = ranks.widget(self._ref, metric=self.metric.value)
        self.ranks = box
        if self.thread_name is None:
            return [box]
        note = " (all threads of each process; the thread picker does not apply)"
        return [self.W.HTML(f"<span style='font:12px sans-serif'>{escape(note)}</span>"), box]

    def _tab_tasks(self):
        from ..views import tasks
        box = tasks.widget(self._ref, metric=self.metric.value)
        self.tasks = box
        return [box]

    def _tab_waits(self):
        from ..views import waits
        return waits.widgets(self.p, self.W)

    def _tab_time(self):
        from ..views import memory, timeline
        ok, why = timeline.available(self.p)
        out = [output_widget(figure_output(timeline.figure(self.p, thread=self.thread_name, metric=self.metric.value)))] if ok \
            else [self.W.HTML(f"<p style='font:13px sans-serif'>{escape(why)}.</p>")]
        if memory.available(self.p)[0]:   # memray's heap over time under the samples (or alone)
            out.append(output_widget(figure_output(memory.figure(self.p))))
        return out

    def _tab_table(self):
        return [output_widget(html_output(header_html(self.p) + table_html(self.p, self.metric.value, self.thread_name,
                                                                       self.fold.value)))]

    def _tab_raw(self):
        links = self.W.HTML(header_html(self.p) + downloads_html(self.p))
        if not large_export(self.p):
            return [links]
        make = self.W.Button(description="build the speedscope, gecko and Chrome trace files",
                             layout=self.W.Layout(width="380px"))
        make.on_click(lambda _: setattr(links, "value", header_html(self.p) + downloads_html(self.p, export_large=True)))
        return [links, make]


def _close(widgets) -> None:
    """Close ``widgets`` and every widget inside them (children of boxes and tabs), and drop what
    they show (figures, HTML): a closed widget sends nothing, and a report's widgets refer to it in a
    cycle that only a full gc would free."""
    import ipywidgets as W
    for w in widgets:
        _close(getattr(w, "children", ()))
        for part in (getattr(w, "layout", None), getattr(w, "style", None)):   # widgets too, each with a comm
            if isinstance(part, W.Widget):
                part.close()
        w.close()
        if isinstance(w, W.Box):
            w.children = ()
        elif isinstance(w, W.Output):
            w.outputs = ()
        elif isinstance(w, W.HTML):
            w.value = ""


def _forget_copy(report_ref) -> None:
    """The profile was deleted: its readable copy goes too (``Report(hold=False)``)."""
    report = report_ref()
    if report is not None:
        report._shown = None


def _hide_twin(uid: str) -> str:
    """A style that hides the static twin with this ``uid`` (a separate output, for viewers without
    a widget manager) once this widget's first plotly figure is drawn: JupyterLab loads plotly.js
    (4.8 MB) on first use, and the static SVG icicle fills that second."""
    if not uid:
        return ""
    return (f"<style>body:has(.profmagic-w-{uid} .js-plotly-plot) .profmagic-static-{uid}{{display:none}}"
            f"body:has(.profmagic-w-{uid} .js-plotly-plot) .jp-OutputArea-child:has(.profmagic-static-{uid})"
            "{display:none}</style>")


def widget(profile: Profile, uid: str = "", hold: bool = True):
    return Report(profile, uid, hold).widget

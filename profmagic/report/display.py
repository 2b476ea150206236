"""Which display a Profile gets: static HTML without a kernel; under a live kernel, the static twin
as its own output, then the live widget; and the repr with the error when building either fails."""
from __future__ import annotations

import importlib
import importlib.util
import re

from ..model import Profile
from ..views import readable
from ..views.mime import PLOTLY_MIME
from .static import escape, static_html
from .widget import widget


def _live_kernel() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    ip = get_ipython()
    return ip is not None and getattr(ip, "kernel", None) is not None


# IPython's input and output history: a profile held only there is held by its report.
_CACHE_NAMES = re.compile(r"_+\d*|_i+\d*|_[ido]h|In|Out")


def _named(profile: Profile) -> bool:
    """Whether a variable of the user's namespace holds ``profile``: then the report holds it only
    weakly, and ``del`` of that variable frees it. A profile displayed without a name (``display(
    load(f))``) is held by its report."""
    from IPython import get_ipython
    ns = get_ipython().user_ns
    return any(v is profile for k, v in list(ns.items()) if not _CACHE_NAMES.fullmatch(k))


# An invisible figure: drawing it makes the front end run plotly.js (its 4.8 MB module is fetched
# at page load, but evaluated at the first figure) and its icicle code, now.
_BLANK = {"data": [{"type": "icicle", "ids": [0], "parents": [""], "values": [1], "labels": [""],
                    "marker": {"colors": ["rgba(0,0,0,0)"], "line": {"width": 0}}, "pathbar": {"visible": False},
                    "textinfo": "none", "hoverinfo": "skip"}],
          "layout": {"height": 10, "width": 10, "margin": {"l": 0, "r": 0, "t": 0, "b": 0},
                     "xaxis": {"visible": False}, "yaxis": {"visible": False},
                     "paper_bgcolor": "rgba(0,0,0,0)", "plot_bgcolor": "rgba(0,0,0,0)"},
          "config": {"staticPlot": True, "displayModeBar": False}}

# Widget models made by ``warm_up`` and never displayed: the front end loads their JavaScript
# modules when they open. The first report closes them.
_WARM: list = []


def warm_up() -> None:
    """Under a live kernel, make the first report draw about as fast as the next ones
    (bench/RESULTS.md, "cell end to the first interactive icicle"); ``%load_ext profmagic`` calls it.

    - an invisible 10-pixel plotly icicle: the front end runs plotly.js while the user's first
      profiled cell runs, not after it (the output is empty in nbconvert and GitHub);
    - one undisplayed model of each widget the report uses: the front end loads the widget
      modules now (nothing shows; the first report closes them);
    - the imports and first-use work of a report, on a two-frame profile."""
    if not _live_kernel():
        return
    from IPython.display import display
    display({PLOTLY_MIME: _BLANK, "text/html": "", "text/plain": ""}, raw=True)
    # Only a head start: if a step fails, the first report builds (or reports its error) as ever.
    try:
        _warm_widgets()   # first: the front end loads the modules while the kernel imports
    except Exception:
        _close_warm()
    # plotly's figure classes (~1 s) and those of an icicle, which plotly imports on first use.
    for module in ("profmagic.formats.speedscope", "profmagic.views.icicle", "profmagic.views.sandwich",
                   "profmagic.views.source"):
        importlib.import_module(module)
    try:
        _warm_views()
    except Exception:
        pass


def _warm_widgets() -> None:
    if importlib.util.find_spec("ipywidgets") is None:
        return
    import ipywidgets as W
    from .clickbridge import ClickBridge
    _close_warm()
    _WARM[:] = [W.VBox(), W.HBox(), W.Tab(), W.HTML(), W.Dropdown(), W.BoundedFloatText(), W.Checkbox(),
                W.Button(), W.Output(), W.Select(), W.Text()]
    try:
        _WARM.append(ClickBridge())
    except ImportError:   # no anywidget: the report has no click bridge either
        pass


def _close_warm() -> None:
    from .widget import _close
    _close(_WARM)   # with their layout and style models
    _WARM.clear()


def _warm_views() -> None:
    """The static twin and the icicle figure of a two-frame profile, built and dropped: the first
    report then skips their first-use costs (~0.1 s of imports and caches)."""
    from ..model import StackBuilder
    from ..views import icicle
    from ..views.mime import figure_output
    b = StackBuilder()
    stack = b.stack("MainThread", (b.frame("main", "warm.py", 1, "python"), b.frame("leaf", "warm.py", 2, "python")))
    b.add(stack, wall=0.01, cpu=0.01, time=0.0)
    b.add(stack, wall=0.01, cpu=0.01, time=0.01)
    p = b.build(metric="wall", meta={"backend": "sampler", "rate": 100.0})
    static_html(readable.profile(p))
    figure_output(icicle.figure(p))


def fallback(profile: Profile, error: BaseException) -> dict:
    """When building the report fails: the profile's repr and the error, never nothing."""
    try:
        text = repr(profile)
    except Exception as e:  # a profile too broken to describe itself
        text = f"<Profile (repr failed: {type(e).__name__}: {e})>"
    why = f"profmagic: the report could not be built ({type(error).__name__}: {error})"
    return readable.deep({"text/plain": f"{text}\n{why}",
                          "text/html": f"<pre>{escape(text)}</pre><pre style='color:#b91c1c'>{escape(why)}</pre>"})


def show(profile: Profile) -> None:
    """Display the report of ``profile``: also of one ``%%profile -q`` returned quietly."""
    from IPython.display import display
    display(mimebundle(profile), raw=True)


def mimebundle(profile: Profile, hold: bool | None = None) -> dict:
    """The display of a Profile (see ``_mimebundle``); if building it fails for any reason, the
    repr and the error, so a broken view never hides the profile. ``hold``: whether the report
    keeps the profile alive (default: unless a variable of the user's namespace holds it)."""
    try:
        return readable.deep(_mimebundle(profile, hold))
    except Exception as e:
        return fallback(profile, e)


def _mimebundle(profile: Profile, hold: bool | None = None) -> dict:
    """text/plain and a static text/html; under a live kernel, the widget view instead.

    With a kernel, the static HTML goes out first as its own output: nbconvert prefers the widget
    view whenever widget state was saved (nbclient saves it) and would then draw nothing offline.
    The live widget hides that twin with a style scoped to ``uid``.
    """
    # Names with lone surrogates show escaped: Jupyter's messages cannot carry them (views/readable.py).
    shown = readable.profile(profile)
    if not _live_kernel():
        return {"text/plain": repr(shown), "text/html": static_html(shown)}
    if importlib.util.find_spec("ipywidgets") is None:  # no widgets: the static HTML alone
        return {"text/plain": repr(shown), "text/html": static_html(shown)}
    import uuid
    from IPython.display import display
    uid = uuid.uuid4().hex[:12]
    # The twin goes out before the widget is built: it is the first view the user can read.
    display({"text/html": readable.text(static_html(shown, uid))}, raw=True)
    view = widget(profile, uid, hold=not _named(profile) if hold is None else hold)._repr_mimebundle_()
    _close_warm()   # the report's own widgets now keep the front end's widget modules in use
    return {"text/plain": repr(shown), **{k: v for k, v in (view or {}).items() if k != "text/plain"}}

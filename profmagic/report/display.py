"""Which display a Profile gets: static HTML without a kernel; under a live kernel, the static twin
as its own output, then the live widget; and the repr with the error when building either fails."""
from __future__ import annotations

from ..model import Profile
from .static import escape, static_html
from .widget import widget


def _live_kernel() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    ip = get_ipython()
    return ip is not None and getattr(ip, "kernel", None) is not None


def fallback(profile: Profile, error: BaseException) -> dict:
    """When building the report fails: the profile's repr and the error, never nothing."""
    try:
        text = repr(profile)
    except Exception as e:  # a profile too broken to describe itself
        text = f"<Profile (repr failed: {type(e).__name__}: {e})>"
    why = f"profmagic: the report could not be built ({type(error).__name__}: {error})"
    return {"text/plain": f"{text}\n{why}",
            "text/html": f"<pre>{escape(text)}</pre><pre style='color:#b91c1c'>{escape(why)}</pre>"}


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

"""The click bridge: a hidden anywidget that relays plotly's click on an icicle box to Python.

Each icicle trace carries the function id of every box in ``customdata[0]`` (views.icicle.trace).
"""
from __future__ import annotations

_CLICK_ESM = """
function render({ model, el }) {
  // Relay plotly_click on any icicle in this report to Python: customdata[0] is the function id.
  let n = 0;
  const bind = () => {
    const root = el.closest('.profmagic-widget');
    if (!root) return;
    for (const plot of root.querySelectorAll('.js-plotly-plot')) {
      if (plot.__profmagicClick || typeof plot.on !== 'function') continue;
      plot.__profmagicClick = true;
      plot.on('plotly_click', (ev) => {
        const pt = ev && ev.points && ev.points[0];
        const key = pt && pt.customdata ? pt.customdata[0] : null;
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

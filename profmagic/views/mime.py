"""The plotly mime bundle: how a figure goes out to the front end.

Figures go out as plotly's own mime type, drawn by the renderer the front end already has (no
plotly.js in the output, no network). A plotly FigureWidget would send its 5 MB JavaScript bundle
per figure.
"""
from __future__ import annotations

import json

from .readable import json_value, text

PLOTLY_MIME = "application/vnd.plotly.v1+json"


def bundle(fig, static_html: str | None = None) -> dict:
    """The mime bundle of ``fig``; ``static_html`` is its twin for viewers without plotly
    (nbconvert, GitHub)."""
    try:
        doc = fig.to_json()
    except (TypeError, ValueError):   # plotly's orjson engine refuses lone surrogates; json escapes them
        doc = fig.to_json(engine="json")
    out = {PLOTLY_MIME: json_value(doc, json.loads(doc)), "text/plain": "<plotly figure>"}
    if static_html is not None:
        out["text/html"] = text(static_html)
    return out


def output(data: dict) -> dict:
    """A display_data output (nbformat) holding the mime bundle ``data``, for ipywidgets.Output."""
    return {"output_type": "display_data", "metadata": {}, "data": data}


def figure_output(fig) -> dict:
    return output(bundle(fig))


def html_output(text: str) -> dict:
    return output({"text/html": text, "text/plain": ""})


def widget(output: dict):
    """An ipywidgets.Output showing one output (``figure_output``, ``html_output``)."""
    import ipywidgets as W
    o = W.Output()
    o.outputs = (output,)
    return o

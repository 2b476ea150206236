"""Backends side by side (``--backends a,b,c``): one icicle per backend and a table of each one's top
functions, as shares of its own total."""
from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from ..model import Profile
from ..multi import common_metric
from . import esc, metric_label
from . import icicle as I
from .display import ComparisonView, svg, svg_row, table_html


class SideBySide(ComparisonView):
    """One icicle per backend, and ``table``: the top functions of each (share of its total)."""

    def __init__(self, profiles: dict, metric: str | None = None, top: int = 10,
                 max_nodes: int = 3000):
        if not profiles:
            raise ValueError("side_by_side needs at least one profile")
        self.profiles = dict(profiles)
        self.metric = metric
        self.top = top
        self._max_nodes = max_nodes
        self.metrics = {name: self._metric(p) for name, p in self.profiles.items()}
        self.table = self._table()
        self._figure = None

    def _metric(self, p: Profile) -> str:
        """The metric ``p`` is shown in: the one asked for ("unknown" if ``p`` lacks it), else its own."""
        if self.metric is not None:
            return self.metric if self.metric in p.metrics else "unknown"
        return common_metric([p])

    def _table(self) -> pd.DataFrame:
        rows = []
        for name, p in self.profiles.items():
            m = self.metrics[name]
            if m == "unknown":
                rows.append({"backend": name, "metric": self.metric, "rank": np.nan, "function": "",
                             "total": np.nan, "share %": np.nan})
                continue
            f = p.functions(m).head(self.top)
            tot = p.total(m)
            for i, (fn, v) in enumerate(zip(f["name"], f["total"]), 1):
                rows.append({"backend": name, "metric": m, "rank": i, "function": fn,
                             "total": float(v), "share %": 100.0 * float(v) / tot if tot else np.nan})
        return pd.DataFrame(rows, columns=["backend", "metric", "rank", "function", "total", "share %"])

    def wide(self) -> pd.DataFrame:
        """Function × backend share %: the disagreement at a glance (NaN: the backend could not
        measure the metric; 0: measured and not seen)."""
        names = list(dict.fromkeys(self.table["function"][self.table["function"] != ""]))
        out = pd.DataFrame({"function": names})
        for name, p in self.profiles.items():
            m = self.metrics[name]
            if m == "unknown":
                out[name] = np.nan
                continue
            f = p.functions(m)
            tot = p.total(m)
            by = (f.groupby("name")["total"].max() / tot * 100.0) if tot else pd.Series(dtype=float)
            out[f"{name} ({m}) %"] = [float(by.get(n, 0.0)) for n in names]
        return out

    def _describe(self, name: str) -> str:
        p, m = self.profiles[name], self.metrics[name]
        return p.replace(metric=m).describe() if m != "unknown" else p.describe()

    def _make_figure(self) -> go.Figure:
        fig = go.Figure()
        k = len(self.profiles)
        gap = 0.02
        wdt = (1.0 - gap * (k - 1)) / k
        for i, (name, p) in enumerate(self.profiles.items()):
            dom = {"x": [i * (wdt + gap), i * (wdt + gap) + wdt]}
            mid = sum(dom["x"]) / 2
            m = self.metrics[name]
            head = f"<b>{esc(name)}</b><br><span style='font-size:10px'>{esc(self._describe(name), 200)}</span>"
            fig.add_annotation(text=head, x=mid, y=1.0, xref="paper", yref="paper", yanchor="bottom",
                               showarrow=False)
            if m == "unknown":
                fig.add_annotation(text=f"{esc(metric_label(self.metric))} unknown for this backend",
                                   x=mid, y=0.5, xref="paper", yref="paper", showarrow=False)
                continue
            t, _ = I.tree(p, m, None, max_nodes=self._max_nodes)
            fig.add_trace(I.trace(I.Paint.of(p, m), t, f"{name}: {metric_label(m)}", domain=dom))
        fig.update_layout(title=dict(text=f"<b>{k} backends, one cell</b>", x=0.01, font=dict(size=13)),
                          margin=dict(l=8, r=8, t=100, b=8), height=520,
                          uniformtext=dict(minsize=8, mode="hide"))
        return fig

    def __repr__(self) -> str:
        return f"<SideBySide {', '.join(f'{n} ({m})' for n, m in self.metrics.items())}>"

    def _parts(self) -> tuple[str, str, str]:
        panels = []
        width = max(280, 1100 // max(1, len(self.profiles)))
        for name, p in self.profiles.items():
            m = self.metrics[name]
            cap = f"{esc(name)}<br><span style='font-weight:normal'>{esc(p.describe(), 200)}</span>"
            if m == "unknown":
                panels.append((cap, f"<p>{esc(metric_label(self.metric))} unknown for this backend</p>"))
            else:
                panels.append((cap, svg(p, m, width)))
        table = (f"<div class='profmagic-backends'><p>Top functions per backend, share of each backend's "
                 f"total</p>{table_html(self.wide(), '{:.1f}')}</div>")
        return "", svg_row(panels), table

    def _text(self) -> str:
        return repr(self) + "\n" + self.wide().to_string(na_rep="unknown")


def side_by_side(profiles: dict, metric: str | None = None, top: int = 10, **kw) -> SideBySide:
    """``--backends a,b,c``: ``profiles`` maps a backend label to its Profile of the same cell."""
    return SideBySide(profiles, metric=metric, top=top, **kw)

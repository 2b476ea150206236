"""Lone surrogates (issue 28): a profile whose names hold ``\\ud800`` displays its report, the name
written as its escape. Jupyter's messages are UTF-8 and cannot carry a lone surrogate: every string
the report sends must encode, which is what these tests check, and what a real kernel does."""
from __future__ import annotations

import json

import pytest

import profmagic
from profmagic import report
from profmagic.views import mime

pytestmark = pytest.mark.timeout(120)

# A speedscope file that names a function, its file and its thread with lone surrogates (JSON escapes).
DOC = r'''{"$schema": "https://www.speedscope.app/file-format-schema.json",
 "shared": {"frames": [{"name": "main", "file": "app.py", "line": 1},
                       {"name": "bad\ud800name", "file": "f\udc80.py", "line": 2}]},
 "profiles": [{"type": "sampled", "name": "Main\ud800Thread", "unit": "seconds", "startValue": 0, "endValue": 3,
               "samples": [[0, 1], [0, 1], [0]], "weights": [1, 1, 1]}]}'''
SHOWN = "bad\\ud800name"        # how the report writes the name: its escape


@pytest.fixture
def p(tmp_path):
    path = tmp_path / "s.speedscope.json"
    path.write_text(DOC)
    p = profmagic.load(path)
    assert "bad\ud800name" in set(p.frames["name"]) and p.threads == ["Main\ud800Thread"]
    return p


def sendable(v) -> str:
    """``v`` as Jupyter serialises a message (UTF-8 JSON); raises as Jupyter would."""
    return json.dumps(v, ensure_ascii=False).encode("utf-8").decode("utf-8")


def widget_states(w) -> list[dict]:
    """The state of ``w`` and of every widget under it, as ipywidgets sends it."""
    out, todo = [], [w]
    while todo:
        x = todo.pop()
        out.append(x.get_state())
        todo += list(getattr(x, "children", ()))
    return out


def test_static_bundle_shows_the_name_escaped(p):
    b = report.mimebundle(p)
    text = sendable(b)
    assert "could not be built" not in text
    assert set(b) == {"text/plain", "text/html"} and "<svg" in b["text/html"]
    assert SHOWN in b["text/html"] and "f\\udc80.py" in b["text/html"]
    assert "3 samples" in b["text/html"]
    # The profile itself is unchanged: the escape is the display's.
    assert "bad\ud800name" in set(p.frames["name"])


def test_every_tab_of_the_widget_sends(p):
    r = report.Report(p, uid="abc")
    assert [o[0] for o in r.thread.options] == ["all threads (merged)", "Main\\ud800Thread"]
    for i, name in enumerate(r.TABS):
        r.tabs.selected_index = i
        assert "Error" not in str(getattr(r.panes[i].children[0], "value", "")), name
    r.tabs.selected_index = r.TABS.index("Sandwich")
    r.sw_list.value = next(v for label, v in r.sw_list.options if SHOWN in label)
    sendable(widget_states(r.widget) + widget_states(r.sw_fig))
    fig = r.panes[0].children[0].outputs[0]["data"][report.PLOTLY_MIME]
    assert SHOWN in fig["data"][0]["labels"]
    sw = r.sw_fig.outputs[0]["data"][report.PLOTLY_MIME]
    assert any(SHOWN in str(x) for t in sw["data"] for x in t.get("labels", ()))


def test_a_figure_bundle_sends(p):
    b = mime.bundle(profmagic.icicle(p), static_html="<p>bad\ud800name</p>")
    sendable(b)
    assert SHOWN in b[report.PLOTLY_MIME]["data"][0]["labels"] and b["text/html"] == f"<p>{SHOWN}</p>"


@pytest.mark.kernel
def test_the_report_under_a_real_kernel(kernel, p, tmp_path):
    """The kernel sends the twin, the widget and every tab's state: a surrogate left anywhere fails
    the cell (UnicodeEncodeError as the message is packed), or shows the fallback."""
    path = tmp_path / "k.speedscope.json"
    path.write_text(DOC)
    rep = kernel.run(f"import profmagic\nfrom profmagic import report\np = profmagic.load({str(path)!r})\np")
    assert rep.status == "ok", rep.error
    shown = json.dumps(rep.data + [rep.result])
    assert "could not be built" not in shown
    twin = [d for d in rep.data if "text/html" in d]
    assert len(twin) == 1 and "bad\\\\ud800name" in json.dumps(twin[0]["text/html"])
    assert rep.result and "application/vnd.jupyter.widget-view+json" in rep.result
    rep = kernel.run("r = report.Report(p)\nfor i in range(len(r.TABS)):\n    r.tabs.selected_index = i\n"
                     "r.tabs.selected_index = r.TABS.index('Sandwich')\n"
                     "r.sw_list.value = r.sw_list.options[0][1]\n"
                     "print(sorted(o[0] for o in r.thread.options))")
    assert rep.status == "ok", rep.error
    assert rep.stdout.strip() == str(sorted(["all threads (merged)", "Main\\ud800Thread"]))


def test_a_weakly_held_report_frees_the_copy_with_the_profile(tmp_path):
    import gc
    import weakref
    path = tmp_path / "s.speedscope.json"
    path.write_text(DOC)
    p = profmagic.load(path)         # (not the fixture's: pytest holds that one)
    r = report.Report(p, hold=False)
    original, copy = weakref.ref(p), r._ref
    assert copy() is not p           # the readable copy, not the profile
    del p
    gc.collect()
    assert original() is None and copy() is None
    r.tabs.selected_index = r.TABS.index("Sandwich")
    assert "deleted from the kernel" in r.panes[r.TABS.index("Sandwich")].children[0].value

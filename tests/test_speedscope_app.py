"""Our exports in a real viewer: speedscope's own app (the `speedscope` npm package, pinned), offline in
Debian's Chromium, loads our speedscope JSON, Chrome trace and gecko files; its Sandwich table shows the
same function totals as ``Profile.functions()``.

The app is installed by npm at test set-up into a cache outside the repo (never committed). It loads
a file the way its own CLI does: a script named in the page's ``#localProfilePath=`` hash calls
``speedscope.loadFileFromBase64(name, base64)``.
"""
from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess

import pytest

import browser
from profmagic.formats import chrome_trace, gecko, speedscope
from timelines import two_thread_recording

pytestmark = [pytest.mark.browser, pytest.mark.timeout(600),
              pytest.mark.requires("chromium", "playwright", "npm")]
SPEEDSCOPE_VERSION = "1.25.0"
CACHE = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "profmagic",
                     f"speedscope@{SPEEDSCOPE_VERSION}")
APP = os.path.join(CACHE, "node_modules", "speedscope", "dist", "release", "index.html")
_VALUE = re.compile(r"^([\d.]+)(µs|ms|s)\b")
_UNIT = {"µs": 1e-6, "ms": 1e-3, "s": 1.0}


@pytest.fixture(scope="session")
def speedscope_app():
    """index.html of the pinned speedscope app, installed with npm into the cache when missing."""
    if not os.path.exists(APP):
        npm = shutil.which("npm")
        os.makedirs(CACHE, exist_ok=True)
        r = subprocess.run([npm, "install", "--prefix", CACHE, "--no-audit", "--no-fund", "--ignore-scripts",
                            f"speedscope@{SPEEDSCOPE_VERSION}"], capture_output=True, text=True, timeout=600)
        assert r.returncode == 0 and os.path.exists(APP), f"npm install speedscope failed:\n{r.stderr[-2000:]}"
    return APP


@pytest.fixture(scope="module")
def sampled():
    return two_thread_recording()


def only_thread(p, label):
    keep = (p.stacks["thread"] == label).to_numpy()
    rows = keep.nonzero()[0]
    remap = {int(r): i for i, r in enumerate(rows)}
    sm = p.samples[keep[p.samples["stack"].to_numpy()]].copy()
    sm["stack"] = sm["stack"].map(remap)
    return p.replace(stacks=p.stacks[keep].reset_index(drop=True), samples=sm.reset_index(drop=True),
                     meta={**p.meta, "threads": [label]})


def ours_by_name(p):
    """Wall seconds per function name (names unique to one file; the others are left out)."""
    f = p.functions("wall")
    unique = f.groupby("name")["file"].transform("nunique") == 1
    return {n: float(t) for n, t in zip(f["name"][unique], f["total"][unique])}


_ROWS_JS = """() => Array.from(document.querySelectorAll('tr'))
    .map(tr => Array.from(tr.querySelectorAll('td')).map(td => td.innerText.trim()))
    .filter(c => c.length === 3 && /^[\\d.]+(µs|ms|s)\\b/.test(c[0]))"""


def shown(page):
    """(top lines of the page, {function name: (summed total seconds, tolerance)}) from the Sandwich table."""
    page.keyboard.press("3")  # the Sandwich view
    page.wait_for_function(f"({_ROWS_JS})().length > 0", timeout=30_000)
    title = page.locator("body").inner_text().split("\n")
    out: dict[str, list] = {}
    for total, _self, name in page.evaluate(_ROWS_JS):
        m = _VALUE.match(total)
        name = name.split(' {"filename"')[0]  # the trace importer appends the slice's args
        digits = len(m.group(1).split(".")[1]) if "." in m.group(1) else 0
        tot = out.setdefault(name, [0.0, 0.0])
        tot[0] += float(m.group(1)) * _UNIT[m.group(2)]
        tot[1] += 0.5 * 10 ** -digits * _UNIT[m.group(2)]  # half the last shown digit
    return title, {k: tuple(v) for k, v in out.items()}


def open_in_speedscope(br, app, tmp_path, name, data):
    js = tmp_path / f"load-{name}.js"
    js.write_text(f"speedscope.loadFileFromBase64({json.dumps(name)}, "
                  f"{json.dumps(base64.b64encode(data).decode())})")
    page = br.new_page(viewport={"width": 1400, "height": 6000})  # tall: the table renders every row
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    # speedscope warns "Tried to end … Doing nothing" when it drops an end event, and "still open" when a
    # slice never ends: both lose time. ("… Ending X instead" pops the top slice, as the format says.)
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" or "Doing nothing" in m.text
            or "still open" in m.text else None)
    page.goto(f"file://{app}#localProfilePath={js}")
    page.wait_for_selector("text=Sandwich", timeout=60_000)
    return page, errors


def check(page, errors, expect: dict, title_has: str):
    title, got = shown(page)
    assert any(title_has in line for line in title[:12]), (title_has, title[:12])
    assert not errors, errors
    compared = 0
    for name, total in expect.items():
        if total < 1e-4:
            continue  # under the table's last digit
        assert name in got, (name, sorted(got))
        value, tol = got[name]
        assert value == pytest.approx(total, abs=tol + 1e-9), name
        compared += 1
    assert compared >= 3   # the main thread has work, busy and nap; the worker its lambda, spin, nap


def test_speedscope_json_in_speedscope(speedscope_app, sampled, tmp_path):
    p = sampled
    with browser.chromium() as br:
        page, errors = open_in_speedscope(br, speedscope_app, tmp_path, "p.speedscope.json", speedscope.write(p))
        for k, label in enumerate(p.threads):  # one speedscope profile per thread, in our order
            if k:
                page.keyboard.press("n")  # next profile
            check(page, errors, ours_by_name(only_thread(p, label)), str(label))


def test_chrome_trace_in_speedscope(speedscope_app, sampled, tmp_path):
    p = sampled
    with browser.chromium() as br:
        page, errors = open_in_speedscope(br, speedscope_app, tmp_path, "p.trace.json", chrome_trace.write(p))
        seen = set()
        for _ in p.threads:
            title, _ = shown(page)
            label = next(t for t in p.threads if any(f"{str(t).split(chr(34))[1]} (tid " in ln for ln in title[:12]))
            check(page, errors, ours_by_name(only_thread(p, label)), "(tid ")
            seen.add(label)
            page.keyboard.press("n")
        assert seen == set(p.threads)


def test_gecko_in_speedscope(speedscope_app, sampled, tmp_path):
    """speedscope imports one gecko thread (the only one, or one named GeckoMain): a one-thread profile."""
    main = next(t for t in sampled.threads if "MainThread" in str(t))
    p = only_thread(sampled, main)
    with browser.chromium() as br:
        page, errors = open_in_speedscope(br, speedscope_app, tmp_path, "p.gecko.json", gecko.write(p))
        check(page, errors, ours_by_name(p), "p.gecko.json")

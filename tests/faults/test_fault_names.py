"""Faults: strange names and options (issue 8)."""
from __future__ import annotations

import os

import pytest
from conftest import documented

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(120)]

XSS = "<img src=x onerror=alert(1)>"
RENAME = ("def {fn}(t=0.3):\n    busy(t)\n"
          "{fn}.__code__ = {fn}.__code__.replace(co_name={name!r}, co_qualname={name!r})\n")


@pytest.mark.requires("py-spy", "ptrace")
def test_unicode_and_emoji_names(clean):
    k = clean
    name = "計算_é_🔥"
    k.run(RENAME.format(fn="uni", name=name))
    r = k.run("%%profile -b py-spy -q\nuni()")
    assert r.error is None, r.error
    assert name in k.value("list(_profile.frames['name'])")
    # Round trips keep the name: speedscope and folded.
    assert name in k.value("list(profmagic.load(profmagic.to_folded(_profile).encode()).frames['name'])")
    assert name in k.value("list(profmagic.load(json.dumps(profmagic.to_speedscope(_profile)).encode()).frames['name'])"
                           if k.run("import json").error is None else "[]")


@pytest.mark.requires("py-spy", "ptrace")
def test_html_in_function_name_is_escaped(clean):
    k = clean
    k.run(RENAME.format(fn="xss", name=XSS))
    r = k.run("%%profile -b py-spy\nxss()")
    assert r.error is None, r.error
    assert XSS in k.value("list(_profile.frames['name'])")
    htmls = [v for d in r.data for key, v in d.items() if "html" in key and isinstance(v, str)]
    assert htmls, f"no HTML output: {[list(d) for d in r.data]}"
    for h in htmls:
        assert XSS not in h, "the function name reached the HTML unescaped"
    r = k.run("from profmagic import report\n_h = report.static_html(_profile) if hasattr(report, 'static_html') "
              "else get_ipython().display_formatter.format(_profile)[0].get('text/html', '')\nprint(len(_h), " + repr(XSS) + " in _h)")
    assert r.error is None and r.stdout.split()[-1] == "False", r.text()


@pytest.mark.requires("py-spy", "ptrace")
def test_paths_with_spaces_and_semicolons(clean, tmp_path):
    k = clean
    folder = tmp_path / "dir with space;semi"
    folder.mkdir()
    mod = folder / "mod ;x.py"
    mod.write_text("import time\ndef weird(t=0.3):\n    end = time.perf_counter() + t\n"
                   "    while time.perf_counter() < end:\n        pass\n")
    k.run(f"import importlib.util\n_s = importlib.util.spec_from_file_location('modx', {str(mod)!r})\n"
          "_m = importlib.util.module_from_spec(_s); _s.loader.exec_module(_m)")
    out = folder / "out; file.json"
    r = k.run("%%profile -b py-spy -q\n_m.weird()\n")
    assert r.error is None, r.error
    files = k.value("sorted(set(_profile.frames.loc[_profile.frames['name'] == 'weird', 'file']))")
    assert files == [str(mod)], files
    r = k.run(f"profmagic.save(_profile, {str(out)!r})\n_back = profmagic.load({str(out)!r})\n"
              "print(sorted(set(_back.frames.loc[_back.frames['name'] == 'weird', 'file'])))")
    assert r.error is None and str(mod) in r.stdout, r.text()
    r = k.run("_f = profmagic.load(profmagic.to_folded(_profile).encode(), format='folded')\n"
              "print(_f.total() == _profile.sample_count or _f.total(), 'weird' in set(_f.frames['name']))")
    assert r.error is None and r.stdout.split()[-1] == "True", r.text()


def test_output_in_missing_folder(clean, tmp_path):
    k = clean
    path = str(tmp_path / "no" / "such" / "p.json")
    k.run("ran = False")
    r = k.run(f"%%profile -b sampler -q -o {path}\nran = True")
    assert r.error is None, r.error
    documented("output-folder-missing", r.stderr)
    assert k.value("ran") is False          # checked before the cell ran: nothing ran
    assert not os.path.exists(os.path.dirname(path))


@pytest.mark.requires("py-spy", "ptrace")
def test_nested_profile(clean):
    k = clean
    r = k.run("%profile -b py-spy -q _inner = get_ipython().run_line_magic('profile', '-b sampler -q busy(0.3)')")
    assert r.error is None, r.error
    assert k.value("_profile.meta['backend']") == "py-spy"
    assert k.value("_inner.meta['backend']") == "sampler"
    assert k.value("_inner.sample_count") > 0 and k.value("_profile.sample_count") > 0


def test_unknown_backend(clean):
    r = clean.run("%%profile -b nope\nbusy(0.1)")
    assert r.error is None and r.data == [], r.text()
    documented("unknown-backend", r.stderr)
    r = clean.run("%%profile --mode nope\nbusy(0.1)")
    documented("unknown-mode", r.stderr)
    r = clean.run("%profile -b sampler")
    documented("nothing-to-profile", r.stderr)


@pytest.mark.requires("py-spy", "ptrace")
def test_conflicting_options_gil_idle(clean):
    r = clean.run("%%profile -b py-spy --gil --idle -q\nbusy(0.2)")
    assert r.error is None, r.error
    documented("gil-overrides-idle", r.stderr)
    assert r.stderr.count("--gil overrides --idle") == 1, r.stderr
    assert clean.value("_profile.metric") == "cpu"

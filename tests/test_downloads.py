"""One descriptor per format (formats/registry.py) and one downloads module: the notebook report and the
``profmagic view`` page offer the same files under one size limit, and ``writer_for``, ``convert`` and
the downloads all take their suffixes, names and MIME types from the descriptors."""
from __future__ import annotations

import base64
import re

import pytest

import profmagic
from profmagic import cli, downloads, formats, page, report
from profmagic.model import Raw, StackBuilder

LINK = re.compile(r"<a class='profmagic-([a-z-]+)' download='([^']+)' href='([^']+)'>")


def profile(raw: Raw | None = None):
    b = StackBuilder()
    t = b.thread("MainThread")
    main, work, wait = (b.frame(n, "app.py", i, "python") for i, n in enumerate(("main", "work", "wait"), 1))
    for i in range(40):
        b.add(b.stack(t, (main, work if i % 4 else wait)), time=i * 0.01, wall=0.01, cpu=0.01 if i % 4 else 0.0)
    return b.build(metric="wall", meta={"backend": "test", "rate": 100.0}, raw=raw)


def links(html: str) -> dict[str, tuple[str, str]]:
    """kind -> (file name, href) of every download link."""
    return {kind: (name, href) for kind, name, href in LINK.findall(html)}


def decoded(href: str) -> tuple[str, bytes]:
    mime, b64 = re.fullmatch(r"data:([^;]+);base64,(.*)", href).groups()
    return mime, base64.b64decode(b64)


RAW = b"main;work 30\nmain;wait 10\n"


def test_notebook_and_view_page_offer_the_same_downloads(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)              # where the notebook writes a file too large for a link
    p = profile(Raw(RAW, "folded"))
    notebook, view = links(report.static_html(p)), links(page.standalone(p))
    assert sorted(notebook) == sorted(view) == ["chrome-trace", "gecko", "raw", "speedscope"]
    assert notebook == view
    assert view["raw"][0] == "profmagic-test.raw.folded" and decoded(view["raw"][1]) == ("text/plain", RAW)
    for kind, fmt in (("speedscope", "speedscope"), ("gecko", "gecko"), ("chrome-trace", "chrome_trace")):
        d = formats.descriptor(fmt)
        name, href = view[kind]
        mime, data = decoded(href)
        assert name == "profmagic-test" + d.suffixes[0] and mime == d.mime, (name, mime)
        q = profmagic.load(data)
        assert q.meta["format"] == fmt and q.sample_count == 40
        assert q.total("wall") == pytest.approx(0.4) and q.total("cpu") == pytest.approx(0.3)
    assert view["raw"] == notebook["raw"]


def test_one_size_limit_for_both(tmp_path, monkeypatch):
    """A limit between the files' sizes: the same files are links in both; the larger ones are written
    next to the notebook, and the page says how to make them."""
    monkeypatch.chdir(tmp_path)
    p = profile(Raw(RAW, "folded"))
    sizes = {d.kind: d.size for d in downloads.files(p)}
    limit = sorted(sizes.values())[1]         # two files at or under it, two over it
    monkeypatch.setattr(downloads, "MAX_DATA_URI", limit)
    notebook, view = report.static_html(p), page.standalone(p)
    inline = {k for k, (_, href) in links(view).items() if href.startswith("data:")}
    assert inline == {k.replace("_", "-") for k, n in sizes.items() if n <= limit} and len(inline) == 2
    assert {k for k, (_, href) in links(notebook).items() if href.startswith("data:")} == inline
    over = [k for k, n in sizes.items() if n > limit]
    beside = {k: name for k, (name, href) in links(notebook).items() if not href.startswith("data:")}
    assert sorted(beside) == sorted(k.replace("_", "-") for k in over)
    for kind, name in beside.items():
        assert href_file_loads(tmp_path / name) == 40, kind
    for kind in over:
        d = formats.descriptor(kind)
        assert f"profmagic convert FILE profmagic-test{d.suffixes[0]}" in view


def href_file_loads(path) -> int:
    return profmagic.load(str(path)).sample_count


def test_large_profiles_export_only_when_asked(monkeypatch):
    p = profile()
    monkeypatch.setattr(downloads, "MAX_EXPORT", dict.fromkeys(downloads.WRITERS, 79))   # 40 samples of 2 frames
    assert downloads.frame_count(p) == 80 and downloads.large_export(p)
    held = downloads.files(p)
    assert [(d.kind, d.data) for d in held] == [("speedscope", None), ("gecko", None), ("chrome_trace", None),
                                                ("raw", None)]
    assert held[0].note.startswith("not built for this display (80 frames")
    built = downloads.files(p, export_large=True)
    assert [profmagic.load(d.data).sample_count for d in built[:3]] == [40, 40, 40]
    assert built[3].note == "none kept (this profile was built in memory)"
    assert len(links(page.standalone(p))) == 3            # the page always exports
    # Each export has its own limit (the Chrome trace's time grows fastest with frames).
    monkeypatch.setattr(downloads, "MAX_EXPORT", {"speedscope": 80, "gecko": 80, "chrome_trace": 79})
    assert [d.data is not None for d in downloads.files(p)] == [True, True, False, False]


@pytest.mark.parametrize("fmt", [f.name for f in formats.descriptors()])
def test_every_raw_capture_gets_its_descriptors_suffix(fmt):
    d = formats.descriptor(fmt)
    raw = downloads.files(profile(Raw(b"x", fmt)))[-1]
    assert raw.filename == "profmagic-test.raw" + d.raw_suffix and raw.mime == d.mime
    # eu-stack's NAME has a dash: the old table's "eu_stack" key never matched it
    if fmt == "eu-stack":
        assert raw.filename.endswith(".raw.eu-stack.txt")


@pytest.mark.parametrize("suffix,fmt", [(s, f.name) for f in formats.writers() for s in f.suffixes])
def test_every_descriptor_suffix_converts_and_names_the_view_page(tmp_path, suffix, fmt, capsys):
    src = tmp_path / "in.speedscope.json"
    profmagic.save(profile(), src)
    out = tmp_path / f"out{suffix.upper() if suffix == '.txt' else suffix}"
    assert formats.writer_for(str(out)).FORMAT == formats.descriptor(fmt)
    assert cli.main(["convert", str(src), str(out)]) == 0
    assert f"({fmt}; 40 samples, 1 thread(s))" in capsys.readouterr().out
    q = profmagic.load(str(out))
    # folded keeps one number a stack: the wall seconds (0.4 s in all), read back as its weight
    assert q.meta["format"] == fmt and (q.sample_count == 40 if fmt != "folded" else q.total() == pytest.approx(0.4))
    assert q.functions().set_index("name").loc["wait", "self"] == pytest.approx(0.1 if fmt == "folded" else
                                                                              q.total() / 4)
    assert cli.html_name(str(out)) == str(tmp_path / "out.html")


@pytest.mark.parametrize("option,fmt", [(f.option, f.name) for f in formats.writers()])
def test_convert_to_is_every_writers_option(tmp_path, option, fmt):
    src = tmp_path / "in.speedscope.json"
    profmagic.save(profile(), src)
    assert cli.main(["convert", str(src), str(tmp_path / "out.bin"), "--to", option]) == 0
    assert profmagic.load(str(tmp_path / "out.bin")).meta["format"] == fmt


def test_descriptors():
    ds = formats.descriptors()
    assert [d.name for d in ds] == list(formats.available())
    assert {d.option for d in formats.writers()} == {"speedscope", "folded", "gecko", "chrome"}
    suffixes = [s for d in ds for s in d.suffixes]
    assert len(suffixes) == len(set(suffixes))
    for d in ds:
        assert d.reader is formats.get(d.name).read
        assert (d.writer is formats.get(d.name).write) if d.suffixes else d.writer is None
    with pytest.raises(ValueError, match=r"use \.gecko\.json, \.trace\.json, \.speedscope\.json, \.json, "
                                         r"\.folded, \.txt or \.collapsed$"):
        formats.writer_for("out.svg")
    with pytest.raises(Exception):
        ds[0].name = "x"                      # frozen

"""Containers are input (issue 28): a file's options never weaken safety, archives are bounded before
they are extracted; and the CLI turns a profile that asks for much into a file or one line.

The hostile zips are written by tests/fuzz.py's generators (by hand, so their declared sizes are the
file's to choose)."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import fuzz
import pytest

import profmagic
from profmagic import ProfileFormatError
from profmagic.formats import container

HERE = os.path.dirname(os.path.abspath(__file__))
SEGV = os.path.join(HERE, "data", "memray-segv.bin")   # memray's own reader segfaults on it
ENV = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}


def _folded_pair(options: dict, fmt: str = "folded") -> bytes:
    return container.write([("p.folded", b"a;b 3\n", fmt, "parent", options),
                            ("c.folded", b"c 2\n", "folded", "child 7", {})], "memory-children")


def _in_child(code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout,
                          env=ENV)


LOAD = ("import sys, profmagic\n"
        "try:\n    profmagic.load(sys.argv[1])\nexcept profmagic.ProfileFormatError as e:\n    print('PFE', e)\n")


def test_isolate_false_from_a_file_is_refused_and_the_process_lives(tmp_path):
    # The attack: a memray part whose options turn isolation off, with a capture that crashes memray's
    # reader. Refused from the manifest, before memray sees the capture.
    path = tmp_path / "x.zip"
    path.write_bytes(container.write([("capture.bin", open(SEGV, "rb").read(), "memray", "parent",
                                       {"isolate": False})], "memory-children"))
    r = _in_child(LOAD, str(path))
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith("PFE ") and "options.isolate: reader option 'isolate' is isolation, which the " \
        "caller chooses, never a file" in r.stdout, r.stdout
    info = subprocess.run([sys.executable, "-m", "profmagic", "info", str(path)], capture_output=True, text=True,
                          timeout=60, env=ENV)
    assert info.returncode == 2 and info.stdout == "" and len(info.stderr.strip().splitlines()) == 1, info
    assert "'isolate'" in info.stderr


@pytest.mark.requires("memray")
def test_the_crashing_capture_in_a_container_is_read_isolated(tmp_path):
    # Without the option, the part is read as any memray capture: in a child, whose crash is the error.
    path = tmp_path / "x.zip"
    path.write_bytes(container.write([("capture.bin", open(SEGV, "rb").read(), "memray", "parent", {})],
                                     "memory-children"))
    r = _in_child(LOAD, str(path))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "capture.bin: memray's reader crashed (SIGSEGV" in r.stdout or \
        "capture.bin: memray's reader crashed (SIGABRT" in r.stdout, r.stdout


@pytest.mark.parametrize("options, message", [
    ({"bogus": 1}, "options.bogus: unknown reader option 'bogus' for folded; a container may set lenient, thread"),
    ({"source": "/etc/passwd"}, "options.source: reader option 'source' is a source name, which the caller chooses"),
    ({"max_bytes": 1 << 40}, "options.max_bytes: reader option 'max_bytes' is a limit, which the caller chooses"),
    ({"path": "/tmp/x"}, "options.path: reader option 'path' is a path, which the caller chooses"),
    ({"depth": -5}, "options.depth: reader option 'depth' is a limit"),
    ({"lenient": "yes"}, "options.lenient: reader option 'lenient' is 'yes'; expected true or false"),
    ({"thread": 5}, "options.thread: reader option 'thread' is 5; expected a string"),
    ([1, 2], "parts[0].options: expected an object of reader options, got [1, 2]"),
])
def test_options_outside_the_allow_list_are_format_errors(options, message):
    with pytest.raises(ProfileFormatError) as e:
        profmagic.load(_folded_pair(options))
    assert message in str(e.value)


def test_options_of_each_format_are_type_checked():
    box = container.write([("w.json", b"{}", "speedscope", "wall", {"metric": "bytes!"}),
                           ("c.json", b"{}", "speedscope", "cpu", {})], "idle-pair")
    with pytest.raises(ProfileFormatError, match=r"parts\[0\]\.options\.metric: reader option 'metric' is "
                                                 r"'bytes!'; expected 'wall', 'cpu' or a memory metric"):
        profmagic.load(box)
    box = container.write([("w.json", b"[]", "chrome_trace", "wall", {"labels": {"1": {"label": 5}}}),
                           ("c.json", b"{}", "speedscope", "cpu", {})], "idle-pair")
    with pytest.raises(ProfileFormatError, match=r"options\.labels: reader option 'labels'"):
        profmagic.load(box)


def test_an_allowed_option_still_shapes_the_data():
    p = profmagic.load(_folded_pair({"thread": "parent thread"}))
    assert sorted(map(str, p.threads)) == ["all", "parent thread"]
    assert p.total() == 5 and p.functions().set_index("name")["self"].to_dict() == {"a": 0, "b": 3, "c": 2}


def test_a_legit_container_loads_with_exact_totals():
    p = profmagic.load(_folded_pair({}))
    assert p.meta["format"] == container.NAME and p.metric == "samples"
    assert p.total() == 5 and p.functions().set_index("name")["self"].to_dict() == {"a": 0, "b": 3, "c": 2}
    # One container in another (time-memory of a memory-children capture) is as deep as they go.
    outer = container.write([("t.folded", b"x 4\n", "folded", "time", {}),
                             ("m.zip", _folded_pair({}), container.NAME, "memory", {})], "time-memory")
    assert profmagic.load(outer).total() == 4
    deeper = container.write([("t.folded", b"x 4\n", "folded", "time", {}),
                              ("m.zip", outer, container.NAME, "memory", {})], "time-memory")
    with pytest.raises(ProfileFormatError, match="a container nested 2 deep; at most 1 \\(nesting limit\\)"):
        profmagic.load(deeper)


def _timed_error(data: bytes) -> tuple[str, float]:
    t = time.process_time()
    with pytest.raises(ProfileFormatError) as e:
        profmagic.load(data)
    return str(e.value), time.process_time() - t


def test_zip_bomb_is_refused_by_its_ratio_before_extraction():
    data = fuzz.zip_bomb(1024)   # 1 MiB of zip declaring 1 GiB
    assert len(data) < 1.1 * 2**20
    message, cpu = _timed_error(data)
    assert "m0.folded: member 'm0.folded' declares 1,073,741,824 bytes from 1,062," in message
    assert "at most 100x (compression ratio limit: a zip bomb?)" in message
    assert cpu < 2.0


def test_sizes_that_lie_stop_at_the_declared_size():
    data = fuzz.zip_lying_sizes(1024)   # declares its compressed size (1 MiB), inflates to 1 GiB
    message, cpu = _timed_error(data)
    assert "member 'w.folded' is damaged (BadZipFile: Bad CRC-32" in message
    assert cpu < 2.0


def test_twenty_thousand_parts_are_refused_by_the_part_limit():
    message, cpu = _timed_error(fuzz.zip_many_parts(20_000))
    assert "manifest.json: parts: the manifest lists 20,000 parts; at most 256 (part limit)" in message
    assert cpu < 2.0


def test_twenty_thousand_members_are_refused_by_the_member_limit():
    message, cpu = _timed_error(fuzz.zip_many_members(20_000))
    assert "the zip holds 20,001 members; a container holds at most 260 (member limit)" in message
    assert cpu < 2.0


@pytest.mark.parametrize("change, message", [
    (lambda m: m["parts"].append(dict(m["parts"][0])), "a second part with role 'parent'"),
    (lambda m: m["parts"][0].update(format="nope"), "parts[0].format: unknown format 'nope'"),
    (lambda m: m["parts"][0].update(role="wall"), "role 'wall' is not one combine 'memory-children' uses"),
    (lambda m: m.update(combine="x"), "combine: unknown combine 'x'"),
    (lambda m: m.update(meta={"helpers": "all"}), "meta.helpers: unexpected value 'all'; expected a list"),
])
def test_a_manifest_is_checked_before_any_part_is_read(change, message):
    import io
    import json
    import zipfile
    src = zipfile.ZipFile(io.BytesIO(_folded_pair({})))
    manifest = json.loads(src.read("manifest.json"))
    change(manifest)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("manifest.json", json.dumps(manifest))
        for name in src.namelist()[1:]:
            z.writestr(name, src.read(name))
    with pytest.raises(ProfileFormatError) as e:
        profmagic.load(buf.getvalue())
    assert message in str(e.value)


# -- the CLI on a count that asks for a billion samples ----------------------------------------------
SUFFIXES = (".speedscope.json", ".gecko.json", ".trace.json", ".json", ".folded", ".txt")


def _cli(*args: str, timeout: float = 60) -> tuple[subprocess.CompletedProcess, float]:
    t = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "profmagic", *args], capture_output=True, text=True,
                       timeout=timeout, env=ENV)
    return r, time.monotonic() - t


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_convert_a_billion_count_is_a_file_or_one_line(suffix, tmp_path):
    src = tmp_path / "x.folded"
    src.write_bytes(b"a;b 1000000000\n")
    out = tmp_path / f"y{suffix}"
    r, seconds = _cli("convert", str(src), str(out))
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert seconds < 10 + 5, seconds   # + the interpreter's start and imports
    if r.returncode == 0:
        assert r.stdout.startswith(f"wrote {out} (") and "1,000,000,000 samples, 1 thread(s))" in r.stdout
        back = profmagic.load(str(out))   # the count comes back whole, as a weight
        assert back.sample_count == 1_000_000_000 and back.total() == 1_000_000_000
        if suffix in (".folded", ".txt"):
            assert out.read_bytes() == b"a;b 1000000000\n"
    else:
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r


def test_view_of_a_billion_count_writes_its_page(tmp_path):
    src = tmp_path / "x.folded"
    src.write_bytes(b"a;b 1000000000\n")
    r, seconds = _cli("view", str(src))
    assert r.returncode == 0, r.stderr[-3000:]
    assert seconds < 10 + 5, seconds
    page = (tmp_path / "x.html").read_text()
    assert r.stdout.strip() == str(tmp_path / "x.html") and "1,000,000,000" in page


def test_a_lone_surrogate_in_a_name_is_written_not_raised(tmp_path):
    src = tmp_path / "s.speedscope.json"
    src.write_bytes(fuzz.speedscope_surrogate(0))
    r, _ = _cli("convert", str(src), str(tmp_path / "s.folded"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "s.folded").read_bytes() == b"bad\\ud800name 1\nbad\\ud800name;ok 1\n"
    r, _ = _cli("view", str(src))
    assert r.returncode == 0, r.stderr
    assert "bad\\ud800name" in (tmp_path / "s.html").read_text(encoding="utf-8")
    r, _ = _cli("info", str(src))
    assert r.returncode == 0 and "bad\\ud800name" in r.stdout, r


@pytest.mark.parametrize("error_id, data", [
    ("container-option-refused", lambda: _folded_pair({"isolate": False})),
    ("container-option-unknown", lambda: _folded_pair({"bogus": 1})),
    ("container-limit", lambda: fuzz.zip_many_members(300)),
    ("container-manifest", lambda: container.write([("p", b"a 1\n", "nope", "parent", {})], "memory-children")),
    ("count-too-large", lambda: b"a;b 1" + b"0" * 20 + b"\n"),
])
def test_messages_are_documented(error_id, data):
    from faults.conftest import documented
    with pytest.raises(ProfileFormatError) as e:
        profmagic.load(data())
    documented(error_id, str(e.value))

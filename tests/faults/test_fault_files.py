"""Hostile and careless files (issue 21): a reader fails with a ProfileFormatError naming the file,
never a crash, a hang, a runaway allocation or a traceback; from the command line, from Python in
a child process, and in a real kernel. Each file is made for real here (a FIFO by os.mkfifo, real
py-spy output), except the crafted pstats file kept in tests/data/hostile/ (see its README)."""
from __future__ import annotations

import json
import os
import resource
import signal
import struct
import subprocess
import sys
import time

import pytest
from conftest import ROOT, documented

import profmagic
from profmagic import ProfileFormatError

pytestmark = pytest.mark.timeout(300)
HOSTILE = os.path.join(ROOT, "tests", "data", "hostile")
CYCLE = os.path.join(HOSTILE, "marshal-cycle.json")
SCHEMA = "https://www.speedscope.app/file-format-schema.json"
ESC, RLO = "\x1b", "\u202e"


def cli(*args, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "profmagic", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def refused(r: subprocess.CompletedProcess, error_id: str, path) -> None:
    """Exit code 2, the documented message naming the file, no traceback."""
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and str(path) in r.stderr, r.stderr
    documented(error_id, r.stderr)


def speedscope(frames, profile) -> str:
    return json.dumps({"$schema": SCHEMA, "shared": {"frames": [{"name": n} for n in frames]},
                       "profiles": [{"name": "t", "startValue": 0, **profile}]})


# -- a pstats file that crashes marshal --------------------------------------------------------------
def test_crafted_pstats_kills_marshal_not_profmagic():
    r = subprocess.run([sys.executable, "-c", "import marshal, sys; marshal.loads(open(sys.argv[1], 'rb').read())",
                        CYCLE], capture_output=True, timeout=60)
    assert r.returncode == -signal.SIGSEGV, r   # the file is hostile for real on this Python
    r = cli("info", CYCLE)
    refused(r, "pstats-bad-marshal", CYCLE)
    assert "reference 4 to a container that is still being read (a cycle)" in r.stderr
    code = ("import profmagic, sys\ntry:\n    profmagic.load(sys.argv[1])\n"
            "except profmagic.ProfileFormatError as e:\n    print('refused:', e.offset)\n")
    r = subprocess.run([sys.executable, "-c", code, CYCLE], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout == "refused: 37\n", (r.returncode, r.stdout, r.stderr)


@pytest.mark.kernel
def test_crafted_pstats_in_a_real_kernel(clean):
    r = clean.run(f"profmagic.load({CYCLE!r})")
    assert r.error is not None and r.error["ename"] == "ProfileFormatError", r.text()
    documented("pstats-bad-marshal", r.error["evalue"])   # and `clean` checks the kernel still answers


@pytest.mark.parametrize("items", [1 << 28, (1 << 31) - 1])
def test_pstats_length_bomb_allocates_nothing(tmp_path, items):
    # 19 bytes: a stats dict whose first value declares a tuple of `items` items (marshal.loads
    # allocates 8 bytes per declared item before reading any: 2.1 GB and 17 GB).
    path = tmp_path / "bomb.prof"
    path.write_bytes(b"{)\x03z\x01ai\x01\x00\x00\x00z\x01b(" + struct.pack("<i", items))
    assert path.stat().st_size == 19
    # The baseline is taken after the reader's imports: the bound is on what the 19 bytes allocate.
    code = ("import profmagic, profmagic.formats.pstats, resource, sys\n"
            "base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
            "try:\n    profmagic.load(sys.argv[1])\nexcept profmagic.ProfileFormatError as e:\n    print(e)\n"
            "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) // 1024)\n")
    r = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60)
    message, grew_mb = r.stdout.splitlines()
    assert f"a tuple declares {items:,} items but only 0 bytes are left" in message
    assert int(grew_mb) < 20, f"the process grew by {grew_mb} MB reading 19 bytes"
    refused(cli("info", path), "pstats-bad-marshal", path)


# -- readers that blew up or hung --------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["speedscope", "pyinstrument"])
def test_deeply_nested_json(tmp_path, kind):
    head = '{"$schema": "%s", "shared": {"frames": ' % SCHEMA if kind == "speedscope" else \
        '{"start_call_stack": [], "sample_count": 1, "frame_records": '
    path = tmp_path / f"deep.{kind}.json"
    path.write_text(head + "[" * 100_000 + "]" * 100_000 + "}}")
    r = cli("info", path)
    refused(r, "input-too-deep", path)
    with pytest.raises(ProfileFormatError, match="nests deeper than Python can read"):
        profmagic.load(path)


def test_dev_zero_is_refused_before_reading():
    t = time.monotonic()
    r = cli("info", "/dev/zero", timeout=60)
    refused(r, "not-a-file", "/dev/zero")
    assert "a character device" in r.stderr and time.monotonic() - t < 30
    with pytest.raises(ProfileFormatError, match="character device"):
        profmagic.load("/dev/zero")


def test_fifo_and_directory_are_refused_not_waited_for(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    r = cli("info", fifo, timeout=60)   # opening a FIFO for reading would block: nobody writes
    refused(r, "not-a-file", fifo)
    assert "a FIFO (named pipe)" in r.stderr
    with pytest.raises(ProfileFormatError, match="FIFO"):
        profmagic.load(fifo)
    refused(cli("info", tmp_path), "not-a-file", tmp_path)


def test_save_to_a_fifo_refuses_without_blocking(tmp_path):
    """(--output to a FIFO is refused before the cell runs: faults/test_fault_options.py.)"""
    fifo = tmp_path / "out.json"
    os.mkfifo(fifo)
    p = profmagic.load(b"main;work 5\n")
    with pytest.raises(ValueError, match=r"out.json is a FIFO \(named pipe\), not a regular file"):
        profmagic.save(p, str(fifo))


def test_size_bound(tmp_path):
    path = tmp_path / "p.folded"
    path.write_bytes(b"main;work 5\n" * 100)
    with pytest.raises(ProfileFormatError) as e:
        profmagic.load(path, max_bytes=1000)
    documented("file-too-large", "profmagic: " + str(e.value))
    assert profmagic.load(path, max_bytes=1200).sample_count == 500


@pytest.mark.timeout(120)
def test_folded_whose_first_line_is_over_64kb(tmp_path):
    # Real py-spy raw output of a 2600-deep recursion: one stack line is far longer than the head
    # sniffing used to look at, so the file was "unrecognised".
    script = tmp_path / "recursion_with_a_long_function_name.py"
    script.write_text("import sys, time\nsys.setrecursionlimit(10000)\n"
                      "def descend_through_all_the_levels(n):\n"
                      "    if n:\n        return descend_through_all_the_levels(n - 1)\n"
                      "    t = time.perf_counter()\n    while time.perf_counter() - t < 1.5:\n        pass\n"
                      "descend_through_all_the_levels(2600)\n")
    out = tmp_path / "deep.folded"
    pyspy = os.path.join(os.path.dirname(sys.executable), "py-spy")
    subprocess.run([pyspy, "record", "-f", "raw", "-r", "50", "-o", str(out), "--", sys.executable, str(script)],
                   check=True, capture_output=True, timeout=90)
    # py-spy writes its lines in no set order: the deepest goes first (folded lines may come in any order).
    lines = sorted(out.read_bytes().splitlines(), key=len, reverse=True)
    out.write_bytes(b"\n".join(lines) + b"\n")
    assert len(lines[0]) > 64 * 1024
    p = profmagic.load(out)
    assert p.meta["format"] == "folded"
    assert p.sample_count == sum(int(ln.rsplit(b" ", 1)[1]) for ln in lines)
    deepest = max(p.stacks["stack"], key=len)
    names = [p.frames.at[f, "name"] for f in deepest]
    assert sum(n.startswith("descend_through_all_the_levels (") for n in names) == 2601
    r = cli("info", out)
    assert r.returncode == 0 and "descend_through_all_the_levels" in r.stdout, r.stderr


# -- names and numbers ---------------------------------------------------------------------------------
def test_lone_surrogate_name_prints_and_saves(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(speedscope(["main", "x\\ud800y"], {"type": "sampled", "unit": "none", "endValue": 3,
                                                       "samples": [[0, 1], [0, 1], [0]], "weights": [1, 1, 1]}))
    r = cli("info", path)
    assert r.returncode == 0, r.stderr
    assert "x\\ud800y" in r.stdout
    p = profmagic.load(path)
    folded = profmagic.save(p, str(tmp_path / "s.folded"))
    assert open(folded, "rb").read() == b"main 1\nmain;x\\ud800y 2\n"
    r = cli("convert", path, tmp_path / "c.folded")
    assert r.returncode == 0, r.stderr


def test_weights_that_overflow_are_refused(tmp_path):
    big = tmp_path / "w.json"
    big.write_text(speedscope(["a", "b"], {"type": "sampled", "unit": "seconds", "endValue": 2,
                                           "samples": [[0], [0, 1]], "weights": [1e308, 1e308]}))
    r = cli("info", big)
    refused(r, "weights-not-finite", big)
    assert "nan%" not in r.stdout + r.stderr and "RuntimeWarning" not in r.stderr
    digits = tmp_path / "w.folded"   # counts of 309 digits: refused by the count cap before any sum
    digits.write_text("a;b 1" + "0" * 308 + "\nc 1" + "0" * 308 + "\n")
    refused(cli("info", digits), "count-too-large", digits)
    long = tmp_path / "d.json"
    long.write_text(speedscope(["a"], {"type": "sampled", "unit": "seconds", "endValue": 1e300,
                                       "samples": [[0], [0]], "weights": [1e300, 1]}))
    r = cli("info", long)   # its duration used to print with 300 digits
    refused(r, "duration-too-long", long)
    assert len(r.stderr) < 300


def test_terminal_injection_is_escaped(tmp_path):
    path = tmp_path / "evil.folded"
    names = ["main", f"{ESC}]0;owned\x07", f"{ESC}[2J", "n\x00ul", f"{RLO}txt.exe", "café"]
    path.write_bytes(";".join(names).encode() + b" 7\n")
    r = subprocess.run([sys.executable, "-m", "profmagic", "info", str(path)], capture_output=True, timeout=60)
    out = r.stdout.decode()
    assert r.returncode == 0, r.stderr
    assert not any(c in out for c in (ESC, "\x00", "\x07", RLO)), out
    for shown in ("\\x1b]0", "owned\\x07", "\\x1b[2J", "n\\x00ul", "\\u202etxt.exe", "café"):
        assert shown in out, (shown, out)
    bad = tmp_path / f"bad{ESC}[2J.prof"   # an error message names the file: escaped too
    bad.write_bytes(b"{)\x03z\x01a")
    r = subprocess.run([sys.executable, "-m", "profmagic", "info", str(bad)], capture_output=True, timeout=60)
    assert r.returncode == 2 and ESC.encode() not in r.stderr and b"bad\\x1b[2J.prof" in r.stderr, r.stderr


def test_dense_pstats_call_graph_is_bounded(tmp_path):
    # 4,800 functions in 400 layers of 12, each called by every function of the layer above: 12^400
    # paths. The rebuild keeps the heaviest few per function and cuts paths to a depth that keeps
    # the frames in proportion to the file (the pre-issue-21 rebuild grew to gigabytes on this).
    import random

    from profmagic.formats import pstats as fmt
    rng = random.Random(7)
    layers = [[(f"/app/layer{li}.py", 10 + i, f"f{li}_{i}") for i in range(12)] for li in range(400)]
    stats = {}
    for li, row in enumerate(layers):
        for k in row:
            callers = {up: (3, 3, 1e-4, rng.random()) for up in (layers[li - 1] if li else [])}
            stats[k] = (36, 36, rng.random() * 1e-3, rng.random(), callers)
    import marshal   # writing the test file only; profmagic never reads with marshal
    path = tmp_path / "dense.prof"
    path.write_bytes(marshal.dumps(stats))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    p = profmagic.load(path)
    grew_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    paths, frames = fmt.budgets(stats)
    assert len(p.stacks) <= paths and sum(map(len, p.stacks["stack"])) <= frames
    assert p.total("wall") == pytest.approx(sum(v[2] for v in stats.values()), rel=1e-9)
    assert "cut" in p.meta["approximate"] and fmt.CUT in set(p.frames["name"])
    assert grew_mb < 40 * path.stat().st_size / 2**20 + 200, grew_mb


def test_numbers_too_large_and_text_that_is_not_unicode(tmp_path):
    big = tmp_path / "big.json"   # a 401-digit weight: Python reads the int, a float cannot hold it
    big.write_text(speedscope(["a"], {"type": "sampled", "unit": "seconds", "endValue": 1,
                                      "samples": [[0]], "weights": [10**400]}))
    refused(cli("info", big), "input-out-of-range", big)
    utf16 = tmp_path / "odd.folded"   # a UTF-16 byte-order mark, then an odd number of bytes
    utf16.write_bytes("a;b 1\n".encode("utf-16-le").join([b"\xff\xfe", b"\x00"]))
    refused(cli("info", "--format", "folded", utf16), "input-bad-text", utf16)


def test_running_out_of_memory_is_a_format_error(tmp_path):
    # A real MemoryError: the reader runs under an address-space limit only a little above what the
    # process already uses, and the file needs more than that to read (about 26x its 4 MB).
    path = tmp_path / "dense.folded"
    path.write_bytes(b"a;" * 2_000_000 + b"b 1\n")
    code = ("import resource, sys, profmagic, profmagic.formats, profmagic.model\n"
            "vm = int(open('/proc/self/statm').read().split()[0]) * resource.getpagesize()\n"
            "resource.setrlimit(resource.RLIMIT_AS, (vm + 40 * 2**20, resource.RLIM_INFINITY))\n"
            "try:\n    profmagic.load(sys.argv[1])\n    print('read')\n"
            "except profmagic.ProfileFormatError as e:\n    print('profmagic: ' + str(e))\n")
    r = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    documented("input-out-of-memory", r.stdout)

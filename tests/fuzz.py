"""Mutation fuzzing of the readers through ``profmagic.load()``, in worker processes.

Seeds are real profiler output made on the spot (cProfile, py-spy speedscope and raw, perf script).
Mutation ``i`` of a format is a pure function of (seed, format, i), so a worker regenerates it and a
failure can be reproduced from its number. Each worker loads many mutated files, one after the
other, and prints ``start i`` before and ``done i <outcome>`` after each: when a worker dies (a
negative exit code: a signal) or stops answering, the mutation it had started is the culprit, and a
new worker goes on with the next one.

Used by tests/test_fuzz_readers.py (CI, fixed seed) and bench/bench_fuzz.py (longer runs).
The worker side: ``python tests/fuzz.py worker SEEDFILE FORMAT RSEED START END FOLDER``.
"""
from __future__ import annotations

import cProfile
import os
import queue
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

FORMATS = ("pstats", "speedscope", "folded", "perf_script")
MAX_INPUT = 256 * 1024   # bytes of one mutated file, at most
SEED_BYTES = 16 * 1024   # a text seed is cut to its whole lines within this

WORKLOAD = '''
import time
def leaf(n):
    return sum(i * i for i in range(n))
def branch(n):
    return [leaf(500) for _ in range(n)]
def deep(n):
    return deep(n - 1) if n else branch(3)
def wait():
    time.sleep(0.001)
end = time.perf_counter() + {seconds}
while time.perf_counter() < end:
    branch(4); deep(30); wait()
'''

_MARSHAL_CODES = b"{()[<>iglrzZaAstu0NTFcSyx.f"
TOKENS = {
    "pstats": ([bytes([c]) for c in _MARSHAL_CODES] + [bytes([c | 0x80]) for c in b"{()gizZau"]
               + [b"r" + struct.pack("<i", k) for k in (0, 1, 2, 4, 5, 7, -1, 1 << 30)]
               + [c + struct.pack("<i", k) for c in (b"(", b"u", b"a", b"l", b"s")
                  for k in (-1, 1 << 28, (1 << 31) - 1)]
               + [b"g" + struct.pack("<d", v) for v in (1e308, float("nan"), float("inf"), -0.0)]
               + [b"\xa9\x01" * 40, b")\x00", b"{0", b"0", b"f\x03nan", b"l\x06\x00\x00\x00" + b"\xff\x7f" * 6]),
    "speedscope": [b"[", b"]", b"{", b"}", b'"', b",", b":", b"1e308", b"-1", b"1e999", b"NaN", b"Infinity",
                   b"null", b"true", b'"\\ud800"', b"[" * 3000, b'{"a":' * 2000, b"99999999999999999999999",
                   b'"frame":1e300', b"0.0", b"\x1b[2J", b'"type":"evented"', b'"unit":"nanoseconds"',
                   b'"samples":[[0,0,0]]', b'"weights":[1e308,1e308]', b'"endValue":1e308', b"\x00", b"\xff"],
    "folded": [b";", b"\n", b" ", b"\t", b" 1e308\n", b"\x00", b"\x1b]0;x\x07", b"\xff\xfe", b"\xef\xbb\xbf",
               b";" * 3000, b"a;" * 20000, b" 99999999999999999999999999999\n", b"\xed\xa0\x80", b"\r\n",
               b" 1" + b"0" * 320 + b"\n", b"\xe2\x80\xae", b" -5\n", b" 1.5\n", b" (", b" (a.py", b".py:1)"],
    "perf_script": [b"\n", b"\n\n", b"\t", b" ", b":", b"ffffffffffffffff", b" cpu-clock: ", b"[unknown]", b"(",
                    b")", b"+0x", b"\x00", b" 99999999999999999999.999999: ", b"\t7f00 x (y)\n" * 2000,
                    b"python 123/456 [000] 1.000000: 1 cpu-clock:\n", b"\xff", b"1e308", b" -1 ",
                    b"\tffffffffffffffff [unknown] ([unknown])\n", b"\x1b]0;x\x07", b" (", b"  ", b"a", b" : "],
}
# Put in front: byte-order marks, and the starts other formats are sniffed by (another reader gets it).
PREFIXES = [b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff", b"{", b"{)\x03", b"\xfb)\x03", b"\n", b"\x00",
            b'{"$schema":"https://www.speedscope.app/file-format-schema.json",', b'{"frame_records":[],',
            b"PID 1 - process\n", b" 0xffffffff81000000 : x+0x0/0x1 [kernel]\n\t1\n", b"a;b 1\n"]


def mutate(seed: bytes, fmt: str, i: int, rseed: int = 0) -> bytes:
    """Mutation ``i`` of ``seed``: 1 to 8 edits (set a byte, insert a format token, insert it
    repeated, delete, duplicate a span, cut, put a prefix in front), and for pstats also references
    and FLAG_REF bits."""
    r = random.Random(f"{rseed}:{fmt}:{i}")
    d = bytearray(seed)
    tokens = TOKENS[fmt]
    for _ in range(r.choice((1, 1, 2, 2, 3, 5, 8))):
        pos = r.randrange(len(d) + 1)
        op = r.randrange(10 if fmt == "pstats" else 8)
        if op == 0 and d:
            d[min(pos, len(d) - 1)] = r.randrange(256)
        elif op in (1, 2):
            d[pos:pos] = r.choice(tokens)
        elif op == 3:
            d[pos:pos] = r.choice(tokens) * r.randint(2, 2000)
        elif op == 4:
            del d[pos:pos + r.randint(1, 64)]
        elif op == 5:
            d[pos:pos] = d[pos:pos + r.randint(1, 4096)]
        elif op == 6 and r.random() < 0.3:
            del d[pos:]
        elif op == 7 and r.random() < 0.3:
            d[0:0] = r.choice(PREFIXES)
        elif op == 8:   # pstats: point a reference elsewhere
            refs = [j for j in range(len(d) - 4) if d[j] == 0x72]
            if refs:
                j = r.choice(refs)
                d[j + 1:j + 5] = struct.pack("<i", r.randrange(12))
        elif op == 9:   # pstats: set FLAG_REF on a type code
            codes = [j for j, c in enumerate(d) if (c & 0x7F) in _MARSHAL_CODES]
            if codes:
                d[r.choice(codes)] |= 0x80
    return bytes(d[:MAX_INPUT])


# -- seeds -----------------------------------------------------------------------------------------
def _text_head(data: bytes) -> bytes:
    if len(data) <= SEED_BYTES:
        return data
    cut = data.rfind(b"\n", 0, SEED_BYTES)
    return data[:cut + 1] if cut > 0 else data[:SEED_BYTES]


def _py_spy() -> str:
    here = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return here if os.path.exists(here) else shutil.which("py-spy") or "py-spy"


def make_seeds(folder: str, formats=FORMATS) -> dict[str, str]:
    """Real profiler output of one small workload, one seed file per format: format -> path."""
    os.makedirs(folder, exist_ok=True)
    work = os.path.join(folder, "workload.py")
    with open(work, "w") as f:
        f.write(WORKLOAD.format(seconds=0.6))
    out: dict[str, str] = {}

    def keep(fmt, data):
        out[fmt] = os.path.join(folder, f"seed.{fmt}")
        with open(out[fmt], "wb") as f:
            f.write(data)

    if "pstats" in formats:
        pr = cProfile.Profile()
        pr.enable()
        exec(compile(WORKLOAD.format(seconds=0.05), "workload.py", "exec"), {})
        pr.disable()
        path = os.path.join(folder, "w.pstats")
        pr.dump_stats(path)
        with open(path, "rb") as f:
            keep("pstats", f.read())
    for fmt, flag in (("speedscope", "speedscope"), ("folded", "raw")):
        if fmt in formats:
            path = os.path.join(folder, f"w.{flag}")
            subprocess.run([_py_spy(), "record", "-r", "200", "-f", flag, "-o", path, "--", sys.executable, work],
                           check=True, capture_output=True, timeout=60)
            with open(path, "rb") as f:
                data = f.read()
            keep(fmt, data if fmt == "speedscope" else _text_head(data))
    if "perf_script" in formats:
        data_file = os.path.join(folder, "perf.data")
        subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-F", "499", "-g", "-o", data_file, "--",
                        sys.executable, work], check=True, capture_output=True, timeout=60)
        r = subprocess.run(["perf", "script", "-i", data_file], check=True, capture_output=True, timeout=120)
        keep("perf_script", _text_head(r.stdout))
    return out


# -- running ---------------------------------------------------------------------------------------
@dataclass
class Report:
    mutations: int = 0
    outcomes: dict = field(default_factory=dict)     # (format, outcome) -> count
    crashes: list = field(default_factory=list)      # (format, i, exit code)
    hangs: list = field(default_factory=list)        # (format, i)
    others: list = field(default_factory=list)       # (format, i, "Type: message") — not ProfileFormatError
    workers: int = 0
    max_rss_mb: float = 0.0
    seconds: float = 0.0

    def failures(self) -> list:
        return self.crashes + self.hangs + self.others


def _chunk(seed_path, fmt, rseed, start, end, hang, folder, report, lock) -> None:
    i = start
    while i < end:
        err = tempfile.TemporaryFile()
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "worker", seed_path, fmt, str(rseed),
                                 str(i), str(end), folder], stdout=subprocess.PIPE, stderr=err, text=True)
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: [lines.put(ln) for ln in proc.stdout] + [lines.put(None)], daemon=True).start()
        current = None
        while True:
            try:
                ln = lines.get(timeout=hang)
            except queue.Empty:   # no answer: the mutation it is on hangs
                proc.kill()
                proc.wait()
                with lock:
                    report.hangs.append((fmt, current))
                break
            if ln is None:
                rc = proc.wait()
                if rc < 0 or current is not None:
                    with lock:
                        report.crashes.append((fmt, current, rc))
                elif rc != 0:
                    err.seek(0)
                    raise RuntimeError(f"fuzz worker failed (rc {rc}): {err.read().decode(errors='replace')[-2000:]}")
                break
            kind, _, rest = ln.rstrip("\n").partition(" ")
            if kind == "start":
                current = int(rest)
            elif kind == "done":
                n, _, outcome = rest.partition(" ")
                current, i = None, int(n) + 1
                with lock:
                    report.mutations += 1
                    key = (fmt, outcome.split(":")[0])
                    report.outcomes[key] = report.outcomes.get(key, 0) + 1
                    if outcome.startswith("other"):
                        report.others.append((fmt, int(n), outcome[6:]))
            elif kind == "maxrss":
                with lock:
                    report.max_rss_mb = max(report.max_rss_mb, float(rest))
        with lock:
            report.workers += 1
        err.close()
        if current is not None:   # it died or hung on this one: go on after it
            i = current + 1
        elif proc.returncode != 0:   # died between two mutations
            i += 1


def run(seeds: dict[str, str], per_format: int, rseed: int = 0, parallel: int = 2, hang: float = 60.0,
        chunk: int | None = None) -> Report:
    """Fuzz each format in ``seeds`` (format -> seed file) with ``per_format`` mutations."""
    report, lock = Report(), threading.Lock()
    chunk = chunk or per_format
    folder = tempfile.mkdtemp(prefix="profmagic-fuzz-")
    jobs = [(seeds[fmt], fmt, rseed, s, min(per_format, s + chunk), hang, folder, report, lock)
            for fmt in seeds for s in range(0, per_format, chunk)]
    t0 = time.perf_counter()
    todo = list(jobs)
    running: list[threading.Thread] = []
    errors: list[BaseException] = []

    def job(args):
        try:
            _chunk(*args)
        except BaseException as e:   # re-raised in the caller
            errors.append(e)

    while todo or running:
        running = [t for t in running if t.is_alive()]
        while todo and len(running) < parallel:
            t = threading.Thread(target=job, args=(todo.pop(0),))
            t.start()
            running.append(t)
        time.sleep(0.05)
    shutil.rmtree(folder, ignore_errors=True)
    if errors:
        raise errors[0]
    report.seconds = time.perf_counter() - t0
    return report


def worker(seed_path: str, fmt: str, rseed: int, start: int, end: int, folder: str) -> None:
    import resource

    import profmagic
    from profmagic.errors import ProfileFormatError
    with open(seed_path, "rb") as f:
        seed = f.read()
    path = os.path.join(folder, f"mutant-{fmt}-{start}")
    for i in range(start, end):
        with open(path, "wb") as f:
            f.write(mutate(seed, fmt, i, rseed))
        print(f"start {i}", flush=True)
        try:
            profmagic.load(path)
            outcome = "profile"
        except ProfileFormatError:
            outcome = "format-error"
        except Exception as e:
            outcome = f"other {type(e).__name__}: {str(e)[:300]!r}"
        print(f"done {i} {outcome}", flush=True)
    os.unlink(path)
    print(f"maxrss {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f}", flush=True)


if __name__ == "__main__" and sys.argv[1:2] == ["worker"]:
    worker(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), sys.argv[7])


# -- shapes (issue 28): small files that ask a reader for much work -------------------------------
# Each generator takes ``n`` (the size the attack had, times the scale) and gives the bytes.
# A shape is run by ``run_shape`` in a child process under a memory cap (RLIMIT_AS) and a timer; the
# child loads it (and, for the shapes marked ``render``, makes the summary, the folded text and the
# page, as `profmagic info/convert/view` do).
import json  # noqa: E402
import zlib  # noqa: E402

SPEEDSCOPE_SCHEMA = "https://www.speedscope.app/file-format-schema.json"


def _gecko(stack_rows: list, samples: list, strings=("f",), ext: dict | None = None) -> bytes:
    doc = {"meta": {"version": 29, "interval": 1.0, "startTime": 0, "product": "fuzz",
                    "categories": [{"name": "Other", "color": "grey", "subcategories": ["Other"]}]},
           "libs": [], "processes": [],
           "threads": [{"name": "t", "pid": 1, "tid": 1, "processType": "default",
                        "samples": {"schema": {"stack": 0, "time": 1}, "data": samples},
                        "frameTable": {"schema": {"location": 0, "line": 1, "category": 2},
                                       "data": [[i, None, 0] for i in range(len(strings))]},
                        "stackTable": {"schema": {"prefix": 0, "frame": 1}, "data": stack_rows},
                        "stringTable": list(strings)}]}
    if ext is not None:
        doc["x-profmagic"] = ext
    return json.dumps(doc, separators=(",", ":")).encode()


def gecko_chain(n: int) -> bytes:
    """A stackTable where row i's prefix is row i-1: one chain n deep, sampled at 64 depths."""
    rows = [[None, 0]] + [[i, 0] for i in range(n - 1)]
    step = max(1, n // 64)
    return _gecko(rows, [[i, float(k)] for k, i in enumerate(range(n - 1, -1, -step))])


def _chrome(events: list, **top) -> bytes:
    return json.dumps({"traceEvents": events, **top}, separators=(",", ":")).encode()


def chrome_nested_b(n: int) -> bytes:
    """n ``B`` events, each inside the one before, none ended."""
    return _chrome([{"ph": "B", "name": f"f{i % 97}", "pid": 1, "tid": 1, "ts": i} for i in range(n)])


def chrome_frames_chain(n: int) -> bytes:
    """A stackFrames ``parent`` chain n long, sampled by ``P`` events at 64 depths."""
    frames = {str(i): ({"name": f"f{i % 97}", "category": "c"} | ({"parent": str(i - 1)} if i else {}))
              for i in range(n)}
    step = max(1, n // 64)
    events = [{"ph": "P", "name": "s", "pid": 1, "tid": 1, "ts": k, "sf": str(i)}
              for k, i in enumerate(range(n - 1, -1, -step))]
    return _chrome(events, stackFrames=frames)


def chrome_out_of_order_e(n: int) -> bytes:
    """n/2 nested ``B`` events of distinct names, then their ``E`` events outermost first: each ``E``
    names the bottom of the open stack, not its top."""
    half = n // 2
    ev = [{"ph": "B", "name": f"f{i}", "pid": 1, "tid": 1, "ts": i} for i in range(half)]
    ev += [{"ph": "E", "name": f"f{i}", "pid": 1, "tid": 1, "ts": half + i} for i in range(half)]
    return _chrome(ev)


def speedscope_evented_deep(n: int) -> bytes:
    """An evented profile that opens a frame n times, then closes it n times."""
    ev = [{"type": "O", "frame": 0, "at": i} for i in range(n)] + \
         [{"type": "C", "frame": 0, "at": n + i} for i in range(n)]
    return json.dumps({"$schema": SPEEDSCOPE_SCHEMA, "shared": {"frames": [{"name": "f"}]},
                       "profiles": [{"type": "evented", "name": "t", "unit": "milliseconds", "startValue": 0,
                                     "endValue": 2 * n, "events": ev}]}, separators=(",", ":")).encode()


def eu_stack_threads(n: int) -> bytes:
    """eu-stack text of one snapshot of n threads."""
    return b"PID 1 - app\n" + b"".join(b"TID %d:\n#0  0x0000000000001000 f%d - /lib/x.so\n" % (i + 2, i % 97)
                                         for i in range(n))


def eu_stack_sampled_threads(n: int) -> bytes:
    """The recorder's sampled form: two snapshots of n/2 threads each."""
    out = [b"# profmagic eu-stack sampler pid=1 interval=0.01 duration=0.02\n"]
    for t in (0.01, 0.02):
        out.append(b"# t=%.2f\nPID 1 - app\n" % t)
        out += [b"TID %d: state=R cpu_ns=%d\n#0  0x0000000000001000 f%d - /lib/x.so\n" % (i + 2, t * 1e9, i % 97)
                for i in range(n // 2)]
    return b"".join(out)


def pstats_chain(n: int) -> bytes:
    """A call chain n long: function i called only by function i-1."""
    import marshal
    keys = [(f"/app/m{i % 13}.py", i + 1, f"f{i}") for i in range(n)]
    stats = {k: (1, 1, 1e-6, 1e-6 * (n - i), {keys[i - 1]: (1, 1, 1e-6, 1e-6 * (n - i))} if i else {})
             for i, k in enumerate(keys)}
    return marshal.dumps(stats)


def perf_deep(n: int) -> bytes:
    return (b"python 1/1 [000] 1.000000: 1000 cpu-clock:\n" + b"".join(b"\t%x f%d (/lib/x.so)\n" % (0x1000 + i, i % 97)
                                                                        for i in range(n)) + b"\n")


def stap_deep(n: int) -> bytes:
    return b"".join(b" 0x%016x : f%d+0x0/0x10 [x]\n" % (i, i % 97) for i in range(n)) + b"\t1\n"


# -- zip archives, written by hand: the sizes and CRCs a member declares are the file's to choose --
def _zip(members: list[tuple[str, int, bytes, int, int]]) -> bytes:
    """A zip of (name, method 0/8, stored bytes, crc32, declared size) members (sizes below 4 GiB)."""
    local, central, pos = [], [], 0
    for name, method, body, crc, size in members:
        nb = name.encode()
        head = struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 20, 0, method, 0, 0x21, crc, len(body), size,
                           len(nb), 0) + nb
        central.append(struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 20, 20, 0, method, 0, 0x21, crc,
                                   len(body), size, len(nb), 0, 0, 0, 0, 0, pos) + nb)
        local.append(head + body)
        pos += len(head) + len(body)
    cd = b"".join(central)
    count = min(len(members), 0xFFFF)   # zipfile reads the central directory by its size, not this count
    end = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, count, count, len(cd), pos, 0)
    return b"".join(local) + cd + end


def _deflated(data: bytes) -> tuple[bytes, int, int]:
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush(), zlib.crc32(data), len(data)


def _manifest(parts: list[dict], combine: str = "idle-pair", meta: dict | None = None) -> tuple:
    body = json.dumps({"profmagic": "container", "version": 1, "combine": combine, "parts": parts,
                       "meta": meta or {}}).encode()
    return ("manifest.json", 8, *_deflated(body))


_ZEROS_MB = None


def _zeros_stream(mib: int, crc: bool = True) -> tuple[bytes, int]:
    """A raw deflate stream of ``mib`` MiB of b"0" (about 1 KiB per MiB) and its CRC (0 unless ``crc``)."""
    global _ZEROS_MB
    block = b"0" * (1 << 20)
    if _ZEROS_MB is None:
        c = zlib.compressobj(9, zlib.DEFLATED, -15)
        _ZEROS_MB = c.compress(block) + c.flush(zlib.Z_FULL_FLUSH)   # independent of what came before
    value = 0
    for _ in range(mib if crc else 0):
        value = zlib.crc32(block, value)
    return _ZEROS_MB * mib + zlib.compressobj(9, zlib.DEFLATED, -15).flush(), value


def zip_bomb(n: int) -> bytes:
    """About n KiB of zip whose folded members declare 1 GiB each (a ratio of about 1000)."""
    stream, crc = _zeros_stream(1024)
    count = max(1, n // (len(stream) // 1024))
    parts = [{"name": f"m{i}.folded", "format": "folded", "role": r} for i, r in enumerate(("wall", "cpu"))]
    members = [_manifest(parts)] + [(f"m{i}.folded", 8, stream, crc, 1 << 30) for i in range(count)]
    return _zip(members)


def zip_lying_sizes(n: int) -> bytes:
    """About n KiB of zip: a member that declares its compressed size (ratio 1) and inflates to n MiB."""
    stream, _ = _zeros_stream(n, crc=False)
    parts = [{"name": "w.folded", "format": "folded", "role": "wall"},
             {"name": "w.folded", "format": "folded", "role": "cpu"}]
    return _zip([_manifest(parts), ("w.folded", 8, stream, 0, len(stream))])


def zip_many_parts(n: int) -> bytes:
    """A manifest of n parts, every one the same small member."""
    parts = [{"name": "p.folded", "format": "folded", "role": "parent"}] + \
            [{"name": "p.folded", "format": "folded", "role": f"child {i}"} for i in range(n - 1)]
    return _zip([_manifest(parts, "memory-children"), ("p.folded", 8, *_deflated(b"a;b 1\n"))])


def zip_many_members(n: int) -> bytes:
    member = _deflated(b"a;b 1\n")
    parts = [{"name": "m0", "format": "folded", "role": "wall"}, {"name": "m1", "format": "folded", "role": "cpu"}]
    return _zip([_manifest(parts)] + [(f"m{i}", 8, *member) for i in range(n)])


def folded_count(n: int) -> bytes:
    return b"a;b %d\n" % n


# Meta our writers carry, mistyped (the held-out files of issue 28).
BAD_META = ({"duration": [1]}, {"pid": {}}, {"processes": [1, 2]}, {"warnings": 5}, {"metric_labels": "x"},
            {"rate": "fast"}, {"start_time": {"a": 1}}, {"unknown": [1]}, {"versions": "x"})


def gecko_typed_meta(i: int) -> bytes:
    return _gecko([[None, 0]], [[0, 0.0], [0, 1.0]], ext={"meta": BAD_META[i % len(BAD_META)]})


def chrome_typed_meta(i: int) -> bytes:
    ev = [{"ph": "B", "name": "f", "pid": 1, "tid": 1, "ts": 0}, {"ph": "E", "name": "f", "pid": 1, "tid": 1, "ts": 5}]
    return _chrome(ev, **{"x-profmagic": {"meta": BAD_META[i % len(BAD_META)]}})


def speedscope_typed_meta(i: int) -> bytes:
    doc = json.loads(speedscope_surrogate(0))
    doc["x-profmagic"] = {"meta": BAD_META[i % len(BAD_META)]}
    return json.dumps(doc).encode()


def container_typed_meta(i: int) -> bytes:
    bad = ({"primary_started": "x"}, {"helpers": {"a": 1}}, {"children": 5}, {"format": 5}, {"duration": [1]})[i % 5]
    parts = [{"name": "w.folded", "format": "folded", "role": "primary"},
             {"name": "e.txt", "format": "eu-stack", "role": "secondary"}]
    return _zip([_manifest(parts, "thread-sources", bad), ("w.folded", 8, *_deflated(b"a;b 1\n")),
                 ("e.txt", 8, *_deflated(eu_stack_threads(2)))])


def eu_stack_typed_header(i: int) -> bytes:
    head = (b"pid=abc", b"interval=[1]", b"duration=x snapshots=y", b"pid=1 interval=-1", b"rate=1e999")[i % 5]
    return (b"# profmagic eu-stack sampler " + head + b"\n# t=0.01\nPID 1 - app\nTID 2: state=R cpu_ns=5\n"
            b"#0  0x0000000000001000 f - /lib/x.so\n")


S = "\ud800"   # a lone surrogate: valid in JSON text, not in UTF-8


def speedscope_surrogate(_: int) -> bytes:
    return json.dumps({"$schema": SPEEDSCOPE_SCHEMA,
                       "shared": {"frames": [{"name": f"bad{S}name", "file": f"f{S}.py", "line": 1}, {"name": "ok"}]},
                       "profiles": [{"type": "sampled", "name": f"t{S}", "unit": "none", "startValue": 0, "endValue": 2,
                                     "samples": [[0, 1], [0]], "weights": [1, 1]}]}).encode()


def chrome_surrogate(_: int) -> bytes:
    ev = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": f"t{S}"}},
          {"ph": "B", "name": f"bad{S}", "pid": 1, "tid": 1, "ts": 0, "args": {"filename": f"f{S}.py"}},
          {"ph": "E", "name": f"bad{S}", "pid": 1, "tid": 1, "ts": 5}]
    return json.dumps({"traceEvents": ev}).encode()


def gecko_surrogate(_: int) -> bytes:
    return _gecko([[None, 0], [0, 1]], [[1, 0.0], [0, 1.0]], strings=(f"bad{S}", f"x{S}y"))


def text_surrogate(fmt: str) -> bytes:
    bad = b"\xed\xa0\x80"   # U+D800 encoded as UTF-8 would be: not UTF-8
    return {"folded": b"a" + bad + b";b\xff 3\n",
            "eu-stack": b"PID 1 - app\nTID 2:\n#0  0x0000000000001000 f" + bad + b" - /lib/x" + bad + b".so\n",
            "perf_script": b"py" + bad + b" 1/1 [000] 1.000000: 1 cpu-clock:\n\t1000 f" + bad + b" (/lib/x.so)\n\n",
            "stap": b" 0x0000000000001000 : f" + bad + b"+0x0/0x10 [x]\n\t2\n"}[fmt]


# name -> (format or None to sniff, generator, the size, render)
SHAPES = {
    "chain: gecko stackTable prefix chain": ("gecko", gecko_chain, 20_000, False),
    "chain: Chrome stackFrames parent chain": ("chrome_trace", chrome_frames_chain, 20_000, False),
    "chain: pstats call chain": ("pstats", pstats_chain, 10_000, False),
    "nesting: Chrome nested B events": ("chrome_trace", chrome_nested_b, 20_000, False),
    "nesting: Chrome out-of-order E events": ("chrome_trace", chrome_out_of_order_e, 40_000, False),
    "nesting: evented speedscope open/close": ("speedscope", speedscope_evented_deep, 20_000, False),
    "nesting: perf script record of many frames": ("perf_script", perf_deep, 20_000, False),
    "nesting: stap stack of many frames": ("stap", stap_deep, 20_000, False),
    "threads: eu-stack one snapshot": ("eu-stack", eu_stack_threads, 40_000, False),
    "threads: eu-stack sampled": ("eu-stack", eu_stack_sampled_threads, 40_000, False),
    "counts: folded huge count": ("folded", folded_count, 1_000_000_000, True),
    "archive: zip bomb (KiB)": (None, zip_bomb, 1024, False),
    "archive: sizes that lie (KiB)": (None, zip_lying_sizes, 1024, False),
    "archive: many parts": (None, zip_many_parts, 20_000, False),
    "archive: many members": (None, zip_many_members, 20_000, False),
    **{f"typed meta: gecko {i}": ("gecko", lambda _, i=i: gecko_typed_meta(i), 1, True) for i in range(len(BAD_META))},
    **{f"typed meta: Chrome {i}": ("chrome_trace", lambda _, i=i: chrome_typed_meta(i), 1, True)
       for i in range(len(BAD_META))},
    **{f"typed meta: speedscope {i}": ("speedscope", lambda _, i=i: speedscope_typed_meta(i), 1, True)
       for i in range(len(BAD_META))},
    **{f"typed meta: container {i}": (None, lambda _, i=i: container_typed_meta(i), 1, True) for i in range(5)},
    **{f"typed meta: eu-stack header {i}": ("eu-stack", lambda _, i=i: eu_stack_typed_header(i), 1, True)
       for i in range(5)},
    "surrogates: speedscope": ("speedscope", speedscope_surrogate, 1, True),
    "surrogates: Chrome": ("chrome_trace", chrome_surrogate, 1, True),
    "surrogates: gecko": ("gecko", gecko_surrogate, 1, True),
    **{f"surrogates: {f}": (f, lambda _, f=f: text_surrogate(f), 1, True)
       for f in ("folded", "eu-stack", "perf_script", "stap")},
}
MEMORY_CAP = 1 << 30
SHAPE_SECONDS = 10.0   # of CPU per load (the machine may be shared: wall time waits for a core)
SHAPE_WALL = 60.0      # a load still running after this is killed


def shape_bytes(name: str, scale: float = 1.0) -> bytes:
    fmt, make, size, _ = SHAPES[name]
    return make(max(1, int(size * scale)))


def run_shapes(names: list[str], scale: float = 1.0, folder: str | None = None, timeout: float = SHAPE_WALL,
               cap: int = MEMORY_CAP) -> list[dict]:
    """The shapes at ``scale``, loaded one after the other by one child under RLIMIT_AS ``cap``, killed
    after ``timeout`` s of wall time per shape. A row per shape: {"name", "reader", "bytes", "outcome":
    profile | format-error | memory | other | killed | crashed, "message", "seconds" and "cpu" (the
    load's wall and CPU time, in the child), "rss_mb" (the child's peak, over the shapes it ran)}."""
    import resource
    folder = tempfile.mkdtemp(prefix="profmagic-shapes-", dir=folder)
    rows, paths = [], []
    for i, name in enumerate(names):
        fmt, _, _, render = SHAPES[name]
        data = shape_bytes(name, scale)
        paths.append(os.path.join(folder, f"shape{i}"))
        with open(paths[-1], "wb") as f:
            f.write(data)
        rows.append({"name": name, "reader": fmt or "profmagic-container", "bytes": len(data), "outcome": "killed",
                     "message": "", "seconds": timeout})

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    args = [a for name, path in zip(names, paths)
            for a in (path, SHAPES[name][0] or "-", "render" if SHAPES[name][3] else "-")]
    try:
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "shape", *args],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=limit, env=env)
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: [lines.put(ln) for ln in proc.stdout] + [lines.put(None)], daemon=True).start()
        done = 0
        while done < len(names):
            try:
                ln = lines.get(timeout=timeout + 5)   # + the child's start (imports)
            except queue.Empty:
                break
            if ln is None:
                break
            got = json.loads(ln)
            rows[done].update(got)
            done += 1
            if got["seconds"] > timeout:
                break
        killed = done < len(names) and proc.poll() is None
        if killed:
            proc.kill()
        _, status, ru = os.wait4(proc.pid, 0)
        err = proc.stderr.read().decode(errors="replace")
        proc.stdout.close()
        proc.stderr.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    rc = os.waitstatus_to_exitcode(status)
    for row in rows[done:done + 1]:
        if not killed:
            row.update(outcome="crashed", message=f"exit {rc}: {err.strip()[-300:]}")
    for row in rows:
        row["rss_mb"] = ru.ru_maxrss / 1024
    return rows


def shape_child(args: list[str]) -> None:
    import profmagic
    from profmagic.errors import ProfileFormatError
    for path, fmt, render in zip(args[0::3], args[1::3], args[2::3]):
        t, c = time.perf_counter(), time.process_time()
        try:
            p = profmagic.load(path, None if fmt == "-" else fmt)
            if render == "render":   # what `profmagic info`, `convert x.folded` and `view` make of it
                from profmagic import cli, page
                from profmagic.formats import folded
                cli.summary(p)
                folded.write(p)
                page.standalone(p).encode("utf-8")
            out = {"outcome": "profile", "message": f"{p.sample_count} samples"}
        except ProfileFormatError as e:
            out = {"outcome": "memory" if "MemoryError" in str(e) else "format-error", "message": str(e)[:300]}
        except MemoryError:
            out = {"outcome": "memory", "message": "MemoryError"}
        except Exception as e:  # noqa: BLE001 - reported, a failure
            out = {"outcome": "other", "message": f"{type(e).__name__}: {str(e)[:300]}"}
        out["seconds"], out["cpu"] = time.perf_counter() - t, time.process_time() - c
        print(json.dumps(out), flush=True)


if __name__ == "__main__" and sys.argv[1:2] == ["shape"]:
    shape_child(sys.argv[2:])

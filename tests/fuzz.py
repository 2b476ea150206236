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

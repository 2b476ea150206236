"""What a cluster recording's control channels trust (standard library only: workers load it).

Other local users are in the threat model. A worker's agent answers only a peer of its own uid
(``SO_PEERCRED``) carrying the recording's secret, a random token the driver hands to its own
workers through the engine (Ray task arguments, the Dask plugin). Sessions are names matching
``SESSION_RE``, never paths. Folders are created here, 0700, and used only when ``lstat`` shows
them ours, private and not a symlink; files in them are created with ``O_EXCL | O_NOFOLLOW`` and
renamed into place. Requests, answers and payloads are bounded in size, depth, decompressed size
and time.
"""
from __future__ import annotations

import hmac
import json
import math
import os
import re
import secrets
import socket
import stat
import struct
import time
import zlib

from ..validate import MAX_RATE

SESSION_RE = re.compile(r"[0-9a-f]{12}")
SECRET_RE = re.compile(r"[0-9a-f]{32}")
MAX_REQUEST = 64 << 10          # bytes of one control request (JSON)
MAX_DEPTH = 8                   # nesting of a request or ACTIVE file
MAX_PAYLOAD = 256 << 20         # compressed bytes of one worker's payload or answer
MAX_RAW = 512 << 20             # its decompressed size ...
MAX_RATIO = 100                 # ... and at most this many times its compressed size (floor: RATIO_FLOOR);
                                # real payloads compress 2-20x, a zlib bomb ~1000x
RATIO_FLOOR = 4 << 20
STEP = 1 << 20                  # decompressed per step
MAX_ACTIVE = 4 << 10            # bytes of an ACTIVE file
MAX_SECONDS = 7 * 86400.0
THREADS = ("tasks", "all")


def new_session() -> str:
    return secrets.token_hex(6)


def new_secret() -> str:
    return secrets.token_hex(16)


def session_name(s) -> str:
    """``s`` if it is a session name (12 hex digits), else ValueError: never a path."""
    if not isinstance(s, str) or not SESSION_RE.fullmatch(s):
        raise ValueError("not a profmagic session name")
    return s


def same_secret(given, expected: str | None) -> bool:
    return (isinstance(given, str) and isinstance(expected, str) and SECRET_RE.fullmatch(given) is not None
            and hmac.compare_digest(given.encode(), expected.encode()))


def options(doc) -> dict:
    """A recording's sampler options, checked field by field (ValueError otherwise): rate within
    --rate's bounds, threads from THREADS, sizes and seconds bounded, the secret well-formed."""
    if not isinstance(doc, dict):
        raise ValueError("options must be an object")
    rate, mx, secs, secret = doc.get("rate"), doc.get("max_samples"), doc.get("max_seconds"), doc.get("secret")
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate) \
            or not 0 < rate <= MAX_RATE:
        raise ValueError(f"rate must be above 0 and at most {MAX_RATE:g}")
    if doc.get("threads") not in THREADS:
        raise ValueError(f"threads must be one of {THREADS}")
    if isinstance(mx, bool) or not isinstance(mx, int) or not 2 <= mx <= 10_000_000:
        raise ValueError("max_samples must be an integer from 2 to 10,000,000")
    if isinstance(secs, bool) or not isinstance(secs, (int, float)) or not math.isfinite(secs) \
            or not 0 < secs <= MAX_SECONDS:
        raise ValueError(f"max_seconds must be above 0 and at most {MAX_SECONDS:g}")
    if not isinstance(secret, str) or not SECRET_RE.fullmatch(secret):
        raise ValueError("a recording's secret is 32 hex digits")
    return {"rate": float(rate), "threads": doc["threads"], "max_samples": mx, "max_seconds": float(secs),
            "secret": secret}


# -- JSON --------------------------------------------------------------------------------------
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_BRACKET = re.compile(rb"[\[\]{}]")


def depth(raw: bytes) -> int:
    """How deep ``raw``'s JSON arrays and objects nest (strings skipped): checked before parsing."""
    d = deepest = 0
    for m in _BRACKET.finditer(_STRING.sub(b'""', raw)):
        if m.group() in (b"[", b"{"):
            d += 1
            deepest = max(deepest, d)
        else:
            d -= 1
    return deepest


def loads(raw: bytes, limit: int = MAX_REQUEST, max_depth: int = MAX_DEPTH):
    """Small JSON (a request, an answer's head, an ACTIVE file): ValueError over ``limit`` bytes or
    ``max_depth`` levels."""
    if len(raw) > limit:
        raise ValueError(f"over {limit} bytes")
    if depth(raw) > max_depth:
        raise ValueError(f"nested deeper than {max_depth}")
    return json.loads(raw)


# -- payloads ------------------------------------------------------------------------------------
class TooLarge(ValueError):
    """A payload over a size or decompression limit; the message names the limit."""


def inflate(data: bytes, max_raw: int = MAX_RAW, ratio: int = MAX_RATIO) -> bytearray:
    """zlib-decompress ``data`` 1 MiB at a time, never holding more than the limit: at most
    ``max_raw`` bytes and ``ratio`` times the compressed size (at least RATIO_FLOOR). TooLarge over
    it; zlib.error for what is not zlib."""
    if len(data) > MAX_PAYLOAD:
        raise TooLarge(f"the payload is {len(data)} bytes compressed, over the limit of {MAX_PAYLOAD >> 20} MiB")
    cap = min(max_raw, max(RATIO_FLOOR, ratio * len(data)))
    d = zlib.decompressobj()
    out = bytearray()
    tail = data
    while not d.eof:
        chunk = d.decompress(tail, STEP)
        out += chunk
        if len(out) > cap:
            raise TooLarge(f"the payload expands beyond {cap} bytes from {len(data)} compressed (the limit: "
                           f"{ratio}x its compressed size, at least {RATIO_FLOOR >> 20} MiB, at most "
                           f"{max_raw >> 20} MiB)")
        tail = d.unconsumed_tail
        if not tail and len(chunk) < STEP:
            break
    if not d.eof:
        raise zlib.error("the compressed data ends early")
    return out


# -- private folders and files -----------------------------------------------------------------
def check_private(path: str, st: os.stat_result | None = None) -> None:
    """PermissionError unless ``path`` is a real folder (not a symlink), ours, mode 0700 or less."""
    st = st or os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise PermissionError(f"{path} is not a private folder of uid {os.geteuid()}")


def private_dir(path: str) -> str:
    """Make ``path`` (its parent must exist) 0700, or take it if it already is ours and private."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    check_private(path)
    return path


def write_new(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` through a fresh temp name (O_EXCL | O_NOFOLLOW, 0600), then rename."""
    tmp = f"{path}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_own(path: str, limit: int) -> bytes:
    """A regular file of ours (not followed if a symlink), at most ``limit`` bytes (ValueError)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            raise PermissionError(f"{path} is not a regular file of uid {os.geteuid()}")
        if st.st_size > limit:
            raise ValueError(f"{path} is over {limit} bytes")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{path} is over {limit} bytes")
    return data


# -- unix sockets ------------------------------------------------------------------------------
_CRED = struct.Struct("3i")


def peer(sock) -> tuple[int, int]:
    """(pid, uid) of the process at the other end of a unix socket."""
    pid, uid, _gid = _CRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size))
    return pid, uid


def send(conn, data: bytes) -> None:
    conn.sendall(struct.pack("!Q", len(data)) + data)


def recv(conn, limit: int, deadline: float) -> bytes:
    """One length-prefixed message, refused by its length before reading when over ``limit``; the
    whole of it must arrive by ``deadline`` (time.monotonic())."""
    n = struct.unpack("!Q", _exact(conn, 8, deadline))[0]
    if n > limit:
        raise TooLarge(f"a message of {n} bytes, over the limit of {limit}")
    return _exact(conn, n, deadline)


def _exact(conn, n: int, deadline: float) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"timed out after {len(buf)} of {n} bytes")
        conn.settimeout(left)
        chunk = conn.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError(f"the peer closed the connection after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)

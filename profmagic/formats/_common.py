"""What several readers share: text decoding, JSON with byte offsets, our extension block."""
from __future__ import annotations

import json
from functools import lru_cache

from ..errors import ProfileFormatError

# Our extension block in JSON formats that other tools ignore (speedscope, pyinstrument sessions).
EXT = "x-profmagic"


@lru_cache(maxsize=1)
def version() -> str:
    """profmagic's version, from the installed package's metadata."""
    from importlib.metadata import PackageNotFoundError, version as _v
    try:
        return _v("profmagic")
    except PackageNotFoundError:
        return "0+unknown"


def decode(data: bytes) -> str:
    """Text with a UTF-16 (LE/BE) or UTF-8 BOM honoured; UTF-8 otherwise, undecodable bytes kept."""
    if data[:2] == b"\xff\xfe":
        return data[2:].decode("utf-16-le")
    if data[:2] == b"\xfe\xff":
        return data[2:].decode("utf-16-be")
    if data[:3] == b"\xef\xbb\xbf":
        data = data[3:]
    return data.decode("utf-8", errors="surrogateescape")


def load_json(data: bytes, source: str):
    """The parsed document; a JSON or encoding error names its line and byte offset."""
    try:
        return json.loads(data)
    except json.JSONDecodeError as e:
        # e.pos counts characters of the decoded text; the error names a byte offset.
        offset = len(e.doc[:e.pos].encode("utf-8", "surrogatepass")) if isinstance(e.doc, str) else e.pos
        raise ProfileFormatError(f"invalid JSON: {e.msg}", source=source, line=e.lineno, offset=offset) from None
    except UnicodeDecodeError as e:
        raise ProfileFormatError(f"not UTF-8 text: {e.reason}", source=source, offset=e.start) from None
    except ValueError as e:   # an integer with more digits than Python converts
        raise ProfileFormatError(f"invalid JSON: {e}", source=source) from None


def ext_block(doc) -> dict:
    """Our extension block of a JSON object, or {}."""
    block = doc.get(EXT) if isinstance(doc, dict) else None
    return block if isinstance(block, dict) else {}


_THREAD_TYPES = {"pid": (int,), "tid": (int,), "name": (str,), "process": (str,), "rank": (int, str),
                 "backend": (str,), "python": (bool,)}


def thread_attrs(row: dict) -> dict:
    """The attributes of a thread row our writer carried, those of the right type only (the row
    comes from a file, which may be hostile)."""
    return {k: v for k, v in row.items() if type(v) in _THREAD_TYPES.get(k, ())}

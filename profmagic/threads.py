"""Thread labels shared by backends, formats and transforms (standard library only)."""
from __future__ import annotations

import re

# Thread labels. py-spy names each thread `Thread <native tid> "<name>"`; in-process backends use the
# same form so that transforms can tell the cell's thread from the kernel's by native id.
_THREAD_RE = re.compile(r'^Thread (\d+)(?: "(.*)")?')


def thread_label(native_id: int | None, name: str | None = None) -> str:
    tid = native_id if native_id is not None else "?"
    return f'Thread {tid} "{name}"' if name is not None else f"Thread {tid}"


def thread_native_id(label: str) -> int | None:
    """The native thread id in a `Thread <tid> "<name>"` label, or None when it has none."""
    m = _THREAD_RE.match(str(label))
    return int(m.group(1)) if m else None

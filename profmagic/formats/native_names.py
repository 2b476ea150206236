"""One name per native (C/C++) function, whatever the profiler: perf, eu-stack and py-spy ``--native``.

Each tool demangles in its own way. ``eu-addr2line -C`` gives the whole signature, return type
and parameters (``void std::__invoke_impl<void, void (*)(Engine*), Engine*>(std::__invoke_other,
void (*&&)(Engine*), Engine*&&)``); ``perf script`` gives the qualified name without parameters,
and stackcollapse's tidy then cut that at its first ``(``, inside the template arguments
(``std::__invoke_impl<void, void``). glibc's symbols come under aliases (``__clone3`` / ``clone3``)
and versions (``pthread_cond_wait@@GLIBC_2.3.2``). ``name()`` maps each to one form:

* the qualified name with its template arguments, without return type, parameter list, trailing
  qualifiers (``const``, ``&``, ``noexcept``) or GCC clone suffixes (``[clone .cold]``):
  ``std::__invoke_impl<void, void (*)(Engine*), Engine*>``; ``operator()``, ``operator new`` and
  conversion operators keep their name;
* symbol versions dropped (``@@GLIBC_2.3.2``); ``__clone``/``__clone3`` are ``clone``/``clone3``
  (glibc's inline names such as ``__GI___clock_nanosleep`` are what every tool prints: kept);
* an address no tool could name: ``lib.so+0xOFFSET`` (``unresolved()``), the offset in the file's
  address space (the address minus the mapping's start plus its file offset). A caller's frame is
  resolved at its return address minus one, as perf and eu-stack's recorder both do.

Python, kernel and JIT frames are left alone: the readers call this for native frames only.
"""
from __future__ import annotations

import os
import re
from functools import lru_cache

_QUALIFIERS = re.compile(r"(?:\s*(?:const|volatile|&&|&|noexcept|override|final|\[clone \.[\w.]+\]))+$")
_CLONE = re.compile(r"(?:\s*\[clone \.[\w.]+\])+")
_VERSION = re.compile(r"@@?[A-Z][A-Z_]*_[\d.]+$")   # a symbol version: @@GLIBC_2.3.2, @GLIBCXX_3.4
_ALIASES = {"__clone": "clone", "__clone3": "clone3", "__GI___clone": "clone", "__GI___clone3": "clone3"}
_OPEN, _CLOSE = "(<[{", ")>]}"


# Operators whose symbols are brackets or spaces: masked while brackets are counted.
_OPERATOR = re.compile(r"\boperator\s*(?:<<=|>>=|<=>|<<|>>|<=|>=|->\*|->|<|>|\(\)|\[\]|"
                       r"(?:new|delete)(?:\[\])?|\s[\w:\s*&<>,]*?(?=\(|$))(?: (?=<))?")


def _mask(s: str) -> str:
    return _OPERATOR.sub(lambda m: "o" * len(m.group(0)), s)


def _strip_params(s: str) -> str:
    s = _QUALIFIERS.sub("", s)
    m = _mask(s)
    if not m.endswith(")"):
        return s
    depth = 0
    for i in range(len(m) - 1, -1, -1):
        c = m[i]
        if c in _CLOSE:
            depth += 1
        elif c in _OPEN:
            depth -= 1
            if depth == 0:
                return s[:i].rstrip() if c == "(" and i else s
            if depth < 0:
                return s
    return s


def _strip_return_type(s: str) -> str:
    """What follows the last space outside brackets (a return type ends there)."""
    m = _mask(s)
    depth, cut = 0, None
    for i, c in enumerate(m):
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
        elif c == " " and depth == 0:
            cut = i
    return s[cut + 1:] if cut is not None else s


@lru_cache(maxsize=65536)
def name(raw: str) -> str:
    """The one name of a native function (see the module docstring); ``raw`` as any tool printed it."""
    s = raw.strip()
    if not s or s.startswith("["):
        return s
    s = _VERSION.sub("", s)
    s = _CLONE.sub("", s)
    if "(" in s or " " in s:
        s = _strip_return_type(_strip_params(s))
    return _ALIASES.get(s, s)


def unresolved(path: str, offset: int) -> str:
    """An address no symbol covers: ``lib.so+0xOFFSET`` (the file's base name)."""
    return f"{os.path.basename(path)}+0x{offset:x}"


def rename(profile, kinds: tuple = ("native",)):
    """``profile`` with the names of its frames of ``kinds`` made the one name (for readers that get
    names already made, as py-spy's). The same Profile when no name changes."""
    fr = profile.frames
    mask = fr["kind"].isin(kinds).to_numpy()
    old = fr["name"].astype(str).to_numpy()
    new = [name(n) if m else n for n, m in zip(old, mask)]
    if all(a == b for a, b in zip(old, new)):
        return profile
    return profile.replace(frames=fr.assign(name=fr["name"].where(~mask, new)))

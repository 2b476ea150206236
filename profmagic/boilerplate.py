"""Boilerplate: the frames above a stack's first frame of user code, folded into one labelled frame.

A frame is boilerplate when a rule of ``RULES`` matches it: interpreter start-up, CPython's own
frames, thread start, ``std::thread`` invoke chains, asyncio, and the kernel's plumbing (ipykernel,
IPython, tornado, zmq, the %%profile magic). ``fold(profile)`` replaces each stack's leading run of
boilerplate frames by one frame named after the groups it holds, e.g. ``⋯ thread start ·
std::thread (folded)``; frames after the first frame of user code are never folded, a stack of
boilerplate alone keeps its leaf, and a stack that begins with its thread's root frame (perf's comm)
keeps that. The views fold by default; ``boilerplate=False`` shows everything.

Add a rule for your own framework::

    from profmagic import boilerplate
    boilerplate.RULES.append(boilerplate.Rule("my scheduler", name=r"sched_\\w+", file=r"/mysched/"))

Knows the model; knows no view.
"""
from __future__ import annotations

import re
import weakref
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .model import Profile, make_frames

FOLDED_FILE = "<boilerplate>"   # the file of a folded frame: tables leave these rows out


@dataclass(frozen=True)
class Rule:
    """Frames whose name matches ``name`` (re.fullmatch) and whose file matches ``file``
    (re.search) are boilerplate of ``group``; an empty pattern matches anything."""
    group: str
    name: str = ""
    file: str = ""

    def matches(self, name: str, file: str) -> bool:
        return (not self.name or re.fullmatch(self.name, name) is not None) and \
            (not self.file or re.search(self.file, file) is not None)


# CPython's own frames: its library or binary, its extension modules, or its C sources (debug info).
INTERPRETER_FILE = (r"(^|/)(libpython[\d.]*\w*\.so[\d.]*|python[\d.]*m?)$|/lib-dynload/|"
                    r"(^|/)(Python|Objects|Modules|Parser)/[\w.-]+\.[ch]$")
INTERPRETER_NAME = (r"(_?Py[A-Z_]\w*|_?PyEval\w*|pymain_\w*|\[python\]|cfunction_\w*|method_vectorcall\w*|"
                    r"slot_tp_\w*|vectorcall_\w*|builtin_\w*|gen_send_ex2?|task_step\w*|task_wakeup\w*|"
                    r"_run_module_as_main|_run_code)")

RULES: list[Rule] = [
    Rule("interpreter start-up", r"_start|__libc_start_main\w*|__libc_start_call_main|Py_BytesMain|"
                                 r"Py_RunMain|Py_Main|pymain_\w+|_?PyRun_\w+|run_mod|run_eval_code_obj"),
    Rule("interpreter start-up", "main", INTERPRETER_FILE),
    Rule("interpreter start-up", r"<module>|_run_module_as_main|_run_code", r"(^|/)runpy\.py$"),
    Rule("interpreter start-up", r"<module>", r"(^|/)ipykernel_launcher\.py$"),
    Rule("thread start", r"__clone\d*|clone\d*|start_thread|thread_run|pythread_wrapper"),
    Rule("thread start", r"(Thread\.)?(_bootstrap|_bootstrap_inner|run)", r"(^|/)threading\.py$"),
    Rule("std::thread", r"execute_native_thread_routine|(.+ )?std::(thread::_State_impl<|thread::_Invoker<|"
                        r"__invoke\w*<).*"),   # demangled names may lead with their return type
    Rule("asyncio", "", r"(^|/)asyncio/"),
    Rule("asyncio", r"task_step\w*|task_wakeup\w*|gen_send_ex2?"),
    Rule("ipykernel", "", r"/(ipykernel|IPython|tornado|zmq|traitlets|jupyter_client|jupyter_core|comm|debugpy)/"),
    Rule("%%profile", "", r"(^|/)profmagic/(magic|session|attaching)\.py$"),
    Rule("interpreter", "", INTERPRETER_FILE),
    Rule("interpreter", INTERPRETER_NAME, r"^$"),
    # A raw address, or a library perf could not symbolise (``lib.so+0xOFFSET``: formats/native_names.py):
    # above user code, it is the runtime's.
    Rule("unresolved", r"0x[0-9a-fA-F]+|\[[^\]]+\]|[^\s/]+\+0x[0-9a-f]+"),
]

_CACHE: "weakref.WeakKeyDictionary[Profile, tuple]" = weakref.WeakKeyDictionary()


def groups(profile: Profile, rules: list[Rule] | None = None) -> np.ndarray:
    """Per frame id: the index in ``rules`` of the first rule that matches it, or -1 (user code)."""
    rules = RULES if rules is None else rules
    fr = profile.frames
    out = np.full(int(fr.index.max()) + 1 if len(fr) else 0, -1, np.int64)
    seen: dict[tuple, int] = {}
    for fid, name, file in zip(fr.index.to_numpy(), fr["name"].astype(str), fr["file"].astype(str)):
        key = (name, file)
        g = seen.get(key)
        if g is None:
            g = seen[key] = next((i for i, r in enumerate(rules) if r.matches(name, file)), -1)
        out[fid] = g
    return out


def fold(profile: Profile, rules: list[Rule] | None = None) -> Profile:
    """``profile`` with each stack's leading boilerplate frames folded into one frame (see the
    module docstring). The same Profile when nothing folds; cached per profile for ``RULES``."""
    key = tuple(RULES if rules is None else rules)
    hit = _CACHE.get(profile)
    if hit is not None and hit[0] == key:
        return profile if hit[1] is None else hit[1]
    out = _fold(profile, list(key))
    _CACHE[profile] = (key, None if out is profile else out)   # never the key itself: it would never be freed
    return out


def functions(profile: Profile, metric: str | None = None, boilerplate: bool = True):
    """``profile.functions(metric)`` folded as the views fold it, with the same switch: by default
    boilerplate is folded and functions found only in folded frames are left out (the notebooks'
    tables then list what the icicle shows); ``boilerplate=False`` lists every function."""
    if not boilerplate:
        return profile.functions(metric)
    df = fold(profile).functions(metric)
    return df[df["file"] != FOLDED_FILE]


def folded_frames(profile: Profile) -> int:
    """How many frames of ``profile``'s stacks ``fold`` puts into folded frames (0: nothing folds)."""
    return int(fold(profile).meta.get("boilerplate_folded") or 0)


def _fold(profile: Profile, rules: list[Rule]) -> Profile:
    g = groups(profile, rules)
    stacks = profile.stacks["stack"].to_numpy()
    if not len(g) or not len(stacks) or not (g >= 0).any():
        return profile
    # Stacks that begin with a thread's root frame (perf, stap: FlameGraph's comm root) keep it.
    skip = 1 if profile.meta.get("folded_thread_roots") is False else 0
    names = [r.group for r in rules]
    base = int(profile.frames.index.max()) + 1
    label_ids: dict[str, int] = {}
    new_stacks = stacks.copy()
    folded = 0
    for row, st in enumerate(stacks):
        if len(st) <= skip + 1 or g[st[skip]] < 0:
            continue
        end = skip
        while end < len(st) - 1 and g[st[end]] >= 0:   # a stack of boilerplate keeps its leaf
            end += 1
        label = " · ".join(dict.fromkeys(names[g[f]] for f in st[skip:end]))
        fid = label_ids.setdefault(label, base + len(label_ids))
        new_stacks[row] = tuple(st[:skip]) + (fid,) + tuple(st[end:])
        folded += end - skip
    if not label_ids:
        return profile
    labels = list(label_ids)
    extra = make_frames([f"⋯ {lab} (folded)" for lab in labels], [FOLDED_FILE] * len(labels),
                        [None] * len(labels), ["other"] * len(labels))
    extra.index = pd.RangeIndex(base, base + len(labels), name="frame")
    frames = pd.concat([profile.frames, extra])
    return profile.replace(frames=frames, stacks=profile.stacks.assign(stack=new_stacks),
                           meta=profile.meta.replace(boilerplate_folded=folded))

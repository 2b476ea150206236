"""Why a thread was off-CPU: one reason per sample, from what each backend can see.

A sample's ``reason`` names why its off-CPU time (``wall - cpu``) was spent off a core. On-CPU
samples (perf's cpu-clock samples, a thread eu-stack caught running, a sampler interval the thread
spent on a core) show ``cpu``: no off-CPU reason. The reasons, in ``REASONS`` order:

==========  ==============================================================================
cpu         on a core (no off-CPU reason)
core        waiting for a core: runnable but preempted (state ``R`` at switch-out), or
            run-queue time (``/proc/<tid>/schedstat``'s second field)
gil         waiting for the GIL (``take_gil``; in the sampler, blocked between bytecodes)
lock        a lock or condition (a futex that is not the GIL), or a file lock (flock)
sleep       ``nanosleep``/``clock_nanosleep`` (``time.sleep``)
io          read, write, poll, epoll, select, a socket or a pipe
disk        uninterruptible (state ``D``), not a page fault
child       waiting for a child process (``wait4``, ``waitid``)
page fault  a page fault (state ``D`` under ``handle_mm_fault``/``filemap_fault``)
unknown     a reason the backend cannot see, or evidence that disagrees
==========  ==============================================================================

``RULES`` is the table: each rule maps what one source says to a reason. The sources are the
kernel's (``state`` at switch-out or at the sample, ``wchan``, ``syscall`` name, ``kernel`` leaf
frames) and the process's (``native`` leaf frames, the leaf ``python`` function and the ``call`` it
is making). ``classify`` decides, in this order:

1. ``state`` ``R``: ``core``. ``D``: ``page fault`` when a kernel frame or wchan says so, else ``disk``.
2. The kernel's word (wchan, else the leafmost kernel frame that matches, else the syscall):
   ``sleep``, ``io``, ``child``, ``disk``, ``page fault`` stand whatever the names say. A futex
   (``lock``) is refined by the process's side: a GIL frame (``take_gil``, ...) or a thread between
   bytecodes is ``gil``; a lock frame or call (``sem_wait``, ``Lock.acquire``, ``Event.wait``) is
   ``lock``; a call the kernel contradicts (``time.sleep`` while in a futex: it returned and waits
   to take the GIL back) is ``gil``; nothing: ``unknown`` (a GIL wait is a futex too).
3. The kernel said nothing: the process's side alone (GIL frames first, then the leafmost frame
   that matches, then the Python call), else ``unknown``.

So a name never overrides the kernel: a ``Lock.acquire`` leaf in state ``R`` is ``core``, in
``nanosleep`` is ``sleep``. Add a rule for your own library (a frame is matched with its
``.isra.0``-style suffixes removed)::

    from profmagic import reasons
    reasons.RULES.append(reasons.Rule("lock", "native", r"my_spinlock_wait"))

Standard library only: the child sampler loads this file by path before the child's own imports.
Knows no model; ``split`` takes a Profile.
"""
from __future__ import annotations

import dis
import itertools
import os
import re
from dataclasses import dataclass

CPU, CORE, GIL, LOCK, SLEEP, IO, DISK, CHILD, FAULT, UNKNOWN = (
    "cpu", "core", "gil", "lock", "sleep", "io", "disk", "child", "page fault", "unknown")
REASONS = (CPU, CORE, GIL, LOCK, SLEEP, IO, DISK, CHILD, FAULT, UNKNOWN)
LABELS = {CPU: "on CPU", CORE: "waiting for a core", GIL: "the GIL", LOCK: "a lock or condition",
          SLEEP: "sleep", IO: "I/O", DISK: "disk", CHILD: "a child process", FAULT: "page fault",
          UNKNOWN: "unknown"}
SOURCES = ("state", "wchan", "syscall", "kernel", "native", "python", "call")


@dataclass(frozen=True)
class Rule:
    """What ``source`` says (re.fullmatch of ``pattern``) means ``reason``."""
    reason: str
    source: str
    pattern: str
    why: str = ""


BETWEEN_BYTECODES = "<bytecode>"   # the sampler's ``call`` when the leaf instruction is not a call
WITH = "<with>"                    # ... when it is a ``with`` statement's __enter__

RULES: list[Rule] = [
    # -- kernel: the state at switch-out (perf's prev_state) or at the sample (/proc/<tid>/stat)
    Rule(CORE, "state", r"R\+?", "runnable: preempted, or woken and not yet on a core"),
    Rule(DISK, "state", r"D.*", "uninterruptible sleep (refined to page fault by a kernel frame or wchan)"),
    # -- kernel: /proc/<tid>/wchan
    Rule(LOCK, "wchan", r"futex_\w+|do_futex|locks_lock_inode_wait|flock_lock_inode_wait|\w*posix_lock_\w*wait"),
    Rule(SLEEP, "wchan", r"hrtimer_nanosleep|do_nanosleep|common_nsleep\w*|clock_nanosleep"),
    Rule(IO, "wchan", r"pipe_read|pipe_write|pipe_wait\w*|ep_poll|do_epoll_wait|do_select|core_sys_select|"
                      r"do_sys_poll|poll_schedule_timeout\w*|wait_woken|sk_wait_data|sk_stream_wait_\w+|"
                      r"unix_stream_\w+|inet_csk_accept|n_tty_read|tty_read|wait_for_tty\w*"),
    Rule(CHILD, "wchan", r"do_wait|kernel_wait4?|__do_sys_wait\w*"),
    Rule(FAULT, "wchan", r"handle_mm_fault|filemap_fault|__do_fault|do_swap_page|\w*page_fault\w*"),
    Rule(DISK, "wchan", r"io_schedule\w*|folio_wait_bit\w*|wait_on_page_bit\w*|bit_wait_io|blk_\w+|jbd2_\w+"),
    # -- kernel: the system call the thread is in (/proc/<tid>/syscall, by name: SYSCALLS)
    Rule(LOCK, "syscall", r"futex\w*|flock"),
    Rule(SLEEP, "syscall", r"nanosleep|clock_nanosleep"),
    Rule(IO, "syscall", r"read|write|pread64|pwrite64|readv|writev|preadv2?|pwritev2?|poll|ppoll|select|"
                        r"pselect6|epoll_wait|epoll_pwait2?|recvfrom|recvmsg|recvmmsg|sendto|sendmsg|"
                        r"sendmmsg|accept4?|connect|splice|sendfile|io_uring_enter|io_getevents"),
    Rule(CHILD, "syscall", r"wait4|waitid"),
    # -- kernel frames (perf's callchain at sched_switch), leaf first
    Rule(FAULT, "kernel", r"handle_mm_fault|do_user_addr_fault|exc_page_fault|asm_exc_page_fault|"
                          r"filemap_fault|__do_fault|do_swap_page|do_page_fault"),
    Rule(LOCK, "kernel", r"futex_\w+|do_futex|__x64_sys_futex\w*|locks_lock_inode_wait|flock_lock_inode_wait|__do_sys_flock"),
    Rule(SLEEP, "kernel", r"do_nanosleep|hrtimer_nanosleep|common_nsleep\w*|__x64_sys_(clock_)?nanosleep"),
    Rule(IO, "kernel", r"pipe_read|pipe_write|pipe_wait\w*|ep_poll|do_epoll_wait|do_select|core_sys_select|"
                       r"do_sys_poll|wait_woken|sk_wait_data|sk_stream_wait_\w+|sock_recvmsg|sock_sendmsg|"
                       r"tcp_recvmsg\w*|unix_stream_\w+|inet_csk_accept|n_tty_read|tty_read"),
    Rule(CHILD, "kernel", r"do_wait|kernel_wait4?|__do_sys_wait\w*"),
    Rule(DISK, "kernel", r"io_schedule\w*|folio_wait_bit\w*|wait_on_page_bit\w*|bit_wait_io|submit_bio_wait|"
                         r"blk_mq_\w+|jbd2_\w+"),
    # -- native frames (perf, eu-stack), leaf first; a GIL frame anywhere below the first Python
    #    frame wins (the GIL waits in pthread_cond_timedwait, a lock frame)
    Rule(GIL, "native", r"take_gil|drop_gil|PyEval_RestoreThread|PyEval_AcquireThread|PyEval_AcquireLock|"
                        r"PyGILState_Ensure|_PyThreadState_Attach|_PyEval_TakeGIL\w*",
         "CPython taking the GIL back"),
    Rule(LOCK, "native", r"__lll_lock_wait\w*|pthread_mutex_(timed|clock)?lock\w*|___?pthread_mutex_\w*lock\w*|"
                         r"___?pthread_cond_\w*wait\w*|pthread_cond_\w*wait\w*|__pthread_cond_\w*wait\w*|"
                         r"(__new_|__)?sem_(timed|clock)?wait\w*|do_futex_wait\w*|__futex_abstimed_wait\w*|"
                         r"futex_wait|PyThread_acquire_lock\w*|acquire_timed|lock_PyThread_acquire_lock|"
                         r"rlock_acquire|_?PyMutex_Lock\w*|_PySemaphore_Wait|(std::)?(mutex::lock|"
                         r"condition_variable::wait\w*).*|(__GI_+|__)?flock"),
    Rule(SLEEP, "native", r"(__GI___)?(__)?(clock_)?nanosleep\w*|__clock_nanosleep\w*|usleep|pysleep|time_sleep"),
    Rule(IO, "native", r"(__GI___|__)?(libc_)?(read|write|pread64|pwrite64|readv|writev|poll|ppoll|select|"
                       r"pselect|epoll_wait|epoll_pwait|recv|recvfrom|recvmsg|send|sendto|sendmsg|accept4?|"
                       r"connect)(_nocancel)?|_?Py_read|_?Py_write|os_read\w*|os_write\w*|select_\w+|"
                       r"sock_(recv|send|accept|connect)\w*|_?PyEval_EvalFrame_io"),
    Rule(CHILD, "native", r"(__GI___|__)?(libc_)?(wait4|waitpid|waitid|wait)|os_waitpid\w*|os_wait\w*"),
    # -- Python: the leaf function (module.qualname), then the call its leaf instruction makes
    Rule(LOCK, "python", r"threading\.(Condition\.wait\w*|Event\.wait|Semaphore\.acquire|"
                         r"BoundedSemaphore\.acquire|Barrier\.\w+|Thread\.join|Thread\._wait_for_tstate_lock|"
                         r"RLock\.acquire|_RLock\.acquire)|queue\.\w*Queue\.(get|put|join)|"
                         r"concurrent\.futures\._base\.\w+\.(result|exception)"),
    Rule(CHILD, "python", r"subprocess\.Popen\.(wait|_wait|_try_wait|communicate)"),
    Rule(IO, "python", r"(selectors|socket|ssl|select)\.\S+"),
    Rule(GIL, "call", re.escape(BETWEEN_BYTECODES), "the eval loop only blocks between bytecodes for the GIL"),
    Rule(SLEEP, "call", r"sleep"),
    Rule(LOCK, "call", r"acquire|acquire_lock|wait_for|" + re.escape(WITH)),
    Rule(IO, "call", r"read|readinto|readline|readlines|write|writelines|recv\w*|send\w*|accept|connect|"
                     r"select|poll|epoll|sendall|makefile"),
    Rule(CHILD, "call", r"waitpid|wait4|waitid|waitstatus_to_exitcode"),
]

# x86_64 numbers of the calls a waiting thread sits in (/proc/<tid>/syscall prints the number).
SYSCALLS = {0: "read", 1: "write", 7: "poll", 73: "flock", 16: "ioctl", 17: "pread64", 18: "pwrite64", 19: "readv",
            20: "writev", 23: "select", 34: "pause", 35: "nanosleep", 40: "sendfile", 42: "connect",
            43: "accept", 44: "sendto", 45: "recvfrom", 46: "sendmsg", 47: "recvmsg", 61: "wait4",
            128: "rt_sigtimedwait", 202: "futex", 219: "restart_syscall", 230: "clock_nanosleep",
            232: "epoll_wait", 247: "waitid", 270: "pselect6", 271: "ppoll", 275: "splice",
            281: "epoll_pwait", 288: "accept4", 299: "recvmmsg", 307: "sendmmsg", 441: "epoll_pwait2",
            449: "futex_waitv"}

EVAL_LOOP = re.compile(r"_?PyEval_EvalFrame\w*|\[python\]")   # native frames of Python code: the leaf run ends there
_SUFFIX = r"(?:\.(?:isra|constprop|part|cold|lto_priv)(?:\.\d+)?)*"
_compiled: dict = {}
_generation = itertools.count()


def _table(rules: list[Rule]) -> dict:
    """source -> [(reason, compiled pattern)], in table order (cached per table and its rules' ids)."""
    key = tuple(map(id, rules))
    hit = _compiled.get(id(rules))
    if hit is None or hit[0] != key:
        by: dict[str, list] = {}
        for r in rules:
            suffix = _SUFFIX if r.source in ("kernel", "native", "wchan") else ""
            by.setdefault(r.source, []).append((r.reason, re.compile(f"(?:{r.pattern}){suffix}")))
        by["\0generation"] = next(_generation)   # names this table in the frame cache
        hit = _compiled[id(rules)] = (key, by)
    return hit[1]


def match(source: str, text: str | None, rules: list[Rule] | None = None, _by: dict | None = None) -> str | None:
    """The reason the first rule of ``source`` matching ``text`` gives, or None."""
    if not text:
        return None
    for reason, pat in (_by if _by is not None else _table(RULES if rules is None else rules)).get(source, ()):
        if pat.fullmatch(text):
            return reason
    return None


_frame_reasons: dict = {}   # (table key, name, kind) -> reason or None


def syscall_name(field: str | None) -> str | None:
    """``/proc/<tid>/syscall``'s first field -> a call's name (``running``, a number or a name)."""
    if not field or field in ("running", "?", "none"):
        return None
    if field.lstrip("-").isdigit():
        n = int(field)
        return SYSCALLS.get(n, field) if n >= 0 else None
    return field


def _frames(frames, rules) -> tuple[str | None, str | None]:
    """(kernel reason, native reason) of frames given leaf first as (name, kind) pairs; stops at
    the first Python frame. A GIL frame anywhere in the native run wins."""
    kernel = native = None
    by = _table(rules)
    tkey = by["\0generation"]
    cache = _frame_reasons
    if len(cache) > 100_000:
        cache.clear()
    for name, kind in frames:
        key = (tkey, name, kind == "kernel")
        r = cache.get(key, 0)
        if r == 0:
            r = cache[key] = "stop" if kind == "python" or EVAL_LOOP.fullmatch(name) else \
                match("kernel" if kind == "kernel" else "native", name, _by=by)
        if r == "stop":
            break
        if kind == "kernel":
            if kernel is None:
                kernel = r
            continue
        if r == GIL:
            return kernel, GIL
        if native is None:
            native = r
    return kernel, native


_decided: dict = {}   # (state, wchan, syscall, function, call) -> reason, for frame-less calls (the samplers)


def classify(state: str | None = None, wchan: str | None = None, syscall: str | None = None,
             frames=(), function: str | None = None, call: str | None = None,
             rules: list[Rule] | None = None) -> str:
    """The reason for an off-CPU stretch from what a backend saw (module docstring). ``frames``:
    (name, kind) leaf first, kind ``kernel``, ``native`` or ``python``; ``function``: the leaf
    Python function as ``module.qualname``; ``call``: the name its leaf instruction calls, or
    ``BETWEEN_BYTECODES``/``WITH``."""
    if not frames and rules is None:
        key = (state, wchan, syscall, function, call, len(RULES))
        hit = _decided.get(key)
        if hit is None:
            if len(_decided) > 10_000:
                _decided.clear()
            hit = _decided[key] = _classify(state, wchan, syscall, (), function, call, RULES)
        return hit
    return _classify(state, wchan, syscall, frames, function, call, RULES if rules is None else rules)


def _classify(state, wchan, syscall, frames, function, call, rules) -> str:
    s = match("state", state[:1] if state else None, rules)
    kframe, nframe = _frames(frames, rules)
    if s == CORE:
        return CORE
    w = match("wchan", wchan if wchan and wchan != "0" else None, rules)
    if s == DISK:
        return FAULT if FAULT in (w, kframe) else DISK
    kernel = w or kframe or match("syscall", syscall, rules)
    py = match("python", function, rules) or match("call", call, rules)
    if kernel == LOCK:
        if nframe in (GIL, LOCK):
            return nframe
        if nframe is None and py in (GIL, LOCK):
            return py
        if nframe is None and py is not None:   # a call the kernel contradicts: it returned, and waits for the GIL
            return GIL
        return UNKNOWN
    if kernel is not None:
        return kernel
    return nframe or py or UNKNOWN


# -- the Python leaf (the samplers) ---------------------------------------------------------------
_CALL_OPS = frozenset(i for i, n in enumerate(dis.opname) if n.startswith(("CALL", "PRECALL")))
_WITH_OPS = frozenset(i for i, n in enumerate(dis.opname) if n in ("BEFORE_WITH", "SETUP_WITH", "BEFORE_ASYNC_WITH"))
_NAMED = ("LOAD_ATTR", "LOAD_METHOD", "LOAD_GLOBAL", "LOAD_NAME", "LOAD_FAST", "LOAD_DEREF",
          "LOAD_FAST_CHECK", "LOAD_SUPER_ATTR", "LOAD_FAST_LOAD_FAST")
_calls: dict = {}   # (code, offset) -> call name


def _callee(code, offset: int) -> str | None:
    """The name of what the call instruction at ``offset`` calls, walking back over the
    arguments: the named load that writes the slot just below them (``time.sleep``'s LOAD_ATTR
    sleep), or that pushes past them (a bare name)."""
    ins = list(dis.get_instructions(code))
    at = next((i for i, x in enumerate(ins) if x.offset == offset), None)
    if at is None:
        return None
    argc = ins[at].arg or 0
    depth = 0
    for x in reversed(ins[:at]):
        if x.opname in ("PRECALL", "KW_NAMES", "CACHE", "EXTENDED_ARG", "NOP"):
            continue
        if depth == argc and x.opname in _NAMED and isinstance(x.argval, str):
            return x.argval
        try:
            depth += dis.stack_effect(x.opcode, x.arg if x.opcode >= dis.HAVE_ARGUMENT else None, jump=False)
        except ValueError:
            return None
        if depth > argc:
            return x.argval if x.opname in _NAMED and isinstance(x.argval, str) else None
    return None


def python_leaf(frame) -> tuple[str, str | None]:
    """(``module.qualname`` of the leaf Python frame, the call its instruction makes: a name,
    ``WITH``, ``BETWEEN_BYTECODES``, or None when unknown). Cached per (code, instruction)."""
    code = frame.f_code
    key = (code, frame.f_lasti)
    hit = _calls.get(key)
    if hit is None:
        module = os.path.basename(code.co_filename)
        module = module[:-3] if module.endswith(".py") else module
        if module == "__init__":
            module = os.path.basename(os.path.dirname(code.co_filename))
        fn = f"{module}.{getattr(code, 'co_qualname', code.co_name)}"
        call = None
        raw = code.co_code
        if 0 <= frame.f_lasti < len(raw):
            op = raw[frame.f_lasti]
            if op in _CALL_OPS:
                call = _callee(code, frame.f_lasti)
            elif op in _WITH_OPS:
                call = WITH
            else:
                call = BETWEEN_BYTECODES
        if len(_calls) > 100_000:
            _calls.clear()
        hit = _calls[key] = (fn, call)
    return hit


# -- the Python leaf from a profile's frames (py-spy) ------------------------------------------------
MAX_SOURCE = 4 << 20   # bytes: a larger source file is not parsed for its leaf call
_sources: dict = {}    # path -> (defs, calls) or None
_lines: dict = {}      # (path, line) -> (function, call)


def _source_index(path: str):
    """(defs as (first, last line, qualname), calls as (first, last line, callee name)) of a Python
    source file, or None: not an absolute ``.py`` path to a regular file of at most MAX_SOURCE
    bytes that parses. Opened without blocking (a FIFO named ``x.py`` is refused, not waited on)."""
    import ast
    import stat
    hit = _sources.get(path, 0)
    if hit != 0:
        return hit
    out = None
    if isinstance(path, str) and os.path.isabs(path) and path.endswith(".py"):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            try:
                if stat.S_ISREG(os.fstat(fd).st_mode):
                    with os.fdopen(fd, "rb", closefd=False) as fh:
                        data = fh.read(MAX_SOURCE + 1)
                    if len(data) <= MAX_SOURCE:
                        out = _index_tree(ast.parse(data))
            finally:
                os.close(fd)
        except (OSError, SyntaxError, ValueError, RecursionError):
            out = None
    if out is None and isinstance(path, str):   # a notebook cell: its source is in linecache only
        import linecache
        entry = linecache.cache.get(path)
        if entry and len(entry) > 2 and isinstance(entry[2], list) and sum(map(len, entry[2])) <= MAX_SOURCE:
            try:
                out = _index_tree(ast.parse("".join(entry[2])))
            except (SyntaxError, ValueError, RecursionError):
                out = None
    if len(_sources) > 1000:
        _sources.clear()
    _sources[path] = out
    return out


def _index_tree(tree):
    import ast
    defs, calls = [], []

    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                q = prefix + child.name
                if not isinstance(child, ast.ClassDef):
                    defs.append((child.lineno, child.end_lineno or child.lineno, q))
                    walk(child, q + ".<locals>.")
                else:
                    walk(child, q + ".")
                continue
            if isinstance(child, ast.Call):
                f = child.func
                name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
                if name:
                    calls.append((child.lineno, child.end_lineno or child.lineno, name))
            elif isinstance(child, (ast.With, ast.AsyncWith)):
                calls.append((child.lineno, child.lineno, WITH))
            walk(child, prefix)
    walk(tree, "")
    return defs, calls


def source_leaf(file: str | None, line, rules: list[Rule] | None = None) -> tuple[str | None, str | None]:
    """(``module.qualname`` of the function at ``file:line``, the call that line makes) from the
    source on disk, for profilers that give a leaf Python frame's line but not the instruction
    (py-spy). The call: of the calls spanning the line, the one whose name a ``call`` rule
    matches, when they all give one reason (``x = len(y); time.sleep(1)`` is ``sleep``: a call no
    rule names counts as none; ``lock.acquire(); time.sleep(1)`` says nothing: None). (None, None)
    without a readable source (a notebook cell's is taken from linecache)."""
    try:
        line = int(line)
    except (TypeError, ValueError):
        return None, None
    key = (file, line)
    hit = _lines.get(key)
    if hit is not None and rules is None:
        return hit
    idx = _source_index(file)
    if idx is None:
        hit = (None, None)
    else:
        defs, calls = idx
        inner = [d for d in defs if d[0] <= line <= d[1]]
        module = os.path.basename(file)[:-3]
        if module == "__init__":
            module = os.path.basename(os.path.dirname(file))
        fn = f"{module}.{max(inner)[2]}" if inner else None
        said = {}
        for a, b, name in calls:
            if a <= line <= b:
                r = match("call", name, rules)
                if r is not None:
                    said.setdefault(r, name)
        hit = (fn, next(iter(said.values())) if len(said) == 1 else None)
    if rules is None:
        if len(_lines) > 100_000:
            _lines.clear()
        _lines[key] = hit
    return hit


def leaf_reasons(profile, rules: list[Rule] | None = None):
    """``profile`` with a ``reason`` stacks column (and samples column) from each stack's leaf
    alone, for profilers that see no kernel (py-spy): the native frames above the leaf Python frame
    (``--native``), then the Python function and the call its line makes (``source_leaf``), by the
    same table (``classify`` with no kernel word). A stack with no off-CPU time (wall <= cpu) is
    ``cpu``; without a cpu column every stack is classified (on-CPU time cannot be told apart);
    a leaf that says nothing is ``unknown``. A profile without wall time is returned as it is."""
    import numpy as np
    st = profile.stacks
    if "wall" not in st or not len(st):
        return profile
    fr = profile.frames
    names = fr["name"].astype(object).tolist()
    files = fr["file"].astype(object).tolist()
    lines = fr["line"].astype(object).tolist()
    kinds = fr["kind"].astype(object).tolist()
    pos = {f: i for i, f in enumerate(fr.index.tolist())}
    wall = np.nan_to_num(st["wall"].to_numpy(dtype=np.float64))
    cpu = np.nan_to_num(st["cpu"].to_numpy(dtype=np.float64)) if "cpu" in st else None
    table = RULES if rules is None else rules
    memo: dict = {}
    out = []
    for i, stack in enumerate(st["stack"].tolist()):
        if cpu is not None and wall[i] - cpu[i] <= 1e-12 * max(wall[i], 1.0):
            out.append(CPU)
            continue
        leaf = stack[-1] if len(stack) and kinds[pos[stack[-1]]] == "python" else None
        r = memo.get(leaf)
        if r is None:
            native, fn, call = [], None, None
            for f in reversed(stack):
                j = pos[f]
                if kinds[j] == "python":
                    name = names[j]
                    fn, call = source_leaf(files[j], lines[j], rules)
                    if fn is None and isinstance(files[j], str) and files[j].endswith(".py"):
                        fn = f"{os.path.basename(files[j])[:-3]}.{name}"
                    break
                native.append((names[j], "kernel" if kinds[j] == "kernel" else "native"))
            r = _classify(None, None, None, native, fn, call, table)
            if leaf is not None:
                memo[leaf] = r
        out.append(r)
    stacks = st.assign(reason=out)
    samples = profile.samples
    if samples is not None and len(samples) and "stack" in samples:
        samples = samples.assign(reason=np.asarray(out, dtype=object)[samples["stack"].to_numpy()])
    return profile.replace(stacks=stacks, samples=samples)


# -- /proc reads (the samplers) -------------------------------------------------------------------
def _holding_pread():
    """libc's pread and open called without releasing the GIL (ctypes.PyDLL), or None. os.pread and
    os.open release it: a sampler reading /proc handed the GIL to a spinning thread at every read
    (and at every first open of a thread's file: a switch interval, 5 ms, for one pass), then saw
    it running (state R) and waited up to a switch interval to get the GIL back. pread has no
    argtypes (its size and offset are ready-made ctypes values) and only the bytes read are
    copied: argtypes' conversions and a copy of the whole buffer made a read twice as long."""
    try:
        import ctypes
        libc = ctypes.PyDLL(None)
        fn = libc.pread
        fn.restype = ctypes.c_ssize_t
        op = libc.open
        op.argtypes = (ctypes.c_char_p, ctypes.c_int)
        op.restype = ctypes.c_int
        return fn, ctypes.create_string_buffer(512), op, ctypes.c_size_t(512), ctypes.c_long(0)
    except (OSError, AttributeError, ImportError):
        return None


_PREAD = None


class ProcReader:
    """One thread's ``/proc/<pid>/task/<tid>/{stat,wchan,syscall,schedstat}``, kept open and
    re-read with pread, the GIL held (about 2-5 us each here, against 12-15 us for
    open+read+close)."""
    __slots__ = ("base", "fds", "runq")

    def __init__(self, pid: int, tid: int):
        self.base = f"/proc/{pid}/task/{tid}/"
        self.fds: dict[str, int | None] = {}
        self.runq = self.wait_ns()

    def _fd(self, name: str) -> int | None:
        global _PREAD
        if _PREAD is None:
            _PREAD = _holding_pread() or False
        fd = self.fds.get(name, -1)
        if fd == -1:
            flags = os.O_RDONLY | os.O_CLOEXEC
            if _PREAD:   # /proc's open does not block: the GIL stays held
                fd = _PREAD[2]((self.base + name).encode(), flags)
                fd = fd if fd >= 0 else None
            else:
                try:
                    fd = os.open(self.base + name, flags)
                except OSError:
                    fd = None
            self.fds[name] = fd
        return fd

    def _read(self, name: str) -> str | None:
        fd = self.fds.get(name, -1)
        if fd == -1:
            fd = self._fd(name)
        if fd is None:
            return None
        if _PREAD:
            fn, buf, _, size, zero = _PREAD
            n = fn(fd, buf, size, zero)
            return buf[:n].decode(errors="replace") if n >= 0 else None
        try:
            return os.pread(fd, 512, 0).decode(errors="replace")
        except OSError:
            return None

    def wait_ns(self) -> int | None:
        """Run-queue nanoseconds so far (schedstat's second field)."""
        s = self._read("schedstat")
        try:
            return int(s.split()[1]) if s else None
        except (IndexError, ValueError):
            return None

    def runq_delta(self) -> float:
        """Seconds spent runnable but off a core since the previous call."""
        now = self.wait_ns()
        if now is None:
            return 0.0
        d = now - (self.runq or 0)
        self.runq = now
        return d * 1e-9

    def state(self) -> str | None:
        stat = self._read("stat")
        return stat[stat.rfind(")") + 2:][:1] if stat else None

    def wchan(self) -> str | None:
        return (self._read("wchan") or "").strip() or None

    def syscall(self) -> tuple[str | None, str | None]:
        """(the system call's name, its first argument: a futex's address)."""
        sc = (self._read("syscall") or "").split()
        return syscall_name(sc[0] if sc else None), sc[1] if len(sc) > 1 else None

    def facts(self) -> tuple[str | None, str | None, str | None, str | None]:
        """(state, wchan, syscall name, its first argument) now."""
        name, arg = self.syscall()
        return self.state(), self.wchan(), name, arg

    def close(self) -> None:
        for fd in self.fds.values():
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.fds.clear()


# Calls a thread waits in interruptibly (state S); a read or write may be a disk's (D): its state is read.
_SLEEPING_CALLS = frozenset(("poll", "ppoll", "select", "pselect6", "epoll_wait", "epoll_pwait", "epoll_pwait2",
                             "accept", "accept4", "recvfrom", "recvmsg", "recvmmsg", "pause", "rt_sigtimedwait"))
_said: dict = {}   # (syscall name, len(RULES)) -> its rule's reason: match() rebuilds the table's key each call
GIL_WORDS: set[str] = set()   # futex addresses a thread between bytecodes waited on: the GIL's (this process)


def forget_gil_words() -> None:
    """Learn the GIL's futex words again (a sampler recorder's start). Only the first word is learnt
    (a thread between bytecodes then reads as ``gil`` without a read), so a word learnt wrongly
    would otherwise stay for the life of the process."""
    GIL_WORDS.clear()


def sampled_reason(off: float, runq: float, facts, leaf) -> str:
    """``sampled_reason`` with ``facts`` a ProcReader: its files read only as far as needed
    (schedstat was read for ``runq``; then state and syscall; wchan only when the call says nothing)."""
    if not isinstance(facts, ProcReader):
        return _sampled_reason(off, runq, facts, leaf)
    if runq >= 0.9 * off:
        return CORE
    if leaf and leaf[1] == BETWEEN_BYTECODES and GIL_WORDS:
        return GIL      # between bytecodes only the GIL (or a core: runq) stops a thread; no more reads
    proc = facts
    name, arg = proc.syscall()   # /proc/<tid>/stat costs several times more: read only when needed
    key = (name, len(RULES))
    said = _said.get(key, 0)
    if said == 0:
        said = _said[key] = match("syscall", name)
    state = "R" if name is None and arg is None else \
        "S" if said in (LOCK, SLEEP, CHILD) or name in _SLEEPING_CALLS else proc.state()
    wchan = proc.wchan() if said is None else None
    return _sampled_reason(off, runq, (state, wchan, name, arg), leaf)


def _sampled_reason(off: float, runq: float, facts, leaf) -> str:
    """A sampler interval's reason: ``off`` seconds off-CPU, ``runq`` of them runnable (schedstat),
    ``facts`` (state, wchan, syscall) read now, ``leaf`` ``python_leaf``'s pair. A futex wait on a word a thread between bytecodes waited on
    (``GIL_WORDS``) is ``gil`` whatever the call. Nearly all
    run-queue time is ``core``; else the state now, where ``R`` (woken: it waits for a core or the
    GIL) leaves the Python leaf to say which, ``core`` when it cannot. The run-queue part goes in
    the sample's ``runq`` column, which ``split`` counts as ``core``."""
    state, wchan, syscall = facts[:3]
    if runq >= 0.9 * off:
        return CORE
    word = facts[3] if len(facts) > 3 and syscall == "futex" else None
    if word is not None and leaf and leaf[1] == BETWEEN_BYTECODES:
        GIL_WORDS.add(word)     # the kernel's futex, and the eval loop between bytecodes: the GIL's word
    elif word is not None and word in GIL_WORDS and state != "R":
        return GIL              # the same futex word, under a call (taking the GIL back after it)
    r = classify(None if state == "R" else state, wchan, syscall,
                 function=leaf[0] if leaf else None, call=leaf[1] if leaf else None)
    return CORE if r == UNKNOWN and state == "R" else r   # runnable now, and no name says more


FEW_OFF = 0.1      # an interval at most this share off-CPU is ``cpu``: no /proc read
READ_EVERY = 0.1   # seconds: at most one /proc read per thread in this time; intervals between carry a reason


def interval_reason(st, f, wall: float, cpu: float, now: float) -> tuple[str, float]:
    """Why one sampling interval of a thread was off-CPU (the built-in sampler's and the child
    sampler's threads: ``st`` has ``proc`` (a ProcReader or None), ``off``, ``seen``, ``next_read``
    and ``memo``; ``f`` is its leaf frame): run-queue time (schedstat), else the state, wchan and
    system call now and the leaf Python call. A thread still in the same wait (same leaf
    instruction, no CPU used) keeps its reason without a read; otherwise at most one read per
    ``READ_EVERY`` seconds, and an interval between reads carries the reason the last read at its
    leaf instruction gave (else the thread's last read's). Run-queue time is a counter: the next
    read covers the intervals without one. Returns (reason, run-queue seconds since the last read)."""
    off = wall - cpu if cpu == cpu else 0.0
    st.off += max(off, 0.0)   # the run-queue time read next covers these intervals too
    if off <= FEW_OFF * wall:
        return CPU, 0.0
    if st.proc is None:
        leaf = python_leaf(f)
        return classify(function=leaf[0], call=leaf[1]), 0.0
    last = st.seen
    code, at = f.f_code, f.f_lasti
    if last is not None:
        # The same wait only if the thread never ran: a loop re-entering this call (a 10 ms sleep
        # beside a spinning thread) kept its first read's reason, gil or sleep, for the whole cell.
        if last[0] is code and last[1] == at and cpu == 0.0:
            return last[2], 0.0
        if now < st.next_read:
            return st.memo.get((code, at), last[2]), 0.0
    runq = st.proc.runq_delta()
    # (sampled_reason's first test, before the leaf: python_leaf may disassemble a code object)
    r = CORE if runq >= 0.9 * st.off else sampled_reason(st.off, runq, st.proc, python_leaf(f))
    st.off = 0.0
    st.seen = (code, at, r)
    st.next_read = now + READ_EVERY
    st.memo[(code, at)] = r
    return r, runq


# -- the split ------------------------------------------------------------------------------------
def split(profile, by: str = "thread"):
    """Wall seconds per ``by`` (a stacks column) and reason: ``cpu`` gets the CPU time; each
    thread's off-CPU time (wall - cpu) is shared among its other reasons by their samples'
    off-CPU parts (a sampler and eu-stack move CPU between samples, so one sample's part may be
    negative); where samples measured run-queue time (``runq``: the samplers, eu-stack), the
    thread's total goes to ``core`` first and the rest is shared; off-CPU time no reason covers is
    ``unknown``. Rows sum to the wall time."""
    import numpy as np
    import pandas as pd
    st = profile.stacks
    if "reason" not in st or "wall" not in st:
        raise ValueError("this profile has no reason column (or no wall time): reasons need "
                         "--backend perf --mode both, eu-stack or the sampler")
    wall = st["wall"].to_numpy(dtype=np.float64)
    cpu = np.nan_to_num(st["cpu"].to_numpy(dtype=np.float64)) if "cpu" in st else np.zeros(len(st))
    if profile.samples is not None and {"reason", "wall"} <= set(profile.samples):
        sm = profile.samples
        off_part = sm["wall"].to_numpy(dtype=np.float64) - (
            np.nan_to_num(sm["cpu"].to_numpy(dtype=np.float64)) if "cpu" in sm else 0.0)
        off_part = np.clip(off_part, 0, None)
        runq = np.nan_to_num(sm["runq"].to_numpy(dtype=np.float64)) if "runq" in sm else np.zeros(len(sm))
        key = st[by].to_numpy(dtype=object)[sm["stack"].to_numpy()]
        queued = pd.Series(runq).groupby(key, sort=False).sum()
        parts = pd.DataFrame({"key": key, "reason": sm["reason"].astype(object).to_numpy(), "off": off_part})
        if "runq" in sm:   # run-queue time measured: core is what it says, not a share by samples
            parts = parts[parts["reason"] != CORE]
    else:
        queued = pd.Series(dtype=np.float64)
        parts = pd.DataFrame({"key": st[by].to_numpy(dtype=object), "reason": st["reason"].astype(object).to_numpy(),
                              "off": np.clip(wall - cpu, 0, None)})
    totals = pd.DataFrame({"key": st[by].to_numpy(dtype=object), "wall": wall, "cpu": cpu}).groupby(
        "key", sort=False).sum()
    weights = parts[parts["reason"] != CPU].groupby(["key", "reason"], sort=False)["off"].sum().unstack(fill_value=0.0)
    out = pd.DataFrame(0.0, index=totals.index, columns=list(REASONS))
    out[CPU] = totals["cpu"]
    off = (totals["wall"] - totals["cpu"]).clip(lower=0)
    for key in totals.index:
        q = min(float(queued.get(key, 0.0)), off[key])   # measured run-queue time (samplers, eu-stack)
        out.at[key, CORE] = q
        rest = off[key] - q
        w = weights.loc[key] if key in weights.index else None
        if w is None or w.sum() <= 0:
            out.at[key, UNKNOWN] += rest
            continue
        for r, v in w.items():
            out.at[key, r] += rest * v / w.sum()
    out.index.name = by
    out.columns.name = "reason"
    return out


def shares(profile, by: str = "thread"):
    """``split`` as shares of each row's wall time."""
    s = split(profile, by)
    return s.div(s.sum(axis=1).where(lambda x: x > 0), axis=0)

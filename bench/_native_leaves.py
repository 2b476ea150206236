"""Method (b) of bench/groundtruth.py's py-spy CPU split: one ``--idle --native`` recording, a sample
whose leaf native frame is a blocking call (clock_nanosleep, futex, poll...) counted off-CPU. Kept
here, not in the package: it was measured (bench/RESULTS.md) and not chosen, because leaves that
py-spy cannot symbolise (stripped libc) cannot be classified."""
from __future__ import annotations

import re

import numpy as np

from profmagic.model import Profile, StackBuilder
from profmagic.transforms.merge import _key_frames

# Leaf functions (libc/kernel entry points) where a thread sleeps or blocks.
BLOCKING = {
    "clock_nanosleep", "nanosleep", "__clock_nanosleep", "__GI___clock_nanosleep", "usleep", "sleep",
    "futex", "futex_wait", "__futex_abstimed_wait_common", "__futex_abstimed_wait_common64",
    "futex_abstimed_wait_cancelable", "__lll_lock_wait", "pthread_cond_wait", "pthread_cond_timedwait",
    "___pthread_cond_wait", "___pthread_cond_timedwait", "__pthread_cond_wait", "sem_wait",
    "sem_timedwait", "sem_clockwait", "do_futex_wait", "__new_sem_wait_slow64",
    "epoll_wait", "epoll_pwait", "poll", "ppoll", "__poll", "select", "pselect", "__select",
    "read", "__libc_read", "recv", "recvfrom", "recvmsg", "__libc_recv", "accept", "accept4",
    "wait4", "waitpid", "__waitpid", "waitid", "pause", "sigwait", "sigtimedwait", "connect",
}
_ADDRESS = re.compile(r"^(0x)?[0-9a-f]{6,}$", re.I)


def is_blocking(name: str) -> bool | None:
    """True for a blocking leaf, False for another named leaf, None for a bare address."""
    n = str(name).split(" (", 1)[0].strip()
    if _ADDRESS.match(n):
        return None
    return n in BLOCKING or n.lstrip("_") in BLOCKING


def classify_native(profile: Profile, strip_native: bool = False) -> Profile:
    """cpu = wall for samples whose leaf is not a blocking call, 0 for those whose leaf is.

    ``profile`` is a py-spy ``--idle --native`` recording. With ``strip_native``, native frames are
    dropped after classification (Python frames only, as without --native).
    """
    w = profile.weights("wall" if "wall" in profile.metrics else "samples").to_numpy(float)
    frames = _key_frames(profile)
    b = StackBuilder()
    for th in profile.threads:
        b.thread(th)
    unknown = 0.0
    for th, st, n, x in zip(profile.stacks["thread"], profile.stacks["stack"], profile.stacks["samples"], w):
        leaf = frames[st[-1]] if st else None
        blocking = is_blocking(leaf[0]) if leaf and leaf[3] != "python" else False
        if blocking is None:
            unknown += x
        keep = [f for f in st if not (strip_native and frames[f][3] == "native")]
        sid = b.stack(th, [b.frame(*frames[f]) for f in keep])
        b.add(sid, samples=n, wall=x, cpu=0.0 if blocking else x)
    total = float(np.nansum(w)) or 1.0
    meta = profile.meta.replace(mode="both", cpu_method="py-spy --idle --native; leaf frame classified",
                                unclassified_share=unknown / total,
                                approximate="leaf-frame classification; unsymbolised leaves count as on-CPU")
    return b.build(metric="wall", meta=meta, raw=profile.raw)



"""SystemTap: on-CPU user stacks of one process through a kernel module.

stap compiles a script into a kernel module, so it needs the kernel's build tree
(``/lib/modules/$(uname -r)/build``: headers, ``.config``), debuginfo for kernel stacks, and a kernel
that loads modules (``/proc/modules``). ``available()`` checks these and runs stap itself to show
its own error; on this project's machine kind it fails with
``Checking "/lib/modules/…/build/.config" failed``.

UNTESTED: the recording path below (our script, ``timer.profile`` + ``ubacktrace()``, stopped with
SIGINT) has never run on this machine kind, which cannot load modules. Stacks are aggregated by
stap without thread ids, so the profile has one thread row set for the whole process.
"""
from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import time

from ..errors import ProfilerError
from ..tempdirs import TempDir
from .base import OWN_GROUP, Capabilities, Capture, Options, reap

NAME = "systemtap"
CAPS = Capabilities(clocks=("cpu",), weights="measured", inside=False, attach=True, threads="all", native=True,
                    unmeasured={"wall": "systemtap's timer.profile samples on-CPU time only"})
FORMAT = "stap"
READY = "profmagic-stap-ready"
START_TIMEOUT = 300.0  # compiling a module takes a while the first time
FIX = ("Fix: install the kernel headers and debuginfo for this kernel (`stap-prep` does it on "
       "Debian/Ubuntu/Fedora: linux-headers-$(uname -r), linux-image-$(uname -r)-dbg) on a kernel that "
       "loads modules (CONFIG_MODULES, /proc/modules). Or use --backend eu-stack, which samples every "
       "thread (native threads too, on wall-clock time) without a kernel module.")

SCRIPT = """\
global stacks
probe begin { printf("READY\\n") }
probe timer.profile {
  if (pid() == target()) stacks[ubacktrace()] <<< 1
}
probe end {
  foreach (bt in stacks-) {
    print_ustack(bt)
    printf("\\t%d\\n", @count(stacks[bt]))
  }
}
""".replace("READY", READY)


@functools.lru_cache(maxsize=1)
def _stap_probe() -> str:
    """stap's own words on trying the simplest script here (cached: it compiles)."""
    try:
        res = subprocess.run(["stap", "-e", "probe begin { exit() }"], capture_output=True, timeout=120)
    except subprocess.TimeoutExpired:
        return "stap did not finish a trivial script within 120 s"
    except OSError as e:
        return str(e)
    text = (res.stderr + res.stdout).decode(errors="replace").strip()
    return "" if res.returncode == 0 and "failed" not in text.lower() else (text or f"exit {res.returncode}")


def available() -> tuple[bool, str]:
    if shutil.which("stap") is None:
        return False, "systemtap (stap) is not installed. " + FIX
    release = os.uname().release
    problems = []
    build = f"/lib/modules/{release}/build"
    if not os.path.exists(build):
        problems.append(f"{build} is missing (no kernel headers/build tree for {release})")
    if not os.path.exists("/proc/modules"):
        problems.append("/proc/modules is missing: this kernel cannot load modules")
    err = _stap_probe()
    if err:
        problems.append("stap says: " + err.splitlines()[0])
    if problems:
        return False, "systemtap cannot record here: " + "; ".join(problems) + ". " + FIX
    return True, "systemtap can load modules here (recording path untested on the project's machine kind)"


class Recorder:
    """UNTESTED on this machine kind (see the module docstring)."""

    def __init__(self, options: Options):
        self.options = options
        self.tmp = TempDir("profmagic-stap-")
        self.proc: subprocess.Popen | None = None
        self.out = self.tmp.file("stap.out")

    def start(self) -> None:
        ok, reason = available()
        if not ok:
            raise ProfilerError(reason)
        script = self.tmp.file("profile.stp")
        with open(script, "w") as f:
            f.write(SCRIPT)
        exe = os.readlink(f"/proc/{self.options.pid}/exe")
        with open(self.out, "wb") as out, open(self.tmp.file("stap.err"), "wb") as err:
            self.proc = subprocess.Popen(["stap", "-x", str(self.options.pid), "-d", exe, "--ldd", script],
                                         stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                         **OWN_GROUP)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            with open(self.out, "rb") as f:
                if READY.encode() in f.read(200):
                    return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        with open(self.tmp.file("stap.err"), "rb") as f:
            err = f.read().decode(errors="replace").strip()[-2000:]
        raise ProfilerError(f"stap did not start sampling: {err or 'timed out'}. {FIX}")

    def stop(self) -> Capture:
        if self.proc is None:
            raise ProfilerError("systemtap was not started")
        rc = reap(self.proc, signal.SIGINT, timeout=60)
        with open(self.out, "rb") as f:
            data = f.read()
        data = data.split(b"\n", 1)[1] if data.startswith(READY.encode()) else data
        return Capture(data, FORMAT, {"backend": NAME, "pid": self.options.pid, "exit": rc,
                                      "untested": True})

    def close(self) -> None:
        if self.proc is not None:
            reap(self.proc, signal.SIGINT)
        self.tmp.close()


def read(capture: Capture, options: Options | None = None):
    from ..formats import stap
    p = stap.read(capture.data, source="systemtap capture")
    return p.replace(meta=p.meta.replace(**{**capture.meta, "backend": NAME,
                                            "metric_note": "timer.profile samples: on-CPU only"}))

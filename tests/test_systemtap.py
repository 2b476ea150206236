"""systemtap backend: on this machine kind the kernel cannot load modules, so it must say exactly
why, with the fix; its read path works on a real stap capture from the corpus."""
import os

import pytest

from profmagic.backends import systemtap
from profmagic.backends.base import Capture, Options
from profmagic.errors import ProfilerError

pytestmark = pytest.mark.timeout(180)
CAN_LOAD = os.path.exists("/proc/modules") and os.path.exists(f"/lib/modules/{os.uname().release}/build")


@pytest.mark.skipif(CAN_LOAD, reason="this kernel has module support and a build tree: the failure case cannot be shown")
@pytest.mark.requires("stap")
def test_unavailable_says_why_and_the_fix():
    ok, reason = systemtap.available()
    assert not ok
    release = os.uname().release
    assert f"/lib/modules/{release}/build" in reason and "/proc/modules" in reason
    # stap's own message, from really running it.
    assert f'Checking "/lib/modules/{release}/build/.config" failed' in reason
    assert "stap-prep" in reason and "headers" in reason and "debuginfo" in reason
    assert "--backend eu-stack" in reason
    rec = systemtap.Recorder(Options(pid=os.getpid()))
    try:
        with pytest.raises(ProfilerError) as e:
            rec.start()
    finally:
        rec.close()
    assert "stap-prep" in str(e.value) and rec.tmp.path is None and rec.proc is None


def test_read_a_real_stap_capture(corpus):
    path = os.path.join(corpus, "flamegraph", "extra", "stap-header-example.input.txt")
    with open(path, "rb") as f:
        data = f.read()
    p = systemtap.read(Capture(data, "stap", {"pid": 1}), Options())
    assert p.meta["backend"] == "systemtap" and p.sample_count > 0
    names = set(p.frames["name"])
    assert "native_safe_halt" in names and "start_kernel" in names
    assert (p.frames.loc[p.frames["name"] == "native_safe_halt", "kind"] == "kernel").all()

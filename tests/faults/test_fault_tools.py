"""Faults: the profiler tool is missing or not allowed to run (issue 8). All produced for real."""
from __future__ import annotations

import os

import pytest
import tools
from conftest import PYSPY, documented, script

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(120)]


def test_pyspy_binary_missing(clean, bindir):
    k = clean
    r = k.run(f"os.environ['PROFMAGIC_PYSPY'] = {str(bindir / 'no-py-spy')!r}\n"
              "%profile -b py-spy -q busy(0.1)")
    assert r.error is None, r.error
    documented("pyspy-missing", r.stderr)
    # auto falls back to the built-in sampler and records.
    r = k.run("%profile -q busy(0.2)\nprint(_profile.meta['backend'], _profile.sample_count > 0)\n"
              "del os.environ['PROFMAGIC_PYSPY']")
    assert r.error is None and "sampler True" in r.stdout, r.text()
    assert "py-spy is not usable here (py-spy is not installed" in k.value("_profile.meta['backend_choice']")


@pytest.mark.requires("py-spy", "root", "setpriv")
def test_ptrace_denied(clean, bindir):
    # Real denial: py-spy runs as user nobody and the kernel (root) refuses its ptrace.
    wrapper = script(bindir, "py-spy-as-nobody",
                     [f'exec setpriv --reuid=65534 --regid=65534 --clear-groups {PYSPY} "$@"'])
    k = clean
    r = k.run(f"os.environ['PROFMAGIC_PYSPY'] = {wrapper!r}\n"
              "try:\n    get_ipython().run_line_magic('profile', '-b py-spy -q busy(0.1)')\n"
              "finally:\n    del os.environ['PROFMAGIC_PYSPY']")
    assert r.error is None, r.error
    documented("ptrace-denied", r.stderr)
    assert f"process {k.pid}" in r.stderr
    assert "permission denied" in r.stderr.lower(), r.stderr  # py-spy's own words


@pytest.mark.requires("perf", "unshare")
def test_perf_event_paranoid_too_high(clean, bindir):
    with open("/proc/sys/kernel/perf_event_paranoid") as f:
        paranoid = int(f.read())
    if paranoid < 2:
        pytest.skip(f"perf_event_paranoid is {paranoid} here: an unprivileged perf is allowed")
    # Real refusal: perf runs in a user namespace (no CAP_PERFMON/SYS_ADMIN in the initial one), so the
    # kernel applies perf_event_paranoid to it when it opens events on the kernel's process.
    script(bindir, "perf", [f'exec unshare --user --map-root-user {tools.find("perf")} "$@"'])
    k = clean
    r = k.run(f"_path = os.environ['PATH']\nos.environ['PATH'] = {str(bindir)!r} + ':' + _path\n"
              "try:\n    get_ipython().run_line_magic('profile', '-b perf -q busy(0.1)')\n"
              "finally:\n    os.environ['PATH'] = _path")
    assert r.error is None, r.error
    documented("perf-paranoid", r.stderr)
    assert f"perf_event_paranoid setting is {paranoid}" in r.stderr


@pytest.mark.requires("perf", "unshare")
def test_perf_offcpu_tracepoints_refused(clean, bindir):
    with open("/proc/sys/kernel/perf_event_paranoid") as f:
        paranoid = int(f.read())
    if paranoid < 0:
        pytest.skip(f"perf_event_paranoid is {paranoid} here: tracepoints are allowed to everyone")
    # Real refusal, as above: perf in a user namespace has no CAP_PERFMON for the kernel's process.
    script(bindir, "perf", ['exec unshare --user --map-root-user /usr/bin/perf "$@"'])
    r = clean.run(f"_path = os.environ['PATH']\nos.environ['PATH'] = {str(bindir)!r} + ':' + _path\n"
                  "try:\n    get_ipython().run_line_magic('profile', '-b perf --mode both -q busy(0.1)')\n"
                  "finally:\n    os.environ['PATH'] = _path")
    assert r.error is None, r.error
    documented("perf-offcpu-paranoid", r.stderr)
    assert f"perf_event_paranoid setting is {paranoid}" in r.stderr and "eu-stack" in r.stderr


@pytest.mark.requires("root", "perf", "unshare", "mount")
def test_perf_offcpu_without_tracefs(clean, bindir):
    # Real absence: perf runs in its own mount namespace where /sys/kernel/tracing is an empty tmpfs.
    script(bindir, "perf", ["exec unshare --mount sh -c 'mount -t tmpfs none /sys/kernel/tracing && "
                            'exec /usr/bin/perf "$@"\' perf "$@"'])
    r = clean.run(f"_path = os.environ['PATH']\nos.environ['PATH'] = {str(bindir)!r} + ':' + _path\n"
                  "try:\n    get_ipython().run_line_magic('profile', '-b perf --mode wall -q busy(0.1)')\n"
                  "finally:\n    os.environ['PATH'] = _path")
    assert r.error is None, r.error
    documented("perf-offcpu-tracefs", r.stderr)
    # cpu-clock alone needs no tracepoint: --mode cpu still records there.
    r = clean.run(f"_path = os.environ['PATH']\nos.environ['PATH'] = {str(bindir)!r} + ':' + _path\n"
                  "try:\n    get_ipython().run_line_magic('profile', '-b perf --mode cpu -q busy(0.3)')\n"
                  "finally:\n    os.environ['PATH'] = _path\nprint(_profile.metric, _profile.sample_count > 0)")
    assert r.error is None and "cpu True" in r.stdout, r.text()


@pytest.mark.requires("stap")
def test_stap_cannot_load_modules(clean):
    if os.path.exists("/proc/modules") and os.path.exists(f"/lib/modules/{os.uname().release}/build"):
        pytest.skip("this kernel may load modules: the fault does not occur here")
    r = clean.run("%%profile -b systemtap\nbusy(0.1)")
    assert r.error is None, r.error
    documented("stap-no-modules", r.stderr)
    documented("backend-unavailable", r.stderr)

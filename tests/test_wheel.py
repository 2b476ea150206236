"""The wheel as a user gets it: ``pip wheel .``, installed without -e and without the dev extra into
a fresh venv (plus ipykernel, as a user running Jupyter has), then a real kernel on that venv's
python, outside the checkout: %load_ext profmagic, a cell under the sampler and under py-spy, and
the case study's C++ worker built from the installed package data."""
from __future__ import annotations

import ast
import glob
import os
import subprocess
import sys
import venv

import pytest
import workloads
from kernel import ROOT, Kernel

pytestmark = [pytest.mark.wheel, pytest.mark.timeout(900), pytest.mark.requires("py-spy", "ptrace", "g++")]

WIDGET = "application/vnd.jupyter.widget-view+json"


def _run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert r.returncode == 0, f"{cmd}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv python, its site-packages, a folder outside the checkout)."""
    base = tmp_path_factory.mktemp("wheel")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PIP_REQUIRE_VIRTUALENV")}
    dist = base / "dist"
    _run([sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "-q", "--disable-pip-version-check",
          "-w", str(dist)], cwd=ROOT, env=env)
    (wheel,) = glob.glob(str(dist / "profmagic-*.whl"))
    venv.EnvBuilder(with_pip=True, clear=True).create(base / "venv")   # no system site-packages
    py = str(base / "venv" / "bin" / "python")
    away = base / "elsewhere"   # not the checkout: the source tree must not be importable
    away.mkdir()
    _run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", wheel, "ipykernel"], cwd=away, env=env)
    site = _run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=away, env=env).strip()
    return py, site, str(away)


@pytest.fixture(scope="module")
def k(installed, tmp_path_factory):
    py, _, away = installed
    cache = str(tmp_path_factory.mktemp("cache"))   # the case study compiles afresh from the wheel's source
    kern = Kernel(python=py, cwd=away, extra_env={"PROFMAGIC_CACHE": cache, "PYTHONPATH": ""})
    r = kern.run("%load_ext profmagic\n" + workloads.SOURCE)
    assert r.status == "ok" and r.error is None, r.text() + str(r.error)
    yield kern
    kern.close()


def test_the_installed_copy_is_the_one_loaded(k, installed):
    py, site, _ = installed
    where = k.value("__import__('profmagic').__file__")
    assert where.startswith(site) and not where.startswith(ROOT), where
    assert k.value("__import__('sys').executable") == py
    # Not the dev extra: none of the test-only dependencies came along.
    assert k.value("[m for m in ('pytest', 'hypothesis', 'playwright', 'nbclient') "
                   "if __import__('importlib.util').util.find_spec(m)]") == []


@pytest.mark.parametrize("backend", ["sampler", "py-spy"])
def test_a_profiled_cell_shows_the_report(k, backend):
    idle = " --idle" if backend == "py-spy" else ""   # wall time, so that nap is sampled too
    r = k.run(f"%%profile -b {backend}{idle}\nbusy(0.4)\nnap(0.3)\n")
    assert r.status == "ok" and r.error is None, r.text() + str(r.error)
    # The report's static twin (beside it, this cell's last-run line once the kernel ran it before).
    static = [d["text/html"] for d in r.data if "profmagic-static" in d.get("text/html", "")]
    assert len(static) == 1 and "<svg" in static[0], r.text()
    assert "busy" in static[0] and "nap" in static[0]
    assert any(WIDGET in d for d in r.data + r.updates), r.data   # the live report: its JS and CSS shipped
    p = k.value("(_profile.meta['backend'], sorted(set(_profile.frames['name']) & {'busy', 'nap'}), "
                "_profile.sample_count > 0)")
    assert p == (backend, ["busy", "nap"], True)


def test_casestudy_builds_its_worker_from_the_installed_package_data(k, installed):
    _, site, _ = installed
    r = k.run("from profmagic import casestudy as cs\n"
              "so = cs.build()\n"
              "with cs.Engine(hold_ms=0.1, n=1000) as e:\n"
              "    vals = e.topk(3).result()\n"
              "print(repr((str(cs.SOURCE), str(so), so.exists(), len(vals), vals == sorted(vals, reverse=True))))",
              timeout=300)
    assert r.error is None, r.text() + str(r.error)
    source, so, exists, n, ordered = ast.literal_eval(r.stdout.strip().splitlines()[-1])
    assert source.startswith(site) and source.endswith("worker.cpp")
    assert exists and n == 3 and ordered
    assert not so.startswith(ROOT)

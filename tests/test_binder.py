"""binder/: repo2docker's files. requirements.txt must install profmagic into a fresh venv."""
import os
import subprocess
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BINDER = ROOT / "binder"


def test_apt_txt_has_elfutils_and_a_compiler():
    pkgs = {l.strip() for l in (BINDER / "apt.txt").read_text().splitlines() if l.strip() and not l.startswith("#")}
    assert "elfutils" in pkgs            # eu-stack, eu-addr2line
    assert pkgs & {"g++", "build-essential"}  # the case study's C++ engine


def test_postbuild_is_an_executable_valid_bash_script():
    pb = BINDER / "postBuild"
    assert os.access(pb, os.X_OK)
    assert pb.read_text().startswith("#!/bin/bash")
    subprocess.run(["bash", "-n", str(pb)], check=True)


@pytest.mark.timeout(400)
def test_requirements_install_into_a_fresh_venv(tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)   # a real fresh venv, no system site-packages
    py = env_dir / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    # repo2docker runs pip from the repository root; pip's own cache is reused between runs.
    r = subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        "-r", str(BINDER / "requirements.txt")], cwd=ROOT, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    # Import from outside the checkout so the installed copy (not the source tree) is used.
    r = subprocess.run([str(py), "-c", "import profmagic, profmagic.casestudy as cs, nbclient; "
                        "print(profmagic.__file__); print(cs.SOURCE.exists())"],
                       cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    where, source_shipped = r.stdout.split()
    assert str(env_dir) in where
    assert source_shipped == "True", "profmagic/casestudy/worker.cpp must ship in the wheel (package-data)"

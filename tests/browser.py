"""A real JupyterLab (or Notebook 7) on 127.0.0.1 and Debian's Chromium driven by Playwright, for
browser tests.

    with jupyter_lab(tmpdir) as lab, chromium() as browser:       # or jupyter_server(tmpdir, "notebook")
        page = lab.open(browser, "nb.ipynb")
        run_cell(page, 0)

Both front ends are built from JupyterLab's components, so one set of selectors drives both.
"""
from __future__ import annotations

import contextlib
import json
import re
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import nbformat
import tools

CHROMIUM = tools.find("chromium")
JUPYTER_LAB = tools.find("jupyter-lab")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
ARTIFACTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "artifacts")


def missing() -> str | None:
    """Why browser tests cannot run here, or None."""
    if CHROMIUM is None:
        return "no chromium next to the interpreter nor on PATH (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install playwright)"
    for app, server in SERVERS.items():
        if server is None:
            return f"{APPS[app]} is not installed next to {sys.executable} nor on PATH (pip install jupyterlab notebook)"
    return None


APPS = {"lab": "jupyter-lab", "notebook": "jupyter-notebook"}   # front end -> its server command
SERVERS = {app: tools.find(command) for app, command in APPS.items()}
URLS = {"lab": "/lab/tree/{}", "notebook": "/notebooks/{}"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_notebook(path: str, cells: list[str]) -> str:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


class Lab:
    def __init__(self, root: str, port: int, token: str, proc: subprocess.Popen, log: str, app: str = "lab"):
        self.root, self.port, self.token, self.proc, self.log, self.app = root, port, token, proc, log, app

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def open(self, browser, notebook: str, viewport=(1400, 1000)):
        """A new page with ``notebook`` open and its kernel idle."""
        page = browser.new_page(viewport={"width": viewport[0], "height": viewport[1]}, accept_downloads=True)
        page.goto(f"{self.base}{URLS[self.app].format(notebook)}?token={self.token}&reset")
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
        page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=60_000)
        # On a loaded machine JupyterLab sometimes asks "Select Kernel" for a notebook whose kernelspec
        # it has not listed yet; the dialog would swallow every click. Accept the notebook's kernel.
        dialog = page.locator(".jp-Dialog", has_text="Select Kernel")
        for _ in range(3):
            try:
                dialog.wait_for(timeout=1500)
            except Exception:
                break
            dialog.locator(".jp-mod-accept").click()
            dialog.wait_for(state="detached", timeout=30_000)
            page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=60_000)
        return page

    def logs(self) -> str:
        with open(self.log, errors="replace") as f:
            return f.read()[-4000:]


def jupyter_lab(root: str):
    return jupyter_server(root, "lab")


def _answers(lab) -> bool:
    try:
        with urllib.request.urlopen(f"{lab.base}/api/status?token={lab.token}", timeout=2) as r:
            json.load(r)
        return True
    except OSError:
        return False


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM (the server shuts its kernels down), then its whole session group."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # any kernel left in the server's session


@contextlib.contextmanager
def jupyter_server(root: str, app: str = "lab"):
    """JupyterLab (``app="lab"``) or Notebook 7 (``"notebook"``) on a random free port with a token,
    in its own config and runtime dirs. A port found free can be taken by another process before the
    server binds it: then it starts again on another (three tries in all). Its kernels stay on TCP:
    with --KernelManager.transport=ipc the lab's kernel never became idle in the browser
    (jupyter_server 2)."""
    token = secrets.token_hex(16)
    home = os.path.join(root, ".jupyter-home")
    os.makedirs(home, exist_ok=True)
    env = dict(os.environ, JUPYTER_CONFIG_DIR=os.path.join(home, "config"),
               JUPYTER_RUNTIME_DIR=os.path.join(home, "runtime"), JUPYTER_DATA_DIR=os.path.join(home, "data"),
               JUPYTERLAB_WORKSPACES_DIR=os.path.join(home, "workspaces"), JUPYTER_PLATFORM_DIRS="1")
    # The lab extensions (widgets, plotly, anywidget) live in the venv's share/jupyter.
    env["JUPYTER_PATH"] = os.path.join(sys.prefix, "share", "jupyter")
    settings = os.path.join(home, "settings", "@jupyterlab", "apputils-extension")
    os.makedirs(settings, exist_ok=True)
    with open(os.path.join(settings, "notification.jupyterlab-settings"), "w") as f:
        json.dump({"fetchNews": "false", "checkForUpdates": False}, f)  # no news toast over the page
    env["JUPYTERLAB_SETTINGS_DIR"] = os.path.join(home, "settings")
    log = os.path.join(home, "lab.log")
    for attempt in range(3):
        port = free_port()
        cmd = [SERVERS[app], "--no-browser",
               "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
               f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
               "--LabApp.news_url=",
               *(["--allow-root"] if os.geteuid() == 0 else []),
               "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
        with open(log, "wb") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=root,
                                    start_new_session=True)
        lab = Lab(root, port, token, proc, log, app)
        deadline = time.monotonic() + 60
        while proc.poll() is None and not _answers(lab):
            if time.monotonic() > deadline:
                _stop(proc)
                raise RuntimeError(f"{APPS[app]} did not answer in 60 s:\n{lab.logs()}")
            time.sleep(0.3)
        if proc.poll() is None:
            break
        if "already in use" not in lab.logs() or attempt == 2:
            _stop(proc)
            raise RuntimeError(f"{APPS[app]} exited with {proc.returncode}:\n{lab.logs()}")
        _stop(proc)
    try:
        yield lab
    finally:
        _stop(proc)


@contextlib.contextmanager
def chromium():
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def run_cell(page, index: int, timeout: float = 120_000):
    """Run the notebook's cell ``index`` (0-based) and wait until the kernel is idle again."""
    cell = page.locator(".jp-Notebook .jp-CodeCell").nth(index)
    prompt = cell.locator(".jp-InputArea-prompt")
    run = page.locator(".jp-NotebookPanel-toolbar [data-command='notebook:run-cell-and-select-next']")
    try:
        for attempt in range(4):  # a click while the notebook is still settling can be lost
            cell.scroll_into_view_if_needed()
            cell.locator(".jp-InputPrompt").click()
            run.click()
            try:
                prompt.filter(has_text=re.compile(r"\[(\*|\d+)\]")).wait_for(timeout=10_000)
                break
            except Exception:
                if attempt == 3:
                    raise
        prompt.filter(has_text=re.compile(r"\[\d+\]")).wait_for(timeout=timeout)
    except Exception:
        screenshot(page, f"run-cell-{index}-failed.png")
        raise
    return cell


def screenshot(page, name: str, locator=None) -> str:
    os.makedirs(ARTIFACTS, exist_ok=True)
    path = os.path.join(ARTIFACTS, name)
    (locator or page).screenshot(path=path)
    return path

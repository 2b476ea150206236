"""Execute the teaching notebooks headless (nbclient), write HTML copies, summarise the case study.

    python notebooks/run.py [--out build/notebooks] [NAME-or-PATH ...]

Exit status 0 when every notebook ran to the end (its assert cells included), 1 otherwise. A failing
cell is reported by notebook, cell number, the cell's first line and the error, and the notebook is
still written (with the error in it), so it can be read.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TIMEOUT = 300  # seconds per cell


def notebooks() -> list[Path]:
    return sorted(HERE.glob("[0-9][0-9]-*.ipynb"))


def execute(path: Path, out_dir: Path, timeout: int = TIMEOUT) -> dict:
    """Run one notebook; write <out_dir>/<name>.ipynb and .html. Returns a report dict."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}})
    # Run the kernel on the same interpreter as this runner (the project's venv).
    client.kernel_manager_class = _kernel_manager_class()
    t0 = time.perf_counter()
    error = None
    try:
        client.execute()
    except CellExecutionError as e:
        error = _describe_failure(nb, e)
    except Exception as e:  # kernel died, timeout: still write what ran
        error = f"{type(e).__name__}: {e}"
    seconds = time.perf_counter() - t0
    out_dir.mkdir(parents=True, exist_ok=True)
    executed = out_dir / path.name
    nbformat.write(nb, executed)
    html = out_dir / (path.stem + ".html")
    html_error = None
    try:
        from nbconvert import HTMLExporter
        body, _ = HTMLExporter().from_notebook_node(nb)
        html.write_text(body, encoding="utf-8")
    except Exception as e:
        html_error = f"HTML conversion failed: {type(e).__name__}: {e}"
    return {"name": path.name, "seconds": seconds, "error": error, "html": html if html.exists() else None,
            "html_error": html_error, "executed": executed, "summary": tagged_output(nb, "summary"),
            "asserts": sum("assert" in c.get("metadata", {}).get("tags", []) for c in nb.cells)}


def ipc_address() -> str:
    """A path of the kernel's own for its sockets (ZMQ ipc transport): TCP ports picked free by one
    process can be taken by another before the kernel binds them ("Address already in use");
    a fresh path cannot collide."""
    import uuid
    from jupyter_core.paths import jupyter_runtime_dir
    d = jupyter_runtime_dir()
    os.makedirs(d, exist_ok=True)
    return os.path.join(d, f"kernel-{uuid.uuid4()}-ipc")


def _kernel_manager_class():
    from jupyter_client.manager import KernelManager

    class VenvKernelManager(KernelManager):
        def __init__(self, **kw):
            kw.setdefault("transport", "ipc")
            kw.setdefault("ip", ipc_address())
            super().__init__(**kw)

        def format_kernel_cmd(self, extra_arguments=None):
            cmd = super().format_kernel_cmd(extra_arguments)
            if cmd and Path(cmd[0]).name.startswith("python"):
                cmd[0] = sys.executable
            return cmd
    return VenvKernelManager


def _describe_failure(nb, e) -> str:
    for i, cell in enumerate(nb.cells):
        for o in cell.get("outputs", []):
            if o.get("output_type") == "error":
                first = cell.source.strip().splitlines()[0] if cell.source.strip() else ""
                tags = cell.get("metadata", {}).get("tags", [])
                kind = " (an assert cell: a key number regressed)" if "assert" in tags else ""
                return f"cell {i}{kind} `{first}`: {o['ename']}: {o['evalue']}"
    return str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__


def tagged_output(nb, tag: str) -> str:
    """The stdout of the cells tagged ``tag``."""
    text = []
    for cell in nb.cells:
        if tag in cell.get("metadata", {}).get("tags", []):
            text += [o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream"]
    return "".join(text).strip()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "build" / "notebooks"))
    ap.add_argument("--timeout", type=int, default=TIMEOUT, help="seconds per cell")
    ap.add_argument("only", nargs="*", help="notebook names or paths (default: all)")
    a = ap.parse_args(argv)
    paths = notebooks()
    if a.only:
        paths = [p for p in paths if any(o in (p.name, p.stem, str(p)) or p.name.startswith(o) for o in a.only)]
        if not paths:
            print(f"no notebook matches {a.only}", file=sys.stderr)
            return 2
    out = Path(a.out)
    reports = []
    for p in paths:
        print(f"running {p.name} …", flush=True)
        r = execute(p, out, a.timeout)
        reports.append(r)
        state = "ok" if not r["error"] else "FAILED"
        print(f"  {state} in {r['seconds']:.1f} s, {r['asserts']} assert cell(s) -> {r['html'] or '(no HTML)'}", flush=True)
        for key in ("error", "html_error"):
            if r[key]:
                print(f"  {r[key]}", flush=True)
    case = next((r for r in reports if r["name"].startswith("04")), None)
    if case is not None:
        print("\nCase study summary:")
        print(case["summary"] or "  (not available: notebook 04 failed before its summary cell; see above)")
    failed = [r for r in reports if r["error"] or r["html_error"]]
    print(f"\n{len(reports) - len(failed)}/{len(reports)} notebooks ran; HTML in {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

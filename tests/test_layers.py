"""The package's layers (docs/architecture.md, "Layers"): every import, at module level or inside a
function, points down or across within one package, never up; and loading a file imports no recorder."""
from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "profmagic")

# Layer of each module or package (by its path under profmagic/); lower layers know nothing above.
LAYERS = {
    "errors": 0, "threads": 0, "procfs": 0, "tempdirs": 0, "awaits": 0, "nested": 0, "sampling": 0, "terminal": 0,
    "model": 1, "validate": 1, "launch": 1, "kernel": 1,
    "transforms": 2, "multi": 2, "boilerplate": 2,
    "formats": 3, "childsampler": 3, "cluster": 3,
    "analysis": 4,
    "views": 5, "backends": 5, "downloads": 5,
    "report": 6,
    "page": 7, "session": 7,
    "attaching": 8, "cellrun": 8, "live": 8,
    "magic": 9, "cli": 9, "casestudy": 9, "demo": 9,
    "__init__": 10, "__main__": 11,
}


def _unit(path: str) -> str:
    """The layer unit of a module path relative to profmagic/ ('formats/speedscope.py' -> 'formats')."""
    first = path.split(os.sep)[0]
    return first[:-3] if first.endswith(".py") else first


def _imports(path: str):
    """(line, target unit) for every import of a profmagic module in ``path``."""
    rel = os.path.relpath(path, ROOT)
    pkg = ["profmagic"] + rel.split(os.sep)[:-1]
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg[: len(pkg) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            names = [mod] + [f"{mod}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        targets = []   # every unit the statement names: ``from . import a, b`` imports a and b
        for name in names:
            parts = name.split(".")
            if parts[0] != "profmagic" or len(parts) < 2:
                continue
            target = parts[1]
            if target not in targets and (target in LAYERS or os.path.exists(os.path.join(ROOT, target))):
                targets.append(target)
                yield node.lineno, target
            if len(parts) > 2 or node.module:   # ``from .model import X``: X is a name, not a unit
                break


def _modules():
    for d, _, files in os.walk(ROOT):
        for f in files:
            if f.endswith(".py"):
                yield os.path.join(d, f)


def test_every_module_has_a_layer():
    units = {_unit(os.path.relpath(p, ROOT)) for p in _modules()}
    assert units <= set(LAYERS), f"modules with no layer in LAYERS: {sorted(units - set(LAYERS))}"


def test_imports_point_down():
    bad = []
    for path in _modules():
        unit = _unit(os.path.relpath(path, ROOT))
        for line, target in _imports(path):
            if target == unit:
                continue
            if LAYERS.get(target, 99) >= LAYERS[unit]:
                bad.append(f"profmagic/{os.path.relpath(path, ROOT)}:{line} imports {target} "
                           f"(layer {LAYERS.get(target)}) from {unit} (layer {LAYERS[unit]})")
    assert not bad, "imports that point up or across:\n" + "\n".join(bad)


def test_model_formats_transforms_know_no_recorder_view_or_ui():
    below = {"model", "formats", "transforms", "multi", "errors", "threads", "procfs", "analysis", "boilerplate"}
    above = {"backends", "session", "views", "report", "magic", "attaching", "kernel", "cli", "childsampler"}
    bad = [(os.path.relpath(p, ROOT), line, t) for p in _modules() if _unit(os.path.relpath(p, ROOT)) in below
           for line, t in _imports(p) if t in above]
    assert not bad, bad


def test_load_imports_no_recorder(tmp_path):
    f = tmp_path / "p.folded"
    f.write_text("main;work 3\nmain;wait 2\n")
    code = ("import profmagic, sys; p = profmagic.load(sys.argv[1]); assert p.sample_count == 5; "
            "print(sorted(m for m in sys.modules if m.startswith('profmagic.')))")
    out = subprocess.run([sys.executable, "-c", code, str(f)], capture_output=True, text=True, check=True).stdout
    loaded = eval(out)
    assert not [m for m in loaded if m.split(".")[1] in ("backends", "session", "kernel", "childsampler",
                                                          "attaching", "magic", "report", "views")], loaded


@pytest.mark.parametrize("name", ["profile", "attach"])
def test_public_names_are_functions_not_modules(name):
    import profmagic
    assert callable(getattr(profmagic, name)) and not isinstance(getattr(profmagic, name), type(os))

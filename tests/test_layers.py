"""The package's layers (docs/architecture.md, "Layers"): every import, at module level or inside a
function, points down or across within one package, never up; no module imports itself back through
others; and loading a file imports no recorder.

The checker reads the source with ``ast`` and counts as an import of a module: ``import profmagic.x``,
every name of ``from profmagic import a, b`` and ``from . import a, b`` (a name that is not a module
is an import of the package that defines it: the statement loads that package), and
``importlib.import_module`` with a constant name (absolute, or relative with ``package=``), an
f-string (its constant prefix, e.g. ``f"{__name__}.views.{name}"`` loads ``views``), or a loop
variable over constant names."""
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
    "interrupts": 0, "uncertainty": 0, "reasons": 0, "derived": 0, "cbuild": 0,
    "flatstacks": 0.5,   # derived's memo of the flat stack arrays; the model's functions() and the trees read it
    "waits": 0.5,   # reads reasons; the model's chain() reads it
    "lastran": 0.5,   # reads /proc with reasons' ProcReader; the samplers use it
    "model": 1, "validate": 1, "launch": 1, "kernel": 1,
    "transforms": 2, "multi": 2, "boilerplate": 2,
    "formats": 3, "childsampler": 3, "cluster": 3,
    "analysis": 4, "downloads": 4,
    "views": 5, "backends": 5,
    "report": 6,
    "page": 7, "session": 7, "history": 7,
    "attaching": 8, "cellrun": 8, "live": 8,
    "magic": 9, "cli": 9, "casestudy": 9, "demo": 9,
    "__init__": 10, "__main__": 11,
}
# What knows no recorder, view or user interface, and what does.
BELOW = {"model", "uncertainty", "reasons", "waits", "lastran", "derived", "flatstacks", "formats", "transforms", "multi", "errors", "threads", "procfs", "analysis", "boilerplate"}
ABOVE = {u for u, layer in LAYERS.items() if layer >= 5} | {"childsampler", "cluster", "kernel", "launch"}
# The cluster package's data modules (pandas only: a cluster profile's tasks and ranks) are no recorder.
DATA_OF_ABOVE = {"profmagic.cluster.tasks", "profmagic.cluster.assemble"}


# -- the checker -------------------------------------------------------------------------------------
def _module_name(rel: str) -> str:
    """'formats/speedscope.py' -> 'profmagic.formats.speedscope'; 'formats/__init__.py' -> 'profmagic.formats'."""
    parts = ["profmagic"] + rel[:-3].split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def unit_of(module: str) -> str:
    """The layer unit of a module name: 'profmagic.formats.speedscope' -> 'formats', 'profmagic' -> '__init__'."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _resolve(base: str, level: int, name: str | None, is_pkg: bool) -> str:
    """The absolute name of a relative import from module ``base`` (a package itself when ``is_pkg``)."""
    parts = base.split(".")
    if not is_pkg:
        parts = parts[:-1]
    parts = parts[: len(parts) - (level - 1)] if level > 1 else parts
    return ".".join(parts + ([name] if name else []))


def _constant_prefix(node: ast.AST, here: str) -> str | None:
    """The module name a string expression gives: a constant; or an f-string's constant prefix up to its
    last dot before the first part that is not ``__name__`` (``f"{__name__}.views.{x}"`` -> '….views')."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        text, whole = "", True
        for v in node.values:
            if isinstance(v, ast.Constant):
                text += str(v.value)
            elif isinstance(v, ast.FormattedValue) and isinstance(v.value, ast.Name) and v.value.id == "__name__":
                text += here
            else:
                whole = False
                break
        return text if whole else text.rpartition(".")[0]
    if isinstance(node, ast.Name) and node.id == "__name__":
        return here
    return None


def _import_module_targets(call: ast.Call, loops: dict, here: str, is_pkg: bool) -> list[str] | None:
    """The modules an ``importlib.import_module(...)`` call names, or None if it is no such call."""
    f = call.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
    if name != "import_module" or not call.args:
        return None
    arg = call.args[0]
    names = loops.get(arg.id) if isinstance(arg, ast.Name) and arg.id in loops else [_constant_prefix(arg, here)]
    package = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "package"),
                                                           None)
    pkg = _constant_prefix(package, here if is_pkg else here.rpartition(".")[0]) if package is not None else None
    out = []
    for n in names:
        if not n:
            continue
        if n.startswith("."):
            level = len(n) - len(n.lstrip("."))
            if pkg is None:
                continue
            n = _resolve(pkg, level, n.lstrip(".") or None, True)
        out.append(n)
    return out


def imports(source: str, rel: str, modules: set[str]):
    """(line, module) for every profmagic module that the file ``rel`` (under profmagic/) imports.
    ``modules``: every module and package name of the tree, to tell a submodule from a name."""
    here = _module_name(rel)
    is_pkg = rel.endswith("__init__.py")
    tree = ast.parse(source, rel)
    loops: dict[str, list[str]] = {}   # loop variable -> the constant strings it runs over
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.target, ast.Name) \
                and isinstance(node.iter, (ast.Tuple, ast.List)) \
                and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.iter.elts):
            loops.setdefault(node.target.id, []).extend(e.value for e in node.iter.elts)
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mod = _resolve(here, node.level, node.module, is_pkg) if node.level else (node.module or "")
            for a in node.names:
                sub = f"{mod}.{a.name}"
                targets.append(sub if sub in modules else mod)   # a name, not a module: its package loads
        elif isinstance(node, ast.Call):
            targets = _import_module_targets(node, loops, here, is_pkg) or []
        seen = set()
        for t in targets:
            if (t == "profmagic" or t.startswith("profmagic.")) and t not in seen:
                seen.add(t)
                # the nearest module of the tree that ``t`` names (a.b.Name -> a.b)
                while t not in modules and "." in t:
                    t = t.rpartition(".")[0]
                yield node.lineno, t


def read_tree(root: str = ROOT) -> dict[str, str]:
    """{path under profmagic/ with '/' separators: source} for every .py file."""
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(d, f)
                with open(path, encoding="utf-8") as fh:
                    out[os.path.relpath(path, root).replace(os.sep, "/")] = fh.read()
    return out


def graph(tree: dict[str, str]) -> dict[str, list[tuple[str, int, str]]]:
    """{module: [(imported module, line, file)]} over the whole tree, self-imports left out."""
    modules = {_module_name(rel) for rel in tree}
    out: dict[str, list] = {m: [] for m in modules}
    for rel, src in tree.items():
        here = _module_name(rel)
        for line, target in imports(src, rel, modules):
            if target != here:
                out[here].append((target, line, rel))
    return out


def upward(tree: dict[str, str]) -> list[str]:
    """Every import from one unit to another at the same or a higher layer."""
    bad = []
    for here, edges in graph(tree).items():
        unit = unit_of(here)
        for target, line, rel in edges:
            t = unit_of(target)
            if t != unit and LAYERS.get(t, 99) >= LAYERS.get(unit, -1):
                bad.append(f"profmagic/{rel}:{line} imports {target} ({t}, layer {LAYERS.get(t)}) "
                           f"from {unit} (layer {LAYERS.get(unit)})")
    return sorted(bad)


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def module_cycles(tree: dict[str, str]) -> list[list[str]]:
    return cycles({m: {t for t, _, _ in e} for m, e in graph(tree).items()})


def unit_cycles(tree: dict[str, str]) -> list[list[str]]:
    units: dict[str, set[str]] = {}
    for m, e in graph(tree).items():
        units.setdefault(unit_of(m), set()).update(unit_of(t) for t, _, _ in e if unit_of(t) != unit_of(m))
    return cycles(units)


# -- the package ---------------------------------------------------------------------------------------
TREE = read_tree()


def test_every_module_has_a_layer():
    units = {unit_of(_module_name(rel)) for rel in TREE}
    assert units <= set(LAYERS), f"modules with no layer in LAYERS: {sorted(units - set(LAYERS))}"
    assert set(LAYERS) <= units, f"LAYERS names units that do not exist: {sorted(set(LAYERS) - units)}"


def test_imports_point_down():
    bad = upward(TREE)
    assert not bad, "imports that point up or across:\n" + "\n".join(bad)


def test_no_import_cycle():
    assert not unit_cycles(TREE), unit_cycles(TREE)
    found = module_cycles(TREE)
    assert not found, "modules that import themselves back through others:\n" + "\n".join(
        f"{len(c)} modules: {', '.join(c)}" for c in found)


def test_model_formats_transforms_know_no_recorder_view_or_ui():
    bad = [(rel, line, t) for m, e in graph(TREE).items() if unit_of(m) in BELOW
           for t, line, rel in e if unit_of(t) in ABOVE and t not in DATA_OF_ABOVE]
    assert not bad, bad



# transforms/, one module per job: each imports only modules of the package before it in this order.
TRANSFORMS_ORDER = ["ops", "cpu_split", "merge", "memory", "cell", "awaits", "pipeline"]


def test_transforms_modules_point_one_way():
    mods = {f"profmagic.transforms.{m}": i for i, m in enumerate(TRANSFORMS_ORDER)}
    assert {m for m in graph(TREE) if m.startswith("profmagic.transforms.")} == set(mods)
    bad = [(m, t, line) for m, e in graph(TREE).items() if m in mods
           for t, line, _ in e if t.startswith("profmagic.transforms") and mods.get(t, 99) >= mods[m]]
    assert not bad, bad

# -- the checker has teeth -------------------------------------------------------------------------------
@pytest.mark.parametrize("added, unit", [
    ("from . import _lend_hooks", "__init__"),          # a name of the root package, not a module
    ("from profmagic import errors, report", "report"),  # the second name of an absolute import
    ("def f():\n    from .views import icicle", "views"),   # inside a function
    ("def f():\n    import importlib\n    importlib.import_module('profmagic.session')", "session"),
    ("def f():\n    import importlib\n    importlib.import_module('.cluster.dask', package='profmagic')", "cluster"),
    ("def f():\n    import importlib\n    return importlib.import_module(f'profmagic.backends.{x}')", "backends"),
    ("import importlib\nfor m in ('profmagic.errors', 'profmagic.live'):\n    importlib.import_module(m)", "live"),
    ("import profmagic.downloads", "downloads"),
])
def test_checker_finds_an_added_upward_import(added, unit):
    assert not [b for b in upward(TREE) if b.startswith("profmagic/model.py:")]
    tree = dict(TREE)
    tree["model.py"] = TREE["model.py"] + "\n" + added + "\n"
    bad = [b for b in upward(tree) if b.startswith("profmagic/model.py:")]
    assert len(bad) == 1 and f"({unit}, layer {LAYERS[unit]}) from model (layer 1)" in bad[0], bad


def test_checker_finds_cycles():
    tree = dict(TREE)
    tree["formats/_a.py"] = "from ._b import X\n"
    tree["formats/_b.py"] = "def f():\n    from . import _a\n"
    assert module_cycles(tree) == [["profmagic.formats._a", "profmagic.formats._b"]]
    # model -> root package -> formats -> model: one circle of units through the layers
    tree["model.py"] = TREE["model.py"] + "\nfrom . import save\n"
    assert any({"model", "__init__"} <= set(c) for c in unit_cycles(tree)), unit_cycles(tree)


def test_load_imports_no_recorder(tmp_path):
    f = tmp_path / "p.folded"
    f.write_text("main;work 3\nmain;wait 2\n")
    code = ("import profmagic, sys; p = profmagic.load(sys.argv[1]); assert p.sample_count == 5; "
            "print(sorted(m for m in sys.modules if m.startswith('profmagic.')))")
    out = subprocess.run([sys.executable, "-c", code, str(f)], capture_output=True, text=True, check=True).stdout
    loaded = eval(out)
    assert not [m for m in loaded if m.split(".")[1] in ABOVE], loaded


@pytest.mark.parametrize("name", ["profile", "attach"])
def test_public_names_are_functions_not_modules(name):
    import profmagic
    assert callable(getattr(profmagic, name)) and not isinstance(getattr(profmagic, name), type(os))

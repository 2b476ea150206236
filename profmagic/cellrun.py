"""Run a cell's code the way IPython runs a cell: input transformers (``!cmd``, ``%magic``), AST
transformers, ``%autoawait`` and ``ast_node_interactivity``, compiled under the cell's own file
name (tracebacks point at its lines). Unlike IPython's ``run_cell``, an exception propagates (the
magic shows the profile, then re-raises it), and the value of the cell's last expression is
returned so that the magic can hand it to the display hook after the report.
"""
from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass

from . import awaits

NOTHING = object()   # the cell ends in no expression to display


@dataclass
class Cell:
    filename: str                       # IPython's compile cache name for this code
    nodes: list                         # (code object, "exec" | "eval")
    is_async: bool                      # some node awaits at top level

    def run(self, ns: dict):
        """Run a cell without top-level await; the last expression's value (or NOTHING)."""
        value = NOTHING
        for code, mode in self.nodes:
            if mode == "eval":
                value = eval(code, ns)
            else:
                exec(code, ns)
        return value

    async def run_async(self, ns: dict, tracker: awaits.Tracker | None = None):
        """Run a cell with top-level await; each awaiting node's suspensions go to ``tracker``."""
        value = NOTHING
        for code, mode in self.nodes:
            out = eval(code, ns)
            if inspect.CO_COROUTINE & code.co_flags:
                out = await (tracker.track(out) if tracker is not None else out)
            if mode == "eval":
                value = out
        return value


def prepare(shell, raw: str, number: int) -> Cell:
    """Transform and compile ``raw`` as cell ``number`` of ``shell``. SyntaxError propagates."""
    transformed = shell.transform_cell(raw)
    filename = shell.compile.cache(transformed, number, raw_code=raw)
    tree = shell.compile.ast_parse(transformed, filename=filename)
    tree = shell.transform_ast(tree)
    body = list(tree.body)
    last_value = _interactive(body, shell.ast_node_interactivity)
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT if shell.autoawait else 0
    nodes = []
    for i, node in enumerate(body):
        if i == len(body) - 1 and last_value:
            mod, mode = ast.Expression(node.value), "eval"
        else:
            mod, mode = ast.Module([node], []), "exec"
        with shell.compile.extra_flags(flags):
            code = shell.compile(mod, filename, mode)
        nodes.append((code, mode))
    return Cell(filename, nodes, any(inspect.CO_COROUTINE & c.co_flags for c, _ in nodes))


def _interactive(body: list, interactivity: str) -> bool:
    """Whether the last node's value is displayed (IPython's 'last_expr' rules; 'last_expr_or_assign'
    appends the assigned name; 'all' and 'last' display the last expression too)."""
    if not body or interactivity == "none":
        return False
    if interactivity == "last_expr_or_assign" and isinstance(body[-1], (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        node = body[-1]
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else \
            getattr(node, "target", None)
        if isinstance(target, ast.Name):
            expr = ast.Expr(ast.Name(target.id, ast.Load()))
            ast.copy_location(expr, node)
            ast.fix_missing_locations(expr)
            body.append(expr)
    return isinstance(body[-1], ast.Expr)

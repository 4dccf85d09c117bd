"""A tool config's ``class_name`` checked without importing it: the module's file is found, its classes read.

Design notes: docs/design/tools.md.
"""

from __future__ import annotations

import ast
import importlib.util
import pkgutil
from importlib.machinery import PathFinder

from rlflow.io import read_bytes
from rlflow.tools.schema import did_you_mean

MAX_SOURCE_BYTES = 4 << 20  # a module's source read for its class names


def class_problem(class_name: str, search: list[str]) -> tuple[str, str] | None:
    """(problem, fix) when ``module.Class`` cannot be found on ``search`` (then ``sys.path``), else None."""
    module_name, _, cls = class_name.rpartition(".")
    spec, problem = _find_module(module_name, search)
    if problem is not None:
        return problem
    if spec.origin is None or not spec.origin.endswith(".py"):
        return None  # a compiled or namespace module: its names cannot be read without importing it
    try:
        tree = ast.parse(read_bytes(spec.origin, MAX_SOURCE_BYTES, "module"), filename=spec.origin)
    except (OSError, SyntaxError, ValueError) as exc:
        return f"module {module_name!r} ({spec.origin}) cannot be read: {exc}", "fix the module"
    bound = _top_level_names(tree)
    if cls in bound:
        return None
    classes = sorted(n for n, is_class in bound.items() if is_class)
    return (
        f"module {module_name!r} ({spec.origin}) has no class {cls!r}{did_you_mean(cls, classes)}",
        f"classes it defines: {', '.join(classes)}" if classes else "define the tool class in that module",
    )


def _find_module(dotted: str, search: list[str]):
    """(the module's spec, None) or (None, (problem, fix)); ``importlib.util.find_spec`` of the top-level name
    only, which imports nothing, reaches finders that are not on the path (editable installs)."""
    parts = dotted.split(".")
    try:
        spec = PathFinder.find_spec(parts[0], search) or importlib.util.find_spec(parts[0])
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        known = sorted({m.name for m in pkgutil.iter_modules(search)})
        return None, (
            f"module {parts[0]!r} is not found in the project, next to the tool config or on the Python path"
            f"{did_you_mean(parts[0], known)}",
            "give class_name as module.Class of an importable module (verl's loader imports it)",
        )
    for depth in range(1, len(parts)):
        parent = ".".join(parts[:depth])
        locations = spec.submodule_search_locations
        if locations is None:
            return None, (f"{parent!r} is a module, not a package: it has no {parts[depth]!r}", "fix class_name")
        found = PathFinder.find_spec(".".join(parts[: depth + 1]), list(locations))
        if found is None:
            known = sorted(m.name for m in pkgutil.iter_modules(list(locations)))
            return None, (
                f"module {'.'.join(parts[: depth + 1])!r} is not found: package {parent!r} has no "
                f"{parts[depth]!r}{did_you_mean(parts[depth], known)}",
                f"modules in {parent}: {', '.join(known)}" if known else "fix class_name",
            )
        spec = found
    return spec, None


def _top_level_names(tree: ast.Module) -> dict[str, bool]:
    """Names a module binds at top level (classes, assignments, imports), each with whether it is a class."""
    names: dict[str, bool] = {}
    for node in _top_level(tree.body):
        if isinstance(node, ast.ClassDef):
            names[node.name] = True
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:  # a class re-exported from another module
                names.setdefault((alias.asname or alias.name).split(".")[0], False)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    names.setdefault(target.id, False)
    return names


def _top_level(body: list[ast.stmt]):
    """The statements of a module's body, those under top-level ``if``/``try`` blocks included."""
    for node in body:
        yield node
        if isinstance(node, ast.If):
            yield from _top_level([*node.body, *node.orelse])
        elif isinstance(node, ast.Try):
            handlers = [stmt for handler in node.handlers for stmt in handler.body]
            yield from _top_level([*node.body, *handlers, *node.orelse, *node.finalbody])

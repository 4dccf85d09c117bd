"""verl's V1 trainers as their source has them: every timer and trainer call of start-up and of one step.

verl is never imported: its trainer modules are found with ``importlib.util.find_spec`` and parsed with ``ast``
(``RLFLOW_VERL_SOURCE`` points at another source tree). Design notes: docs/design/verl_order.md.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass, field, replace
from functools import lru_cache
from importlib.util import find_spec
from pathlib import Path
from typing import Literal

SOURCE_ENV = "RLFLOW_VERL_SOURCE"  # a folder holding a verl/ source tree to read instead of the installed verl
SYNC_TRAINER = ("verl.trainer.ppo.v1.trainer_sync", "PPOTrainerSync")
SEPARATE_ASYNC_TRAINER = ("verl.trainer.ppo.v1.trainer_separate_async", "PPOTrainerSeparateAsync")
TIMER_FUNCTIONS = ("marked_timer", "_timer")
STEP_TIMER = "step"  # verl's timing_s/step
_TRY_NODES = (ast.Try, *([ast.TryStar] if hasattr(ast, "TryStar") else []))  # try/except* is Python 3.11+


class VerlSourceError(Exception):
    """verl's trainer source is not laid out as this reader expects (a file, class or loop is missing)."""


@dataclass(frozen=True)
class Site:
    """A timer or a trainer call, where it sits in verl's source and under what."""

    kind: Literal["timer", "call"]
    name: str  # the timer's name, or the call's target below ``self`` (``checkpoint_manager.update_weights``)
    file: str  # the module's file name (``trainer_base.py``)
    line: int
    timers: tuple[str, ...] = ()  # enclosing timers, outermost first (a timer's own name is not among them)
    conditions: tuple[str, ...] = ()  # enclosing ``if`` tests, outermost first, as ``ast.unparse`` writes them
    loops: tuple[str, ...] = ()  # enclosing loops in the phase walked: a ``for``'s iterable, a ``while``'s test

    @property
    def in_step(self) -> bool:
        """Inside verl's ``step`` timer (counted in ``timing_s/step``)."""
        return STEP_TIMER in self.timers

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class TrainerSites:
    """The sites of a trainer's start-up and of one training step, in execution order."""

    root: Path
    startup: tuple[Site, ...]
    step: tuple[Site, ...]


def verl_root() -> Path | None:
    """The folder that holds the ``verl`` package to read: ``$RLFLOW_VERL_SOURCE``, else the
    installed verl's; None when verl is not installed."""
    override = os.environ.get(SOURCE_ENV)
    if override:
        return Path(override)
    spec = find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).parent


@lru_cache(maxsize=8)
def read_trainer(
    root: Path, leaves: frozenset[str] = frozenset(), trainer: tuple[str, str] = SYNC_TRAINER
) -> TrainerSites:
    """Walk ``trainer`` (module, class; ``PPOTrainerSync`` by default) under ``root``; ``VerlSourceError``
    when its layout is not the expected one.

    Read once per process, folder and trainer (``rlflow validate --verl`` checks several files against it)."""
    methods = _methods(_class_chain(root, *trainer))
    for name in ("init", "fit"):
        if name not in methods:
            raise VerlSourceError(f"{trainer[1]} has no method {name}() (verl's trainer layout changed)")
    fit, fit_file = methods["fit"][0]
    loop_at = next((i for i, stmt in enumerate(fit.body) if isinstance(stmt, ast.While)), None)
    if loop_at is None:
        raise VerlSourceError(f"{fit_file}: fit() has no training loop (while ...) any more")
    walk = _Walk(methods, leaves)
    init, init_file = methods["init"][0]
    walk.block(init.body, _Context(init_file))
    walk.block(fit.body[:loop_at], _Context(fit_file))
    startup = tuple(walk.take())
    walk.block(fit.body[loop_at].body, _Context(fit_file))
    return TrainerSites(root, startup, tuple(walk.take()))


# ---- the class hierarchy --------------------------------------------------------------------


def _parse(root: Path, module: str) -> tuple[ast.Module, str]:
    path = root / (module.replace(".", "/") + ".py")
    if not path.is_file():
        raise VerlSourceError(f"{path} is missing (verl's trainer layout changed)")
    try:
        return ast.parse(path.read_text(encoding="utf-8"), filename=str(path)), path.name
    except SyntaxError as exc:
        raise VerlSourceError(f"{path}:{exc.lineno}: cannot be parsed: {exc.msg}") from None


def _class_chain(root: Path, module: str, name: str) -> list[tuple[ast.ClassDef, str]]:
    """The class and its bases defined in verl, nearest first (depth-first, as single inheritance resolves)."""
    tree, file = _parse(root, module)
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    if name not in classes:
        raise VerlSourceError(f"{file} defines no class {name} (verl's trainer layout changed)")
    imported = {a.asname or a.name: n.module for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names}
    chain = [(classes[name], file)]
    for base in classes[name].bases:
        if not isinstance(base, ast.Name):
            continue
        source = module if base.id in classes else imported.get(base.id)
        if source and source.startswith("verl."):
            chain += _class_chain(root, source, base.id)
    return chain


Definition = tuple[ast.FunctionDef, str]


def _methods(chain: list[tuple[ast.ClassDef, str]]) -> dict[str, list[Definition]]:
    """Method name -> its definitions along the chain, nearest first (``super()`` reaches the next one)."""
    methods: dict[str, list[Definition]] = {}
    for cls, file in chain:
        for f in cls.body:
            if isinstance(f, ast.FunctionDef):
                methods.setdefault(f.name, []).append((f, file))
    return methods


# ---- the walk -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Context:
    file: str
    timers: tuple[str, ...] = ()
    conditions: tuple[str, ...] = ()
    loops: tuple[str, ...] = ()
    stack: tuple[tuple[str, int], ...] = field(default=())  # (method, definition) walked into (no recursion)


class _Walk:
    """Sites in execution order; ``take`` hands over those found since the last ``take``."""

    def __init__(self, methods: dict[str, list[Definition]], leaves: frozenset[str]) -> None:
        self.methods = methods
        self.leaves = leaves
        self.sites: list[Site] = []

    def take(self) -> list[Site]:
        sites, self.sites = self.sites, []
        return sites

    def emit(self, kind: Literal["timer", "call"], name: str, node: ast.AST, ctx: _Context) -> None:
        self.sites.append(Site(kind, name, ctx.file, node.lineno, ctx.timers, ctx.conditions, ctx.loops))

    def block(self, stmts: list[ast.stmt], ctx: _Context) -> None:
        for stmt in stmts:
            self.stmt(stmt, ctx)
            if isinstance(stmt, ast.If) and not stmt.orelse and _leaves_block(stmt.body):
                ctx = replace(ctx, conditions=(*ctx.conditions, _negated(stmt.test)))

    def stmt(self, node: ast.stmt, ctx: _Context) -> None:
        if isinstance(node, ast.If):
            self.expr(node.test, ctx)
            self.block(node.body, replace(ctx, conditions=(*ctx.conditions, ast.unparse(node.test))))
            self.block(node.orelse, replace(ctx, conditions=(*ctx.conditions, _negated(node.test))))
        elif isinstance(node, ast.With | ast.AsyncWith):
            for item in node.items:
                self.expr(item.context_expr, ctx)
                timer = _timer_name(item.context_expr)
                if timer is not None:
                    self.emit("timer", timer, item.context_expr, ctx)
                    ctx = replace(ctx, timers=(*ctx.timers, timer))
            self.block(node.body, ctx)
        elif isinstance(node, ast.For | ast.AsyncFor):
            self.expr(node.iter, ctx)
            self.block(node.body, replace(ctx, loops=(*ctx.loops, ast.unparse(node.iter))))
            self.block(node.orelse, ctx)
        elif isinstance(node, ast.While):
            self.expr(node.test, ctx)
            self.block(node.body, replace(ctx, loops=(*ctx.loops, ast.unparse(node.test))))
            self.block(node.orelse, ctx)
        elif isinstance(node, _TRY_NODES):
            for part in (node.body, node.orelse, node.finalbody):
                self.block(part, ctx)
        elif not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.expr):
                    self.expr(child, ctx)

    def expr(self, node: ast.expr, ctx: _Context) -> None:
        """Calls in the order they run: a call's arguments before the call."""
        if isinstance(node, ast.Lambda):  # its body runs later, if at all
            return
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self.expr(child, ctx)
        if not isinstance(node, ast.Call):
            return
        target, level = _below_self(node.func), 0
        if target is None and _is_super_call(node.func):  # super().m() in m: m's next definition up the chain
            target = node.func.attr
            level = next((lv + 1 for name, lv in reversed(ctx.stack) if name == target), None)
        if target is None:
            return
        self.emit("call", target, node, ctx)
        found = self.methods.get(target, [])
        if level is not None and level < len(found) and target not in self.leaves and (target, level) not in ctx.stack:
            method, file = found[level]
            self.block(method.body, replace(ctx, file=file, stack=(*ctx.stack, (target, level))))


def _timer_name(node: ast.expr) -> str | None:
    """``marked_timer("gen", ...)`` -> ``gen``."""
    if not isinstance(node, ast.Call) or not node.args or not isinstance(node.args[0], ast.Constant):
        return None
    func = node.func
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    value = node.args[0].value
    return value if name in TIMER_FUNCTIONS and isinstance(value, str) else None


def _below_self(node: ast.expr) -> str | None:
    """``self.a.b`` -> ``a.b``; None for anything not rooted at ``self``."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id == "self" and parts:
        return ".".join(reversed(parts))
    return None


def _is_super_call(node: ast.expr) -> bool:
    """``super().m``."""
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Name)
        and node.value.func.id == "super"
    )


def _negated(test: ast.expr) -> str:
    return ast.unparse(ast.UnaryOp(op=ast.Not(), operand=test))


def _leaves_block(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], ast.Return | ast.Continue | ast.Break | ast.Raise)

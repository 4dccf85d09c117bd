"""verl's cadence conditions evaluated: at which steps of a run a save or validation condition holds.

Only boolean logic, comparisons and integer arithmetic over four names; anything else is ``Unreadable``.
Nothing is ``eval``-ed. Design notes: docs/design/verl_order.md.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

CADENCE_NAMES = frozenset({"save_freq", "test_freq", "global_steps", "is_last_step"})
_COMPARE = {
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}
_ARITHMETIC = {
    ast.Mod: operator.mod,
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
}


class Unreadable(Exception):
    """A cadence condition outside what is evaluated here; the message is the condition's text."""


@lru_cache(maxsize=256)
def mentions_cadence(condition: str) -> bool:
    """Whether ``condition`` (Python source) names the step, the last step or a save/test frequency."""
    names = {
        node.id if isinstance(node, ast.Name) else node.attr
        for node in ast.walk(ast.parse(condition, mode="eval"))
        if isinstance(node, ast.Name | ast.Attribute)
    }
    return bool(names & CADENCE_NAMES)


def steps_where(conditions: Sequence[str], knobs: Any, total: int) -> list[int]:
    """The steps 1..``total`` at which every condition holds, with ``knobs.save_freq`` and
    ``knobs.test_freq`` as the frequencies; ``Unreadable`` names the first condition that cannot be read."""
    parsed = [(text, ast.parse(text, mode="eval").body) for text in conditions]
    steps = []
    for step in range(1, total + 1):
        env = {
            "save_freq": knobs.save_freq,
            "test_freq": knobs.test_freq,
            "global_steps": step,
            "is_last_step": step == total,
        }
        if all(_evaluate(node, env, text) for text, node in parsed):
            steps.append(step)
    return steps


def _evaluate(node: ast.expr, env: dict[str, int | bool], text: str) -> int | bool:
    if isinstance(node, ast.BoolOp):
        values = [_evaluate(v, env, text) for v in node.values]
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return not _evaluate(node.operand, env, text)
    if isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
        left = _evaluate(node.left, env, text)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = _evaluate(right_node, env, text)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        left, right = _evaluate(node.left, env, text), _evaluate(node.right, env, text)
        if right == 0 and isinstance(node.op, ast.Mod | ast.FloorDiv):
            raise Unreadable(text)  # verl itself would fail here
        return _ARITHMETIC[type(node.op)](left, right)
    if isinstance(node, ast.Constant) and type(node.value) in (int, bool):
        return node.value
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
    if name in env:
        return env[name]
    raise Unreadable(text)

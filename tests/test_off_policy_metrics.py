"""``off_policy_metrics`` against the formulas in the installed verl's source.

verl computes its staleness metrics inline (``PPOTrainer._compute_metrics`` in
``trainer/ppo/v1/trainer_base.py``, ``ReplayBuffer._evict_terminal_groups`` in ``replay_buffer.py``),
so the tests read those statements with ``ast`` and evaluate them on the same versions with numpy:
a change of formula or name in verl fails here.
"""

from __future__ import annotations

import ast
import random
from pathlib import Path

import numpy as np
import pytest

from rlflow.check.verl_source import verl_root
from rlflow.metrics import off_policy_metrics

V1 = Path("verl") / "trainer" / "ppo" / "v1"


def method(path: Path, name: str) -> ast.FunctionDef:
    tree = ast.parse((verl_root() / path).read_text())
    return next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)


def assignment(func: ast.FunctionDef, target: str) -> ast.expr:
    """The value verl assigns to the local ``target`` in ``func``."""
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == target for t in node.targets):
            return node.value
    raise AssertionError(f"verl's {func.name} no longer assigns {target}")


def metrics_dict(func: ast.FunctionDef, marker: str) -> ast.Dict:
    """The dict literal in ``func`` whose keys mention ``marker``."""
    for node in ast.walk(func):
        if isinstance(node, ast.Dict) and marker in ast.unparse(node):
            return node
    raise AssertionError(f"verl's {func.name} has no metrics dict with {marker}")


def evaluate(node: ast.expr, env: dict):
    # verl's own expression, read above; names as globals so that its comprehensions see them
    return eval(compile(ast.Expression(node), "<verl>", "eval"), dict(env))


def verls_off_policy_metrics(step: int, first: list[int], last: list[int]) -> dict:
    func = method(V1 / "trainer_base.py", "_compute_metrics")
    env = {"global_steps": step, "min_global_steps": np.array(first), "max_global_steps": np.array(last)}
    for name in ("trajectory_spans", "trajectory_staleness", "trajectory_staleness_worst"):
        env[name] = evaluate(assignment(func, name), env)
    return evaluate(metrics_dict(func, "training/off_policy/trajectory_staleness"), env)


def same(ours: dict, theirs: dict) -> None:
    assert set(ours) == set(theirs)
    for name, value in theirs.items():
        assert ours[name] == pytest.approx(float(value)), name
        assert isinstance(ours[name], float) == isinstance(value, np.floating), name  # means float, extremes int


@pytest.mark.parametrize("seed", range(5))
def test_off_policy_metrics_are_verls_formula(seed):
    rng = random.Random(seed)
    step = rng.randint(1, 40)
    last = [rng.randint(max(0, step - 9), step - 1) for _ in range(rng.randint(1, 17))]
    first = [v - rng.choice([0, 0, 1, 2]) for v in last]
    same(off_policy_metrics(step, list(zip(first, last))), verls_off_policy_metrics(step, first, last))
    same(off_policy_metrics(step, last), verls_off_policy_metrics(step, last, last))  # one version each


def test_a_synchronous_step_is_zero_stale_and_spans_one_version():
    metrics = off_policy_metrics(7, [6] * 8)  # sampled with the weights of 6 updates, trained at step 7
    assert metrics["training/off_policy/trajectory_staleness/max"] == 0
    assert metrics["training/off_policy/trajectory_spans/mean"] == 1.0
    one_behind = off_policy_metrics(7, [5, 5, 6])
    assert one_behind["training/off_policy/trajectory_staleness/max"] == 1
    assert one_behind["training/off_policy/trajectory_staleness/mean"] == pytest.approx(2 / 3)
    assert off_policy_metrics(7, []) == {}


def test_evicted_groups_are_verls_replay_buffer_formula():
    func = method(V1 / "replay_buffer.py", "_evict_terminal_groups")
    step, versions = 12, [3, 9, 7, 3]
    # verl tags a prompt with the step it was dispatched in: version + 1 for weights of `version` updates
    env = {
        "global_steps": step,
        "stale_uids": [f"u{i}" for i in range(len(versions))],
        "prompt_global_steps": {f"u{i}": v + 1 for i, v in enumerate(versions)},
        "np": np,
        "prefix": "training",
    }
    env["spans"] = evaluate(assignment(func, "spans"), env)
    theirs = evaluate(metrics_dict(func, "evicted_samples_staleness"), env)
    ours = off_policy_metrics(step, [], [step - v for v in versions])
    assert set(ours) == set(theirs)
    for name, value in theirs.items():
        assert ours[name] == pytest.approx(float(value)), name
    assert ours["training/off_policy/evicted_samples"] == 4 and off_policy_metrics(step, []) == {}
    both = off_policy_metrics(step, [11, 11], [9])
    assert (
        both["training/off_policy/evicted_samples"] == 1 and both["training/off_policy/trajectory_staleness/max"] == 0
    )

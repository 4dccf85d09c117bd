"""verl's metric names for one GRPO step, read from the installed verl's source with ``ast`` (not copied).

``SOURCES`` names the functions whose metrics verl 0.9.1's V1 synchronous trainer logs for a GRPO
step with the KL loss (rule-based reward, single-turn rollouts, a dense model), with the prefix
their caller adds (verl's ``rename_dict``: only to names that lack it). In each function a
metric name is a string constant (or an f-string, expanded below) that is
- the key of ``<...metric...>[key] = ...``, or
- a key of a dict literal (or dict comprehension, also inside ``**`` unpacking) that is assigned to a
  ``<...metric...>`` variable, passed to ``<...metric...>.update(...)`` or returned.

f-strings are expanded with what verl's own source says fills them: ``timing_s/{name}`` with
every ``marked_timer("<name>", ...)`` of the sync trainer, ``timing_per_token_ms/{name}`` with the
sections of ``compute_timing_metrics``' ``num_tokens_of_section`` and ``{prefix}/...`` with the
default ``logging_prefix`` of ``_balance_batch``. The trainer's renames (``output["perf/mfu/actor"]
= output.pop("actor/mfu")``) are read from ``_update_actor``.
"""

from __future__ import annotations

import ast
from functools import cache
from importlib.metadata import distribution
from pathlib import Path

TRAINER = "verl.trainer.ppo.v1.trainer_base"
SYNC_TRAINER = "verl.trainer.ppo.v1.trainer_sync"
METRIC_UTILS = "verl.trainer.ppo.metric_utils"

# (module, function or Class.method, prefix its caller adds)
SOURCES = (
    (METRIC_UTILS, "compute_data_metrics", ""),
    (METRIC_UTILS, "compute_timing_metrics", ""),
    (METRIC_UTILS, "compute_throughout_metrics", ""),
    (TRAINER, "PPOTrainer._compute_metrics", ""),  # training/global_step, training/epoch, ...
    (TRAINER, "PPOTrainer._compute_old_log_prob", ""),  # actor/entropy
    ("verl.utils.debug.metrics", "calculate_debug_metrics", ""),  # rollout vs actor probabilities
    ("verl.trainer.ppo.rollout_corr_helper", "compute_offpolicy_metrics", "rollout_corr/"),
    ("verl.utils.seqlen_balancing", "log_seqlen_unbalance", ""),  # the trainer's _balance_batch
    ("verl.workers.utils.losses", "ppo_loss", "actor/"),
    ("verl.trainer.ppo.core_algos", "compute_policy_loss_vanilla", "actor/"),
    ("verl.workers.engine_workers", "TrainingWorker._postprocess_output", "actor/"),
)


def module_file(module: str) -> Path:
    path = Path(distribution("verl").locate_file(module.replace(".", "/") + ".py"))
    if not path.is_file():
        raise AssertionError(f"the installed verl has no {module} ({path}); its layout changed")
    return path


@cache
def parse(module: str) -> ast.Module:
    return ast.parse(module_file(module).read_text(), filename=str(module_file(module)))


def function(module: str, qualname: str) -> ast.FunctionDef:
    scope: list[ast.stmt] = parse(module).body
    *classes, name = qualname.split(".")
    for cls in classes:
        scope = next(n for n in scope if isinstance(n, ast.ClassDef) and n.name == cls).body
    found = [n for n in scope if isinstance(n, ast.FunctionDef) and n.name == name]
    if not found:
        raise AssertionError(f"{module} has no {qualname}: verl's metric code moved")
    return found[0]


def timer_names() -> list[str]:
    """Every ``marked_timer("<name>", ...)`` of the synchronous trainer and its base."""
    return [
        node.args[0].value
        for module in (TRAINER, SYNC_TRAINER)
        for node in ast.walk(parse(module))
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", None) == "marked_timer"
        and isinstance(node.args[0], ast.Constant)
    ]


def token_sections() -> list[str]:
    """The sections ``compute_timing_metrics`` normalises per token (``num_tokens_of_section``)."""
    for node in ast.walk(function(METRIC_UTILS, "compute_timing_metrics")):
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "num_tokens_of_section":
            return [n.value for n in ast.walk(node.value) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    raise AssertionError("compute_timing_metrics has no num_tokens_of_section")


def balance_prefix() -> str:
    args = function(TRAINER, "PPOTrainer._balance_batch").args
    defaults = dict(zip([a.arg for a in args.args][-len(args.defaults) :], args.defaults))
    return defaults["logging_prefix"].value


def renames() -> dict[str, str]:
    """``output["<new>"] = output.pop("<old>")`` in the trainer's ``_update_actor``."""
    out = {}
    for node in ast.walk(function(TRAINER, "PPOTrainer._update_actor")):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.targets[0], ast.Subscript)
            and isinstance(node.value, ast.Call)
            and getattr(node.value.func, "attr", None) == "pop"
        ):
            out[node.value.args[0].value] = node.targets[0].slice.value
    return out


def _expand(node: ast.expr) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if not isinstance(node, ast.JoinedStr):
        return []  # a computed key (final_metrics[k]): not a name
    literal = [part.value for part in node.values if isinstance(part, ast.Constant)]
    holes = [part for part in node.values if isinstance(part, ast.FormattedValue)]
    fills = {"timing_s/": timer_names, "timing_per_token_ms/": token_sections, "/": lambda: [balance_prefix()]}
    lead = literal[0] if isinstance(node.values[0], ast.Constant) else "/"
    if len(holes) != 1 or lead not in fills:
        raise AssertionError(f"a templated metric name this test cannot expand: {ast.unparse(node)}")
    return [ast.unparse(node)[2:-1].replace("{" + ast.unparse(holes[0].value) + "}", v) for v in fills[lead]()]


def _is_metrics(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Name) and "metric" in node.id


def _dict_keys(node: ast.expr) -> list[str]:
    if isinstance(node, ast.DictComp):
        return _expand(node.key)
    if not isinstance(node, ast.Dict):
        return []
    out = []
    for key, value in zip(node.keys, node.values):
        out += _dict_keys(value) if key is None else _expand(key)
    return out


def names_in(fn: ast.FunctionDef) -> set[str]:
    names: list[str] = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign):
            target = node.targets[0]
            if isinstance(target, ast.Subscript) and _is_metrics(target.value):
                names += _expand(target.slice)
            elif _is_metrics(target):
                names += _dict_keys(node.value)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "update":
            if _is_metrics(node.func.value) and node.args:
                names += _dict_keys(node.args[0])
        elif isinstance(node, ast.Return) and node.value is not None:
            names += _dict_keys(node.value)
    return set(names)


def verl_step_metric_names() -> set[str]:
    """Every metric name ``SOURCES`` can emit, with its caller's prefix and the trainer's renames."""
    rename = renames()
    out = set()
    for module, qualname, prefix in SOURCES:
        for name in names_in(function(module, qualname)):
            full = name if name.startswith(prefix) else prefix + name
            out.add(rename.get(full, full))
    return out

"""From reward functions' outcomes to what a reward stage writes: per-row scores, ``reward_extra`` and metrics.

A row's score is the weighted sum of its functions' scores; failures add 0 and are logged once per kind.
Design notes: docs/design/reward.md.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from rlflow.sandbox.protocol import MAX_EXTRAS, Outcome

log = logging.getLogger(__name__)

RATE_METRICS = ("reward/error_rate", "reward/timeout_rate")


@dataclass(frozen=True)
class WeightedFunction:
    """A reward function as a stage uses it: its reference, weight and name (the prefix of its keys)."""

    reference: str
    weight: float
    name: str


@dataclass
class ScoredRows:
    scores: list[float]
    extras: list[dict[str, float]]
    metrics: dict[str, float]


def call_arguments(data_source: list[str], response_text: list[str], reward_info: list[Any]) -> list[dict]:
    """Each row's keyword arguments: ``data_source``, ``solution_str`` and ``reward_info``'s ground truth and extra info."""
    calls = []
    for row, (source, text, info) in enumerate(zip(data_source, response_text, reward_info, strict=True)):
        if not isinstance(info, dict) or "ground_truth" not in info or "extra_info" not in info:
            from rlflow.reward.function_calls import RewardFunctionError  # the sandbox: imported only to run

            keys = sorted(info) if isinstance(info, dict) else type(info).__name__
            raise RewardFunctionError(
                f"row {row}: reward_info has no 'ground_truth' and 'extra_info' (it holds {keys}); "
                "the data loader puts both in every row: check the data file's reward columns"
            )
        calls.append(
            {
                "data_source": source,
                "solution_str": text,
                "ground_truth": info["ground_truth"],
                "extra_info": info["extra_info"],
            }
        )
    return calls


def _warn_once(fn: WeightedFunction, row: int, source: str, outcome: Outcome, warned: set) -> None:
    key = (fn.reference, outcome.kind)
    if key in warned:
        return
    warned.add(key)
    log.warning(
        "reward function %s: %s on row %d (data_source %r): %s; the row scores 0 for this function "
        "(logged once per kind of failure)",
        fn.reference,
        outcome.kind,
        row,
        source,
        outcome.detail,
    )


def _cap_keys(fn: WeightedFunction, keys: list[str], column: list[Outcome], warned: set) -> None:
    left_out = max(len(keys) - MAX_EXTRAS, 0) + sum(o.dropped for o in column)
    if left_out and (fn.reference, "too many metrics") not in warned:
        warned.add((fn.reference, "too many metrics"))
        log.warning(
            "reward function %s returned more than %d extra numbers; %d were left out of reward_extra and the "
            "metrics (logged once)",
            fn.reference,
            MAX_EXTRAS,
            left_out,
        )


def _check_not_all_failed(fn: WeightedFunction, column: list[Outcome], sources: list[str], step: int) -> None:
    if not column or any(o.failure is None for o in column):
        return
    from rlflow.reward.function_calls import RewardFunctionError

    errors = sum(o.failure == "error" for o in column)
    first = column[0]
    raise RewardFunctionError(
        f"reward function {fn.reference!r} failed on all {len(column)} rows this worker scored at step {step} "
        f"({errors} errors, {len(column) - errors} timeouts); the first, on row 0 (data_source {sources[0]!r}): "
        f"{first.kind}: {first.detail} (fix the function, or raise timeout_s if it is only slow)"
    )


def combine(
    functions: list[WeightedFunction], outcomes: list[list[Outcome]], sources: list[str], warned: set, step: int
) -> ScoredRows:
    """Scores, ``reward_extra`` and metrics of rows whose ``outcomes[row][function]`` came from the runner."""
    rows = len(outcomes)
    scores = [sum(fn.weight * o.score for fn, o in zip(functions, row)) for row in outcomes]
    extras: list[dict[str, float]] = [{} for _ in range(rows)]
    for i, fn in enumerate(functions):
        column = [row[i] for row in outcomes]
        for row, outcome in enumerate(column):
            if outcome.failure is not None:
                _warn_once(fn, row, sources[row], outcome, warned)
        _check_not_all_failed(fn, column, sources, step)
        keys = sorted({k for o in column for k in o.extras})
        _cap_keys(fn, keys, column, warned)
        keys = keys[:MAX_EXTRAS]
        prefix = "" if len(functions) == 1 else f"{fn.name}/"
        for extra, outcome in zip(extras, column):
            if prefix:
                extra[f"{prefix}score"] = outcome.score
            for key in keys:
                extra[prefix + key] = outcome.extras.get(key, 0.0)
    metrics: dict[str, float] = {}
    if rows:
        for key in extras[0]:
            metrics[f"reward/{key}"] = sum(e[key] for e in extras) / rows
        for metric, failure in zip(RATE_METRICS, ("error", "timeout")):
            metrics[metric] = sum(any(o.failure == failure for o in row) for row in outcomes) / rows
    return ScoredRows(scores, extras, metrics)

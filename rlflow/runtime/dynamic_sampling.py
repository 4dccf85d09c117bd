"""DAPO's dynamic sampling (``algorithm.filter_groups``): generate and score until the batch is full.

The refill stages run through the step's stage runner; verl's V1 replay-buffer arithmetic decides how
many prompts each round draws. Design notes: docs/design/dynamic_sampling.md.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlflow.batch import Batch
from rlflow.errors import StageError
from rlflow.runtime import interrupts

LEFT_PADDED = ("prompts", "prompt_mask")  # the only fields whose width differs between generation batches
PREFIX = "training/filter_groups"
PROGRESS_EVERY_S = 30.0  # a step filling longer than this says so, and again each time as long
log = logging.getLogger("rlflow.runtime")


@dataclass(frozen=True)
class Refill:
    """What the refill reads: verl's ``algorithm.filter_groups`` block and the sizes around it."""

    groups: Any  # metric, max_num_gen_batches, max_inflight_gen_batches
    size: int  # train_batch_size: groups a step trains on
    pass_prompts: int  # prompts in one pass over the training set
    pad_id: int


def fill_batch(run: Callable[[Batch], Batch], draw: Callable[[int], Batch], refill: Refill, step: int) -> Batch:
    """The step's batch after its refill stages: ``refill.size`` groups whose metric varies, with metrics.

    ``draw(n)``: the next ``n`` prompts as a batch; ``run(batch)``: the refill stages (the step's stage
    runner) on it.
    """
    groups, size = refill.groups, refill.size
    limit = groups.max_num_gen_batches * size if groups.max_num_gen_batches > 0 else refill.pass_prompts
    kept: list[Batch] = []
    kept_groups = evicted = rounds = prompts = barren = 0  # barren: prompts drawn since a group was last kept
    credit = size  # the first round draws a batch, as verl's prepare_step does
    said = time.monotonic()
    while kept_groups < size:
        interrupts.raise_if_requested()
        if prompts >= limit:
            raise StageError(_exhausted(step, groups, prompts, kept_groups, size))
        if barren >= refill.pass_prompts:
            raise StageError(_barren(step, groups, prompts, kept_groups, size, barren))
        want = min(credit, groups.max_inflight_gen_batches * size, limit - prompts)
        credit -= want
        batch = draw(want)
        if rounds:  # the loader's uids name (step, row, index): keep each round's groups apart
            batch["uid"] = [f"{uid}/{rounds}" for uid in batch["uid"]]
        batch = run(batch)
        keep_rows, dropped = varying_groups(batch, groups.metric, step)
        kept.append(batch.index(keep_rows))
        new = len(set(batch["uid"])) - dropped
        kept_groups += new
        evicted += dropped
        credit += 2 * dropped  # verl's refill credit: two fresh prompts for each group dropped
        rounds, prompts = rounds + 1, prompts + want
        barren = 0 if new else barren + want
        if kept_groups < size and time.monotonic() - said >= PROGRESS_EVERY_S:
            said = time.monotonic()
            log.warning(_progress(step, groups, rounds, prompts, kept_groups, size, limit))
    batch, surplus = first_groups(concat(kept, refill.pad_id), size)
    batch.metrics.update(trained_row_means(batch))
    batch.metrics.update(
        {
            f"{PREFIX}/evicted_samples": float(evicted),
            f"{PREFIX}/discarded_surplus_samples": float(surplus),
            f"{PREFIX}/gen_rounds": float(rounds),
            "train/num_gen_batches": prompts / size,
        }
    )
    return batch


def trained_row_means(batch: Batch) -> dict[str, float]:
    """``reward/<key>`` over ``batch``'s rows, for each key the reward reported a mean of and every row carries.

    The reward stage reported them over each round's rows, the dropped groups included; the step
    trains on (and ``critic/score/*`` covers) the kept rows only.
    """
    if "reward_extra" not in batch or not len(batch):
        return {}
    extras = batch["reward_extra"]
    keys = set.intersection(*(set(extra) for extra in extras))
    return {
        f"reward/{key}": sum(float(extra[key]) for extra in extras) / len(extras)
        for key in sorted(keys)
        if f"reward/{key}" in batch.metrics
    }


def varying_groups(batch: Batch, metric: str, step: int) -> tuple[list[int], int]:
    """The rows of the groups whose ``metric`` varies (or that hold one sample), and how many groups were dropped."""
    import numpy as np

    values = metric_values(batch, metric, step)
    rows_of: dict[Any, list[int]] = {}
    for row, uid in enumerate(batch["uid"]):
        rows_of.setdefault(uid, []).append(row)
    keep: list[int] = []
    dropped = 0
    for rows in rows_of.values():
        if len(rows) > 1 and float(np.std([values[r] for r in rows])) == 0.0:
            dropped += 1
        else:
            keep += rows
    return sorted(keep), dropped


def metric_values(batch: Batch, metric: str, step: int) -> list[float]:
    """Each row's ``metric``: its score for ``reward``, else the reward's ``reward_extra`` value of that key."""
    if metric == "reward":
        return [float(v) for v in batch["scores"]]
    extras = batch["reward_extra"] if "reward_extra" in batch else [{} for _ in range(len(batch))]
    for row, extra in enumerate(extras):
        if metric not in extra:
            raise StageError(
                f"step {step}: algorithm.filter_groups.metric {metric!r} is not among what the reward returned for "
                f"row {row} ({sorted(extra) or 'nothing beyond the score'}); use reward (the score) or one of those keys"
            )
    return [float(extra[metric]) for extra in extras]


def first_groups(batch: Batch, size: int) -> tuple[Batch, int]:
    """The rows of the first ``size`` groups in batch order, and how many groups were left over."""
    order: dict[Any, int] = {}
    for uid in batch["uid"]:
        order.setdefault(uid, len(order))
    rows = [row for row, uid in enumerate(batch["uid"]) if order[uid] < size]
    return batch.index(rows), max(len(order) - size, 0)


def concat(batches: list[Batch], pad_id: int) -> Batch:
    """``Batch.concat`` of generation batches, their left-padded prompts first padded to one width."""
    batches = [b for b in batches if len(b)]
    width = max(b["prompts"].shape[-1] for b in batches)
    for b in batches:
        short = width - b["prompts"].shape[-1]
        if short:
            for field in LEFT_PADDED:
                fill = pad_id if field == "prompts" else 0
                pad = b[field].new_full((len(b), short), fill)
                b[field] = _cat_left(pad, b[field])
    return Batch.concat(batches)


def _cat_left(pad, value):
    import torch

    return torch.cat([pad, value], dim=-1)


def _exhausted(step: int, groups: Any, prompts: int, kept: int, size: int) -> str:
    bound = (
        f"max_num_gen_batches={groups.max_num_gen_batches}"
        if groups.max_num_gen_batches > 0
        else "one pass over the training set (max_num_gen_batches <= 0)"
    )
    return (
        f"step {step}: dynamic sampling generated {prompts / size:g} batches ({prompts} prompts) and only {kept} of "
        f"train_batch_size {size} groups had a varying {groups.metric!r}, within {bound}; raise "
        "algorithm.filter_groups.max_num_gen_batches, or check that the task is neither too easy nor too hard "
        "for the model"
    )


def _progress(step: int, groups: Any, rounds: int, prompts: int, kept: int, size: int, limit: int) -> str:
    return (
        f"step {step}: dynamic sampling is still filling the batch: {rounds} rounds, {prompts} prompts drawn, "
        f"{kept} of train_batch_size {size} groups kept (a group whose {groups.metric!r} is the same for every "
        f"sample is dropped); it draws at most {limit} prompts (max_num_gen_batches={groups.max_num_gen_batches})"
    )


def _barren(step: int, groups: Any, prompts: int, kept: int, size: int, barren: int) -> str:
    return (
        f"step {step}: dynamic sampling drew {barren} prompts, a whole pass over the training set, without one "
        f"group whose {groups.metric!r} varies ({kept} of train_batch_size {size} kept, {prompts} prompts drawn in "
        "all): the reward gives every sample of a prompt the same value (a constant reward?), or the task is far "
        "too easy or too hard for the model; check the reward function"
    )

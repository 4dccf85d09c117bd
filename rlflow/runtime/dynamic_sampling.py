"""DAPO's dynamic sampling (``algorithm.filter_groups``): generate and score until the batch is full.

The step's refill stages (``Plan.refill``: the rollout and the reward, in step order) run on
a generation batch of ``train_batch_size`` prompts drawn from the sampler; groups whose
``filter_groups.metric`` is the same for every sample (``reward``: the row's score; else a key
of the reward's ``reward_extra``) are dropped, as verl drops them (a group of one sample is
kept), and the stages run again on fresh prompts until ``train_batch_size`` groups are kept.
The first groups kept, in the order they were generated, make the batch; the surplus is
discarded. Design decisions:

- Bounds: rlflow honours ``max_num_gen_batches`` as verl's DAPO recipe trainer does (generation
  batches a step may take, the first included; the step fails with a clear error past it);
  verl's V1 trainer ignores it. ``0`` or less means one pass over the training set, so a task
  on which no group ever varies fails instead of hanging. ``max_inflight_gen_batches`` is how
  many generation batches one refill round generates together (verl's bound on what is in
  flight); a round asks for twice the groups still missing, as verl's refill credit does.
- Every prompt comes from the sampler in order, so the data position in a checkpoint counts
  every prompt drawn (the discarded ones included) and a resumed run draws what the
  uninterrupted run would have drawn.
- Metrics carry verl's replay-buffer names: ``training/filter_groups/evicted_samples`` (groups
  dropped; verl counts prompts there) and ``training/filter_groups/discarded_surplus_samples``,
  with verl's DAPO recipe's ``train/num_gen_batches`` and ``training/filter_groups/gen_rounds``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from rlflow.batch import Batch
from rlflow.errors import StageError
from rlflow.runtime import interrupts

if TYPE_CHECKING:  # pragma: no cover
    from rlflow.plan.model import Plan
    from rlflow.runtime.executor import Executor
    from rlflow.runtime.sinks import StepTimer

LEFT_PADDED = ("prompts", "prompt_mask")  # the only fields whose width differs between generation batches
PREFIX = "training/filter_groups"


def fill_batch(executor: Executor, plan: Plan, data: Any, spec: Any, step: int, timer: StepTimer) -> Batch:
    """The step's batch after its refill stages: ``train_batch_size`` groups whose metric varies, with metrics."""
    groups = spec.algorithm.filter_groups
    size = spec.trainer.train_batch_size
    stages = [plan.stage(name) for name in plan.refill]
    limit = groups.max_num_gen_batches if groups.max_num_gen_batches > 0 else data.sampler.steps_per_epoch
    kept: list[Batch] = []
    kept_groups = evicted = gen_batches = rounds = prompts = 0
    while kept_groups < size:
        interrupts.raise_if_requested()
        if gen_batches >= limit:
            raise StageError(_exhausted(step, groups, gen_batches, prompts, kept_groups, size))
        want = 1 if rounds == 0 else min(groups.max_inflight_gen_batches, math.ceil(2 * (size - kept_groups) / size))
        want = min(want, limit - gen_batches)
        indices = [i for _ in range(want) for i in data.sampler.next_indices()]
        batch = data.train.to_batch(indices, data.tokenizer.pad_token_id, step=step)
        if rounds:  # the loader's uids name (step, row, index): keep each round's groups apart
            batch["uid"] = [f"{uid}/{rounds}" for uid in batch["uid"]]
        for stage in stages:
            with timer.time(stage.verl_timer or stage.name):
                batch = executor.run_stage(stage, batch, step)
        keep_rows, dropped = varying_groups(batch, groups.metric, step)
        kept.append(batch.index(keep_rows))
        kept_groups += len(set(batch["uid"])) - dropped
        evicted += dropped
        gen_batches, rounds, prompts = gen_batches + want, rounds + 1, prompts + len(indices)
    batch, surplus = first_groups(concat(kept, data.tokenizer.pad_token_id), size)
    batch.metrics.update(
        {
            f"{PREFIX}/evicted_samples": float(evicted),
            f"{PREFIX}/discarded_surplus_samples": float(surplus),
            f"{PREFIX}/gen_rounds": float(rounds),
            "train/num_gen_batches": float(gen_batches),
        }
    )
    return batch


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


def _exhausted(step: int, groups: Any, gen_batches: int, prompts: int, kept: int, size: int) -> str:
    bound = (
        f"max_num_gen_batches={groups.max_num_gen_batches}"
        if groups.max_num_gen_batches > 0
        else "one pass over the training set (max_num_gen_batches <= 0)"
    )
    return (
        f"step {step}: dynamic sampling generated {gen_batches} batches ({prompts} prompts) and only {kept} of "
        f"train_batch_size {size} groups had a varying {groups.metric!r}, within {bound}; raise "
        "algorithm.filter_groups.max_num_gen_batches, or check that the task is neither too easy nor too hard "
        "for the model"
    )

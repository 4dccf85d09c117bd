"""Stage ``balance_batch``: verl's row order and metrics, shards of equal tokens, every column moved alike."""

from __future__ import annotations

import random

import pytest
import torch
from stage_helpers import make_pipeline

from rlflow.batch import Batch
from rlflow.stages.balance_batch import BalanceBatch, balanced_partitions
from rlflow.stages.base import StageContext


def pipeline_on(workers: int):
    base = make_pipeline()
    pool = base.resources["pool"].model_copy(update={"gpus_per_node": workers})
    return base.model_copy(update={"resources": {"pool": pool}})


def scored_batch(prompt_lens: list[int], response_lens: list[int], width: int = 16) -> Batch:
    """Left-padded prompt masks and right-padded response masks of the given lengths; each column names its row."""
    rows = len(prompt_lens)
    prompt_mask = (torch.arange(width).flip(0)[None] < torch.tensor(prompt_lens)[:, None]).long()
    response_mask = (torch.arange(width)[None] < torch.tensor(response_lens)[:, None]).long()
    return Batch(
        {
            "prompt_mask": prompt_mask,
            "response_mask": response_mask,
            "token_level_scores": torch.arange(rows, dtype=torch.float32)[:, None].expand(rows, width).clone(),
            "row": torch.arange(rows),
        },
        {"uid": [f"g{i // 4}" for i in range(rows)], "response_text": [f"row {i}" for i in range(rows)]},
        {"actor/entropy": 0.5},
    )


def balance(batch: Batch, workers: int) -> Batch:
    ctx = StageContext(pipeline=pipeline_on(workers), config=BalanceBatch.parse_config({}), stage_name="balance_batch")
    return BalanceBatch().run(batch, ctx)


def tokens(batch: Batch) -> list[int]:
    return (batch["prompt_mask"].sum(-1) + batch["response_mask"].sum(-1)).tolist()


# 16 rows, the long ones first: the contiguous split gives worker 0 far more tokens than worker 1.
SKEWED = ([12] * 8 + [3] * 8, [16, 15, 14, 13, 12, 11, 10, 9, 2, 1, 3, 2, 1, 4, 2, 1])


def test_two_workers_get_token_counts_within_one_row_of_each_other():
    batch = scored_batch(*SKEWED)
    out = balance(batch, 2)
    before = [sum(tokens(shard)) for shard in batch.split(2)]
    after = [sum(tokens(shard)) for shard in out.split(2)]
    assert sum(after) == sum(before) and before[0] - before[1] > 150
    # verl's tolerance: the largest-differencing partition leaves a spread below one row's tokens
    assert abs(after[0] - after[1]) <= max(tokens(batch))
    m = out.metrics
    assert (m["global_seqlen/min"], m["global_seqlen/max"]) == (min(before), max(before))
    assert (m["global_seqlen/balanced_min"], m["global_seqlen/balanced_max"]) == (min(after), max(after))
    assert m["global_seqlen/minmax_diff"] == max(before) - min(before)
    assert m["global_seqlen/mean"] == sum(before) / 2
    assert m["actor/entropy"] == 0.5, "the batch's metrics so far are kept"


def test_the_order_and_metrics_are_verls_own():
    """What verl's trainer does to the same token counts (its ``_balance_batch``, with dp 2)."""
    from verl.utils.seqlen_balancing import calculate_workload, get_seqlen_balanced_partitions, log_seqlen_unbalance

    batch = scored_batch(*SKEWED)
    seqlen = torch.tensor(tokens(batch), dtype=torch.int64)
    partitions = get_seqlen_balanced_partitions(calculate_workload(seqlen), k_partitions=2, equal_size=True)
    out = balance(batch, 2)
    assert out["row"].tolist() == [j for partition in partitions for j in partition]
    expected = log_seqlen_unbalance(seqlen_list=seqlen.tolist(), partitions=partitions, prefix="global_seqlen")
    assert {k: v for k, v in out.metrics.items() if k.startswith("global_seqlen/")} == expected


def test_every_column_moves_with_its_row():
    batch = scored_batch(*SKEWED)
    out = balance(batch, 2)
    order = out["row"].tolist()
    assert sorted(order) == list(range(len(batch))) and order != list(range(len(batch)))
    for position, row in enumerate(order):
        assert out["token_level_scores"][position, 0].item() == row
        assert out["response_text"][position] == f"row {row}" and out["uid"][position] == f"g{row // 4}"
        assert torch.equal(out["prompt_mask"][position], batch["prompt_mask"][row])
        assert torch.equal(out["response_mask"][position], batch["response_mask"][row])


def test_rows_that_do_not_divide_fill_the_executors_shards():
    """7 rows over 2 workers: the contiguous split gives 3 and 4 rows; the partitions have those sizes."""
    batch = scored_batch([10, 2, 9, 3, 8, 1, 7], [16, 1, 14, 2, 12, 3, 10])
    out = balance(batch, 2)
    assert sorted(out["row"].tolist()) == list(range(7))
    shards = out.split(2)
    assert [len(s) for s in shards] == [3, 4]
    sums = [sum(tokens(s)) for s in shards]
    assert abs(sums[0] - sums[1]) <= max(tokens(batch))
    assert out.metrics["global_seqlen/balanced_max"] == max(sums)


@pytest.mark.parametrize("workers", [2, 3, 4])
def test_random_batches_stay_within_one_row(workers):
    rng = random.Random(workers)
    for rows in range(workers, 40, 5):
        seqlens = [rng.randint(1, 300) for _ in range(rows)]
        partitions = balanced_partitions(seqlens, workers)
        assert sorted(i for p in partitions for i in p) == list(range(rows))
        assert [len(p) for p in partitions] == [(r + 1) * rows // workers - r * rows // workers for r in range(workers)]
        sums = [sum(seqlens[i] for i in p) for p in partitions]
        assert max(sums) - min(sums) <= max(seqlens), (rows, seqlens)

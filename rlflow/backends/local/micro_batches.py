"""How a batch is cut into mini-batches, and those into micro-batches: a fixed number of rows, or a token budget.

Mini-batches and the token-budget cut are verl 0.9.1's; a run of rows sharing a prompt is never split.
Design notes: docs/design/local_actor.md.
"""

from __future__ import annotations

import math

import torch

from rlflow.backends.local.generation import shared_prompt_starts
from rlflow.batch import Batch, response_span


def mini_batches(batch: Batch, total_rows: int, mini_batch_size: int, world_size: int = 1) -> list[Batch]:
    """This rank's shard of each mini-batch of ``mini_batch_size`` samples out of ``total_rows`` over all ranks.

    Every rank gets the same number of mini-batches (some maybe empty), so all join the same
    collectives; the last one keeps any rows past them (never the case with even shards).
    """
    count = max(1, math.ceil(total_rows / mini_batch_size))
    size = math.ceil(mini_batch_size / world_size)
    rows = len(batch)
    bounds = [min(i * size, rows) for i in range(count)] + [rows]
    return [batch.index(range(bounds[i], bounds[i + 1])) for i in range(count)]


def micro_batch_rows(
    batch: Batch,
    *,
    micro_batch_size: int | None,
    max_token_len: int | None = None,
    keep_groups: bool = True,
    min_count: int = 1,
) -> list[list[int]]:
    """Row indices of each micro-batch of ``batch`` (at least ``min_count`` lists, some maybe empty)."""
    rows = len(batch)
    if max_token_len is None:
        size = micro_batch_size or max(rows, 1)
        parts = [list(range(s, min(s + size, rows))) for s in range(0, rows, size)]
    else:
        seqlens = (
            (batch["prompt_mask"].sum(-1) + response_span(batch["response_mask"]).sum(-1)).tolist() if rows else []
        )
        units = _units(batch, seqlens, max_token_len) if keep_groups else [[i] for i in range(rows)]
        parts = token_budget_partitions(units, seqlens, max_token_len, min_count)
    return parts + [[] for _ in range(min_count - len(parts))]


def token_budget_partitions(
    units: list[list[int]], seqlens: list[int], max_token_len: int, min_count: int = 1
) -> list[list[int]]:
    """verl's balanced partition of ``units`` (lists of rows) into micro-batches of at most ``max_token_len`` tokens."""
    from verl.utils.seqlen_balancing import calculate_workload, ceildiv, get_seqlen_balanced_partitions

    if not units:
        return []
    tokens = [sum(seqlens[i] for i in unit) for unit in units]
    workloads = [int(calculate_workload(torch.tensor([seqlens[i] for i in unit])).sum()) for unit in units]
    count = min(len(units), max(min_count, ceildiv(sum(tokens), max_token_len)))
    while True:
        parts = get_seqlen_balanced_partitions(workloads, count, equal_size=False)
        if count == len(units) or all(sum(tokens[u] for u in part) <= max_token_len for part in parts):
            break
        count += 1
    rows = [sorted(i for u in part for i in units[u]) for part in parts]
    return sorted(rows, key=lambda part: part[0])


def _units(batch: Batch, seqlens: list[int], max_token_len: int) -> list[list[int]]:
    """Runs of neighbouring rows with one prompt (a run over the budget becomes single rows)."""
    starts = shared_prompt_starts(batch["prompts"], batch["prompt_mask"])
    if starts is None:
        return [[i] for i in range(len(batch))]
    units: list[list[int]] = []
    for i, start in enumerate(starts.tolist()):
        if start:
            units.append([])
        units[-1].append(i)
    out: list[list[int]] = []
    for unit in units:
        out.extend([unit] if sum(seqlens[i] for i in unit) <= max_token_len else [[i] for i in unit])
    return out

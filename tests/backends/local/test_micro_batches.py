"""Token-budget micro-batches: verl's partition within the budget, groups kept, and the same log-probs and
gradients as fixed-size micro-batches for every loss aggregation."""

from __future__ import annotations

import copy
import typing

import pytest
import torch
from local_helpers import make_pipeline
from test_local_actor import params_of, training_batch

from rlflow.backends.local.actor import Actor
from rlflow.backends.local.logprob import batch_log_probs
from rlflow.backends.local.micro_batches import micro_batch_rows, mini_batches
from rlflow.batch import Batch
from rlflow.schemas.pipeline import AlgorithmSpec

LOSS_AGG_MODES = typing.get_args(AlgorithmSpec.model_fields["loss_agg_mode"].annotation)


@pytest.fixture
def batch(sharp_model, prompt_batch, tokenizer):
    return training_batch(sharp_model, prompt_batch, tokenizer, n=3)


def tokens(batch):
    return (batch["prompt_mask"].sum(-1) + batch["response_mask"].sum(-1)).tolist()


@pytest.mark.parametrize("keep_groups", [True, False])
def test_every_row_once_within_the_budget_and_groups_together(batch, keep_groups):
    seqlens, budget = tokens(batch), 3 * max(tokens(batch))
    parts = micro_batch_rows(batch, micro_batch_size=None, max_token_len=budget, keep_groups=keep_groups)
    assert sorted(i for part in parts for i in part) == list(range(len(batch)))
    assert len(parts) > 1 and all(sum(seqlens[i] for i in part) <= budget for part in parts)
    if keep_groups:  # the 3 samples of a prompt share a micro-batch
        assert all({i // 3 for i in part} == {i // 3 for i in part if i % 3 == 0} for part in parts)
        assert all(len(part) % 3 == 0 for part in parts)


def test_a_row_over_the_budget_runs_alone_and_min_count_pads(batch):
    parts = micro_batch_rows(batch, micro_batch_size=None, max_token_len=1, min_count=len(batch) + 2)
    assert parts[: len(batch)] == [[i] for i in range(len(batch))] and parts[len(batch) :] == [[], []]
    assert micro_batch_rows(batch, micro_batch_size=4, max_token_len=None) == [[0, 1, 2, 3], [4, 5, 6, 7], [8]]


@pytest.mark.parametrize("packed", [False, True])
def test_token_budget_log_probs_equal_fixed_ones(sharp_model, batch, packed):
    fixed = batch_log_probs(sharp_model, batch, micro_batch_size=2, temperature=0.7, with_entropy=True)
    budget = batch_log_probs(
        sharp_model,
        batch,
        micro_batch_size=None,
        temperature=0.7,
        with_entropy=True,
        max_token_len=2 * max(tokens(batch)),
        packed=packed,
    )
    mask = batch["response_mask"].bool()
    for a, b in zip(fixed, budget):
        assert torch.allclose(a[mask], b[mask], atol=1e-4)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("packed", [False, True])
def test_token_budget_micro_batches_give_the_gradients_of_fixed_ones(sharp_model, batch, mode, packed):
    # SGD: the step is linear in the gradient, so equal steps are equal gradients
    results = []
    budget = 3 * max(tokens(batch))  # a group of 3 samples fits
    for trainer in (
        {"ppo_micro_batch_size_per_gpu": 2},
        {"use_dynamic_bsz": True, "ppo_max_token_len_per_gpu": budget},
    ):
        model = copy.deepcopy(sharp_model)
        pipeline = make_pipeline(
            algorithm={"n": 3, "loss_agg_mode": mode, "entropy_coeff": 0.01, "use_kl_loss": True},
            trainer={"ppo_mini_batch_size": 3, "optim": {"name": "sgd", "lr": 0.1}, **trainer},
            model={"use_remove_padding": packed},
        )
        actor = Actor(model, pipeline)
        if trainer.get("use_dynamic_bsz"):
            assert 1 < len(actor.micro_batch_rows(batch)) < len(batch)
        results.append((actor.update(batch), params_of(model)))
    (fixed, fixed_params), (dynamic, dynamic_params) = results
    for key in ("actor/pg_loss", "actor/kl_loss", "actor/entropy_loss", "actor/grad_norm"):
        assert dynamic[key] == pytest.approx(fixed[key], rel=1e-4, abs=1e-7), key
    assert all(torch.allclose(p, q, atol=1e-6) for p, q in zip(dynamic_params, fixed_params))


@pytest.mark.parametrize(
    "total, mini, world, sizes",
    [
        (12, 4, 1, [4, 4, 4]),
        (10, 4, 1, [4, 4, 2]),  # not a multiple: verl's shorter (padded) last mini-batch
        (2, 4, 1, [2]),
        (10, 4, 2, [2, 2, 1]),  # rank 0's shard of 5 rows
    ],
)
def test_mini_batches_are_consecutive_full_mini_batches_then_the_rest(total, mini, world, sizes):
    shard = Batch({"x": torch.arange(sizes and sum(sizes))})
    parts = mini_batches(shard, total, mini, world)
    assert [len(p) for p in parts] == sizes
    assert torch.equal(torch.cat([p["x"] for p in parts]), shard["x"])


def test_verls_1024_prompts_in_mini_batches_of_80():
    """verl's run_qwen3-1.7b.sh: train_batch_size 1024, ppo_mini_batch_size 80, n 5 on 8 workers."""
    total, mini, world = 1024 * 5, 80 * 5, 8
    parts = mini_batches(Batch({"x": torch.arange(total // world)}), total, mini, world)
    assert [len(p) for p in parts] == [50] * 12 + [40]  # 12 full mini-batches, the 64 prompts left

"""The actor update: equal to verl's loss applied by hand, split-invariant, and safe on bad input."""

from __future__ import annotations

import copy

import pytest
import torch
from local_helpers import make_pipeline

from rlflow.backends.local.actor import Actor, verl_actor_config
from rlflow.backends.local.generation import SamplingParams, sample
from rlflow.backends.local.logprob import batch_log_probs, forward_log_probs
from rlflow.batch import Batch
from rlflow.errors import BackendError, StageError


def training_batch(model, prompt_batch, tokenizer, *, n: int = 2, seed: int = 0) -> Batch:
    """Rollout rows with off-policy old log-probs, advantages and reference log-probs."""
    rows = prompt_batch.repeat_interleave(n)
    p = SamplingParams(
        max_new_tokens=8, eos_token_ids=(tokenizer.eos_token_id,), pad_token_id=tokenizer.pad_token_id, seed=seed
    )
    responses, mask = sample(model, rows["prompts"], rows["prompt_mask"], p)
    rows.update(Batch({"responses": responses, "response_mask": mask}))
    current, _ = batch_log_probs(model, rows, micro_batch_size=None, temperature=1.0, with_entropy=False)
    gen = torch.Generator().manual_seed(seed)
    rows["old_log_probs"] = current + 0.3 * torch.randn(current.shape, generator=gen)
    rows["ref_log_prob"] = current + 0.1 * torch.randn(current.shape, generator=gen)
    rows["advantages"] = torch.randn(len(rows), 1, generator=gen).expand_as(current) * mask
    return rows


def params_of(model) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def test_update_equals_verls_loss_applied_by_hand(sharp_model, prompt_batch, tokenizer):
    from verl.trainer.ppo import core_algos

    pipeline = make_pipeline(
        algorithm={"use_kl_loss": True, "kl_loss_coef": 0.05, "entropy_coeff": 0.01, "clip_ratio_high": 0.28},
        trainer={"ppo_mini_batch_size": 3, "grad_clip": 0.5},
    )
    batch = training_batch(sharp_model, prompt_batch, tokenizer)
    by_hand = copy.deepcopy(sharp_model).train()
    metrics = Actor(sharp_model, pipeline).update(batch, step=1)

    cfg, a = verl_actor_config(pipeline), pipeline.algorithm
    mask = batch["response_mask"].bool()
    lp, ent = forward_log_probs(
        by_hand, batch["prompts"], batch["prompt_mask"], batch["responses"], batch["response_mask"], with_entropy=True
    )
    pg, pg_metrics = core_algos.compute_policy_loss_vanilla(
        batch["old_log_probs"], lp, batch["advantages"], mask, "token-mean", config=cfg
    )
    kl = core_algos.agg_loss(core_algos.kl_penalty(lp, batch["ref_log_prob"], "low_var_kl"), mask, "token-mean")
    entropy = core_algos.agg_loss(ent, mask, "token-mean")
    (pg - a.entropy_coeff * entropy + a.kl_loss_coef * kl).backward()
    norm = torch.nn.utils.clip_grad_norm_(by_hand.parameters(), 0.5)
    opt = torch.optim.AdamW(by_hand.parameters(), lr=1e-3, betas=(0.9, 0.999), weight_decay=0.01)
    opt.step()

    assert metrics["actor/pg_loss"] == pytest.approx(pg.item(), rel=1e-5, abs=1e-7)
    assert metrics["actor/kl_loss"] == pytest.approx(kl.item(), rel=1e-5)
    assert metrics["actor/entropy_loss"] == pytest.approx(entropy.item(), rel=1e-5)
    for name in ("pg_clipfrac", "ppo_kl", "pg_clipfrac_lower"):
        assert metrics[f"actor/{name}"] == pytest.approx(pg_metrics[f"actor/{name}"], rel=1e-5, abs=1e-7)
    assert metrics["actor/pg_clipfrac"] > 0  # the off-policy batch exercises the clip
    assert metrics["actor/grad_norm"] == pytest.approx(norm.item(), rel=1e-5)
    assert metrics["actor/kl_coef"] == 0.05 and metrics["actor/lr"] == 1e-3
    for ours, theirs in zip(sharp_model.parameters(), by_hand.parameters()):
        assert torch.allclose(ours, theirs, atol=1e-6)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
def test_micro_batches_accumulate_to_the_whole_mini_batch(sharp_model, prompt_batch, tokenizer, mode):
    # SGD: the step is linear in the gradient (Adam's first step is ~sign(g) and amplifies rounding)
    batch = training_batch(sharp_model, prompt_batch, tokenizer)
    results = []
    for micro in (None, 1, 4):
        model = copy.deepcopy(sharp_model)
        trainer = {"ppo_mini_batch_size": 3, "ppo_micro_batch_size_per_gpu": micro, "optim": {"name": "sgd", "lr": 0.1}}
        pipeline = make_pipeline(algorithm={"loss_agg_mode": mode}, trainer=trainer)
        results.append((Actor(model, pipeline).update(batch), params_of(model)))
    (whole, whole_params), *others = results
    for metrics, params in others:
        assert metrics["actor/pg_loss"] == pytest.approx(whole["actor/pg_loss"], rel=1e-5, abs=1e-7)
        assert metrics["actor/grad_norm"] == pytest.approx(whole["actor/grad_norm"], rel=1e-4)
        assert all(torch.allclose(p, q, atol=1e-6) for p, q in zip(params, whole_params))


def test_mini_batches_and_epochs_set_the_number_of_optimizer_steps(sharp_model, prompt_batch, tokenizer):
    batch = training_batch(sharp_model, prompt_batch, tokenizer)  # 6 rows; a mini-batch is 1 prompt x 2 = 2 rows
    actor = Actor(sharp_model, make_pipeline(trainer={"ppo_mini_batch_size": 1, "ppo_epochs": 2}))
    actor.update(batch)
    steps = {int(s["step"]) for s in actor.optimizer.state_dict()["state"].values()}
    assert steps == {6}


def test_non_finite_loss_raises_before_any_step(sharp_model, prompt_batch, tokenizer):
    batch = training_batch(sharp_model, prompt_batch, tokenizer)
    advantages = batch["advantages"].clone()
    advantages[1, 0] = float("nan")
    batch["advantages"] = advantages
    before = params_of(sharp_model)
    actor = Actor(sharp_model, make_pipeline(trainer={"ppo_mini_batch_size": 3}))
    with pytest.raises(StageError, match=r"step 7, stage 'my_update'.*non-finite actor loss"):
        actor.update(batch, step=7, stage="my_update")
    assert all(torch.equal(p, q) for p, q in zip(before, params_of(sharp_model)))
    assert not actor.optimizer.state_dict()["state"]
    assert all(p.grad is None for p in sharp_model.parameters())


def test_rows_with_empty_response_masks_are_harmless(sharp_model, prompt_batch, tokenizer):
    batch = training_batch(sharp_model, prompt_batch, tokenizer)
    mask = batch["response_mask"].clone()
    mask[0] = 0
    batch["response_mask"] = mask
    metrics = Actor(
        sharp_model,
        make_pipeline(algorithm={"loss_agg_mode": "seq-mean-token-sum"}, trainer={"ppo_mini_batch_size": 3}),
    ).update(batch)
    assert all(torch.isfinite(torch.tensor(v)) for v in metrics.values())


def test_gradient_clipping_bounds_the_sgd_step(sharp_model, prompt_batch, tokenizer):
    batch = training_batch(sharp_model, prompt_batch, tokenizer)
    before = params_of(sharp_model)
    pipeline = make_pipeline(
        trainer={"ppo_mini_batch_size": 3, "grad_clip": 1e-3, "optim": {"name": "sgd", "lr": 1.0, "weight_decay": 0.0}}
    )
    metrics = Actor(sharp_model, pipeline).update(batch)
    delta = torch.sqrt(sum(((p - q) ** 2).sum() for p, q in zip(params_of(sharp_model), before)))
    assert metrics["actor/grad_norm"] > 1e-3
    assert delta.item() == pytest.approx(1e-3, rel=1e-3)


def test_warmup_then_constant_learning_rate(sharp_model, prompt_batch, tokenizer):
    batch = training_batch(sharp_model, prompt_batch, tokenizer)
    before = params_of(sharp_model)
    actor = Actor(
        sharp_model, make_pipeline(trainer={"ppo_mini_batch_size": 3, "optim": {"lr": 1e-3, "lr_warmup_steps": 2}})
    )
    lrs = [actor.update(batch)["actor/lr"] for _ in range(3)]
    assert lrs == [pytest.approx(5e-4), pytest.approx(1e-3), pytest.approx(1e-3)]
    assert not all(torch.equal(p, q) for p, q in zip(before, params_of(sharp_model)))


def test_cosine_schedule_needs_the_number_of_steps(sharp_model):
    cosine = {"optim": {"lr": 1e-3, "lr_scheduler": "cosine", "min_lr_ratio": 0.1}}
    with pytest.raises(BackendError, match="total_steps"):
        Actor(sharp_model, make_pipeline(trainer=cosine))
    actor = Actor(sharp_model, make_pipeline(trainer={**cosine, "total_steps": 4}))
    lrs = []
    for _ in range(4):
        actor.optimizer.step()  # no gradients: a no-op that keeps the scheduler's order check quiet
        actor.scheduler.step()
        lrs.append(actor.scheduler.get_last_lr()[0])
    assert lrs[-1] == pytest.approx(1e-4) and lrs == sorted(lrs, reverse=True)


def test_kl_loss_without_reference_log_probs_is_named(sharp_model, prompt_batch, tokenizer):
    batch = training_batch(sharp_model, prompt_batch, tokenizer)
    del batch.tensors["ref_log_prob"]
    with pytest.raises(BackendError, match="ref_log_prob"):
        Actor(sharp_model, make_pipeline(algorithm={"use_kl_loss": True})).update(batch, step=2)


def test_update_reports_verls_mfu_and_memory(sharp_model, prompt_batch, tokenizer):
    batch = training_batch(sharp_model, prompt_batch, tokenizer)
    metrics = Actor(sharp_model, make_pipeline(trainer={"ppo_mini_batch_size": 1})).update(batch)
    assert 0 < metrics["perf/mfu/actor"] < 1  # a nominal 448 GFLOPS CPU peak: busy, but never above it
    assert metrics["actor/perf/max_memory_allocated_gb"] == 0.0 and metrics["actor/perf/cpu_memory_used_gb"] > 0


def verl_padded(batch: Batch, rows: int) -> Batch:
    """``batch`` with ``rows`` more rows as verl 0.9.1's ``upsample_batch_to_divisible_size`` adds them:
    copies of a real row whose loss mask is empty (no tokens, no reward, no advantage)."""
    pad = batch.index([0] * rows)
    for key in ("response_mask", "advantages"):
        pad[key] = torch.zeros_like(pad[key])
    return Batch.concat([batch, pad])


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_a_batch_not_a_multiple_of_the_mini_batch_updates_as_verls_padded_batch(
    sharp_model, prompt_batch, tokenizer, mode
):
    """verl's run_qwen3-1.7b.sh case (1024 prompts, mini-batches of 80) in small: 3 prompts, mini-batches of 2.

    verl pads the batch to a multiple of the mini-batch with no-op samples; rlflow's shorter last
    mini-batch must give the same steps (SGD: the step is linear in the gradient).
    """
    batch = training_batch(sharp_model, prompt_batch, tokenizer)  # 3 prompts x n 2 = 6 rows
    pipeline = make_pipeline(
        algorithm={"loss_agg_mode": mode}, trainer={"ppo_mini_batch_size": 2, "optim": {"name": "sgd", "lr": 0.1}}
    )
    ours, padded = copy.deepcopy(sharp_model), copy.deepcopy(sharp_model)
    mine = Actor(ours, pipeline).update(batch)
    theirs = Actor(padded, pipeline).update(verl_padded(batch, 2))  # 8 rows: two full mini-batches
    assert mine["actor/pg_loss"] == pytest.approx(theirs["actor/pg_loss"], rel=1e-5, abs=1e-7)
    assert mine["actor/grad_norm"] == pytest.approx(theirs["actor/grad_norm"], rel=1e-4)
    assert all(torch.allclose(p, q, atol=1e-6) for p, q in zip(params_of(ours), params_of(padded)))
    steps = Actor(copy.deepcopy(sharp_model), make_pipeline(trainer={"ppo_mini_batch_size": 2}))
    steps.update(batch)
    assert {int(s["step"]) for s in steps.optimizer.state_dict()["state"].values()} == {2}  # 4 rows, then 2

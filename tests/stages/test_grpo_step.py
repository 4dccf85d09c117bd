"""A whole GRPO step in-process (no Ray), twice, deterministic across two runs with the same seed.

generate -> reward (a rule on the response text) -> old_log_prob -> ref_log_prob -> advantage
-> update_actor -> sync_weights, in verl's order, on the built-in tiny model on the CPU.
"""

from __future__ import annotations

import math

import torch
from stage_helpers import data_batch, make_pipeline, run_stage, text_reward

from rlflow.metrics import compute_data_metrics, compute_rollout_metrics, compute_timing_metrics

ORDER = ("generate", "old_log_prob", "ref_log_prob", "advantage", "update_actor", "sync_weights")
VARYING = ("perf/mfu/", "actor/perf/")


def train(seed_steps: int = 2) -> tuple[list[dict], list[torch.Tensor]]:
    from rlflow.backends.local.local_engine import LocalEngine

    pipeline = make_pipeline(
        algorithm={"use_kl_loss": True, "kl_loss_coef": 0.01},
        with_ref=True,
        trainer={"ppo_mini_batch_size": 1, "optim": {"lr": 5e-3}},
    )
    engine = LocalEngine(pipeline)
    history = []
    for step in range(1, seed_steps + 1):
        batch = data_batch(engine.tokenizer, step)
        for name in ORDER:
            out = run_stage(pipeline, engine, name, batch, step)
            batch = out if name == "generate" else batch.update(out)
            if name == "generate":
                batch.update(text_reward(batch))
        metrics = {**batch.metrics, **compute_data_metrics(batch), **compute_rollout_metrics(batch)}
        metrics.update(compute_timing_metrics({"gen": 1.0, "update_actor": 1.0, "step": 2.0}, batch))
        # wall-clock and memory readings vary from run to run
        metrics = {k: v for k, v in metrics.items() if "seconds" not in k and not k.startswith(VARYING)}
        history.append(metrics)
    return history, [p.detach().clone() for p in engine.model.parameters()]


def test_two_grpo_steps_are_deterministic_and_fully_reported():
    first, first_params = train()
    second, second_params = train()
    assert first == second  # bit for bit, step after step
    assert all(torch.equal(a, b) for a, b in zip(first_params, second_params))
    step1, step2 = first
    for name in (
        "actor/pg_loss",
        "actor/pg_clipfrac",
        "actor/pg_clipfrac_lower",
        "actor/ppo_kl",
        "actor/entropy",
        "actor/kl_loss",
        "actor/kl_coef",
        "actor/grad_norm",
        "actor/lr",
        "sync/bytes",
        "critic/score/mean",
        "critic/rewards/mean",
        "critic/advantages/max",
        "critic/returns/min",
        "response_length/mean",
        "response_length/clip_ratio",
        "prompt_length/max",
        "timing_per_token_ms/gen",
        "perf/throughput",
        "perf/total_num_tokens",
        "training/rollout_probs_diff_max",
        "rollout_corr/k3_kl",
    ):
        assert name in step1 and math.isfinite(step1[name]), name
    assert step2["actor/kl_loss"] > 0  # the policy has moved away from the reference
    assert step1["rollout/policy_version"] == 0.0 and step2["rollout/policy_version"] == 1.0

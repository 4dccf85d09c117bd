"""Stages ``old_log_prob`` and ``ref_log_prob``: fields, verl's entropy metric, rollout temperature."""

from __future__ import annotations

import pytest
import torch
from stage_helpers import data_batch, make_pipeline, run_stage

from rlflow.backends.local.logprob import batch_log_probs
from rlflow.plan.compile import rollout_sampling
from rlflow.stages.base import logprob_temperature


@pytest.fixture(scope="module")
def rollout(engine):
    pipeline = make_pipeline(algorithm={"use_kl_loss": True}, with_ref=True)
    return run_stage(pipeline, engine, "generate", data_batch(engine.tokenizer))


def test_old_log_prob_writes_log_probs_entropy_and_verls_entropy_metric(engine, rollout):
    from verl.trainer.ppo.core_algos import agg_loss

    pipeline = make_pipeline(algorithm={"use_kl_loss": True, "loss_agg_mode": "seq-mean-token-mean"}, with_ref=True)
    out = run_stage(pipeline, engine, "old_log_prob", rollout)
    assert set(out.keys()) == {"old_log_probs", "entropys"}
    assert out["old_log_probs"].shape == rollout["responses"].shape
    mask = rollout["response_mask"].bool()
    assert (out["old_log_probs"][mask] <= 0).all() and (out["entropys"][mask] > 0).all()
    expected = agg_loss(out["entropys"], mask, "seq-mean-token-mean").item()
    assert out.metrics["actor/entropy"] == pytest.approx(expected)


def test_reference_equals_the_actor_before_any_update(engine, rollout):
    pipeline = make_pipeline(algorithm={"use_kl_loss": True}, with_ref=True)
    old = run_stage(pipeline, engine, "old_log_prob", rollout)["old_log_probs"]
    ref = run_stage(pipeline, engine, "ref_log_prob", rollout)
    assert set(ref.keys()) == {"ref_log_prob"} and torch.equal(ref["ref_log_prob"], old)


def test_log_probs_use_the_rollout_temperature(engine, rollout):
    pipeline = make_pipeline(generate={"temperature": 0.6})
    assert logprob_temperature(rollout_sampling(pipeline)) == 0.6
    assert logprob_temperature(rollout_sampling(make_pipeline(generate={"temperature": 0.0}))) == 1.0  # greedy
    out = run_stage(pipeline, engine, "old_log_prob", rollout)["old_log_probs"]
    direct, _ = batch_log_probs(engine.model, rollout, micro_batch_size=None, temperature=0.6, with_entropy=False)
    assert torch.equal(out, direct)

"""Stage ``update_actor``: verl's metric names, critic warm-up, and bad input named by step and stage."""

from __future__ import annotations

import pytest
import torch
from stage_helpers import data_batch, make_pipeline, run_stage, text_reward

from rlflow.errors import StageError

ACTOR_METRICS = {
    "actor/pg_loss",
    "actor/pg_clipfrac",
    "actor/pg_clipfrac_lower",
    "actor/ppo_kl",
    "actor/kl_loss",
    "actor/kl_coef",
    "actor/grad_norm",
    "actor/lr",
    "actor/loss",
}


def prepared(pipeline, engine, step: int = 1):
    batch = run_stage(pipeline, engine, "generate", data_batch(engine.tokenizer, step), step)
    batch.update(text_reward(batch))
    for name in ("old_log_prob", "ref_log_prob", "advantage"):
        if pipeline.stage(name) is not None:
            batch.update(run_stage(pipeline, engine, name, batch, step))
    return batch


def test_update_reports_verls_actor_metrics_and_changes_the_policy():
    from rlflow.backends.local.local_engine import LocalEngine

    pipeline = make_pipeline(algorithm={"use_kl_loss": True}, with_ref=True)
    engine = LocalEngine(pipeline)
    batch = prepared(pipeline, engine)
    before = [p.detach().clone() for p in engine.model.parameters()]
    out = run_stage(pipeline, engine, "update_actor", batch)
    assert len(out) == 0 and ACTOR_METRICS <= set(out.metrics)
    assert all(isinstance(v, float) and v == v for v in out.metrics.values())
    assert out.metrics["actor/ppo_kl"] == pytest.approx(0.0, abs=1e-5)  # one mini-batch: on-policy
    assert not all(torch.equal(a, b) for a, b in zip(before, engine.model.parameters()))


def test_no_update_during_critic_warmup():
    from rlflow.backends.local.local_engine import LocalEngine

    pipeline = make_pipeline(trainer={"critic_warmup": 2})
    engine = LocalEngine(pipeline)
    batch = prepared(pipeline, engine)
    before = [p.detach().clone() for p in engine.model.parameters()]
    assert run_stage(pipeline, engine, "update_actor", batch, step=1).metrics == {}
    assert all(torch.equal(a, b) for a, b in zip(before, engine.model.parameters()))
    assert "actor/pg_loss" in run_stage(pipeline, engine, "update_actor", batch, step=2).metrics


def test_nan_advantages_fail_the_step_by_name():
    from rlflow.backends.local.local_engine import LocalEngine

    pipeline = make_pipeline()
    engine = LocalEngine(pipeline)
    batch = prepared(pipeline, engine, step=5)
    batch["advantages"] = torch.full_like(batch["advantages"], float("inf"))
    with pytest.raises(StageError, match=r"step 5, stage 'update_actor': non-finite actor loss"):
        run_stage(pipeline, engine, "update_actor", batch, step=5)


def test_an_update_moves_probability_towards_positive_advantages():
    from rlflow.backends.local.local_engine import LocalEngine

    pipeline = make_pipeline(algorithm={"n": 4}, trainer={"optim": {"lr": 1e-2}})
    engine = LocalEngine(pipeline)
    batch = prepared(pipeline, engine)
    assert batch["advantages"].abs().sum() > 0
    run_stage(pipeline, engine, "update_actor", batch)
    new = run_stage(pipeline, engine, "old_log_prob", batch)["old_log_probs"]
    gain = ((new - batch["old_log_probs"]) * batch["response_mask"] * batch["advantages"]).sum()
    assert gain > 0

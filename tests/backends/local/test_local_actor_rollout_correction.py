"""The actor update under ``algorithm.rollout_correction``: equal to verl's losses applied by hand.

Decoupled mode: verl's vanilla loss with the importance weights multiplied in and the rejection
mask as the loss mask. Bypass mode, as verl's V1 trainer runs it: the configured ``loss_mode``
against the rollout's log-probs, nothing corrected. ``loss_mode: bypass_mode`` (verl's legacy
trainer's loss): PPO clip or REINFORCE against the rollout, correcting inside, with its
``rollout_corr/*`` metrics.
"""

from __future__ import annotations

import copy

import pytest
import torch
from local_helpers import make_pipeline
from test_local_actor import params_of, training_batch

from rlflow.backends.local.actor import Actor, loss_metric_names, verl_actor_config
from rlflow.backends.local.logprob import forward_log_probs


def by_hand(model, batch, loss_fn, old_field: str, mask, weights=None, cfg=None):
    """One AdamW step of verl's ``loss_fn`` over the whole batch as one mini-batch: (loss, metrics, model).

    The loss is normalised over the mini-batch's tokens in ``mask`` as verl's ``ppo_loss`` sets it
    (``global_batch_info``: the trainer's response mask, before any rejection inside the loss).
    """
    cfg.global_batch_info.update(
        dp_size=1, batch_num_tokens=float(mask.sum()), global_batch_size=float(len(batch)), loss_scale_factor=None
    )
    model = copy.deepcopy(model).train()
    lp, _ = forward_log_probs(
        model, batch["prompts"], batch["prompt_mask"], batch["responses"], batch["response_mask"], with_entropy=False
    )
    pg, metrics = loss_fn(batch[old_field], lp, batch["advantages"], mask, "token-mean", weights)
    pg.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), weight_decay=0.01).step()
    return pg, metrics, model


def test_decoupled_weights_and_rejection_enter_the_loss_as_in_verl(sharp_model, prompt_batch, tokenizer):
    from verl.trainer.ppo import core_algos

    pipeline = make_pipeline(
        algorithm={"rollout_correction": {"rollout_is": "token", "rollout_rs": "token_k2", "rollout_rs_threshold": 1}},
        trainer={"ppo_mini_batch_size": 3},
    )
    batch = training_batch(sharp_model, prompt_batch, tokenizer)
    gen = torch.Generator().manual_seed(3)
    batch["rollout_is_weights"] = torch.rand(batch["response_mask"].shape, generator=gen) * 2 * batch["response_mask"]
    rs_mask = batch["response_mask"].clone()
    rs_mask[0] = 0  # one sequence rejected
    batch["rollout_rs_mask"] = rs_mask
    cfg = verl_actor_config(pipeline)
    assert cfg.policy_loss.loss_mode == "vanilla" and loss_metric_names(cfg) == ()

    def vanilla(old, lp, adv, mask, mode, weights):
        return core_algos.compute_policy_loss_vanilla(old, lp, adv, mask, mode, cfg, rollout_is_weights=weights)

    pg, pg_metrics, expected = by_hand(
        sharp_model, batch, vanilla, "old_log_probs", rs_mask.bool(), batch["rollout_is_weights"], cfg
    )
    metrics = Actor(sharp_model, pipeline).update(batch, step=1)
    assert metrics["actor/pg_loss"] == pytest.approx(pg.item(), rel=1e-5, abs=1e-7)
    assert metrics["actor/ppo_kl"] == pytest.approx(pg_metrics["actor/ppo_kl"], rel=1e-5, abs=1e-7)
    assert all(torch.allclose(p, q, atol=1e-6) for p, q in zip(params_of(sharp_model), params_of(expected)))

    plain = training_batch(sharp_model, prompt_batch, tokenizer)  # without weights: another loss
    assert Actor(copy.deepcopy(sharp_model), pipeline).update(plain)["actor/pg_loss"] != pytest.approx(pg.item())


@pytest.mark.parametrize("loss_mode", ["gspo", "vanilla"])
def test_bypass_mode_keeps_the_configured_loss_against_the_rollout(sharp_model, prompt_batch, tokenizer, loss_mode):
    """verl's V1 trainer copies rollout_log_probs to old_log_probs and its ppo_loss calls ``loss_mode``'s loss."""
    from verl.trainer.ppo import core_algos

    section = {"bypass_mode": True}
    pipeline = make_pipeline(
        algorithm={"loss_mode": loss_mode, "rollout_correction": section}, trainer={"ppo_mini_batch_size": 3}
    )
    batch = training_batch(sharp_model, prompt_batch, tokenizer)
    batch["rollout_log_probs"] = batch.tensors.pop("old_log_probs") - 0.05  # a behaviour policy apart from the actor
    cfg = verl_actor_config(pipeline)
    assert cfg.policy_loss.loss_mode == loss_mode

    def configured(old, lp, adv, mask, mode, weights):
        return core_algos.get_policy_loss_fn(loss_mode)(old, lp, adv, mask, mode, cfg, rollout_is_weights=None)

    mask = batch["response_mask"].bool()
    pg, pg_metrics, expected = by_hand(sharp_model, batch, configured, "rollout_log_probs", mask, cfg=cfg)
    metrics = Actor(sharp_model, pipeline).update(batch, step=1)
    assert metrics["actor/pg_loss"] == pytest.approx(pg.item(), rel=1e-5, abs=1e-7)
    assert metrics["actor/ppo_kl"] == pytest.approx(pg_metrics["actor/ppo_kl"], rel=1e-5, abs=1e-7)
    assert not any(k.startswith("rollout_corr/") for k in metrics), "V1 corrects nothing in bypass mode"
    assert all(torch.allclose(p, q, atol=1e-6) for p, q in zip(params_of(sharp_model), params_of(expected)))


@pytest.mark.parametrize(
    "section",
    [
        {"bypass_mode": True, "rollout_rs": "seq_mean_k3", "rollout_rs_threshold": 0.05},
        {"bypass_mode": True, "loss_type": "reinforce", "rollout_is": "sequence", "rollout_is_threshold": 1.5},
    ],
)
def test_loss_mode_bypass_mode_is_verls_legacy_bypass_loss(sharp_model, prompt_batch, tokenizer, section):
    from verl.trainer.ppo import core_algos

    pipeline = make_pipeline(
        algorithm={"loss_mode": "bypass_mode", "rollout_correction": section}, trainer={"ppo_mini_batch_size": 3}
    )
    batch = training_batch(sharp_model, prompt_batch, tokenizer)
    batch["rollout_log_probs"] = batch.tensors.pop("old_log_probs")  # the plan has no old_log_prob pass
    cfg = verl_actor_config(pipeline)
    assert cfg.policy_loss.loss_mode == "bypass_mode"

    def bypass(old, lp, adv, mask, mode, weights):
        return core_algos.compute_policy_loss_bypass_mode(old, lp, adv, mask, mode, cfg)

    mask = batch["response_mask"].bool()
    pg, pg_metrics, expected = by_hand(sharp_model, batch, bypass, "rollout_log_probs", mask, cfg=cfg)
    metrics = Actor(sharp_model, pipeline).update(batch, step=1)
    assert metrics["actor/pg_loss"] == pytest.approx(pg.item(), rel=1e-5, abs=1e-7)
    corr = {k: v for k, v in pg_metrics.items() if k.startswith("rollout_corr/")}
    assert corr and set(corr) == set(loss_metric_names(cfg))
    if "rollout_rs" in section:
        assert metrics["rollout_corr/rollout_rs_masked_fraction"] > 0, "the threshold rejects something"
    for name, value in corr.items():
        assert metrics[name] == pytest.approx(value, rel=1e-5, abs=1e-7), name
    assert all(torch.allclose(p, q, atol=1e-6) for p, q in zip(params_of(sharp_model), params_of(expected)))

"""Every policy loss rlflow accepts: the actor's update equals verl's registered loss applied by hand.

For each ``algorithm.loss_mode`` the actor updates a copy of the model on an off-policy batch,
and the same update is done by hand with ``core_algos.get_policy_loss_fn(mode)`` on the same
log-probs: the loss, the metrics verl's function reports (and no others) and the new weights agree.
"""

from __future__ import annotations

import copy

import pytest
import torch
from local_helpers import make_pipeline

from rlflow.backends.local.actor import AVERAGED, Actor, verl_actor_config
from rlflow.backends.local.generation import SamplingParams, sample
from rlflow.backends.local.logprob import batch_log_probs, forward_log_probs
from rlflow.batch import Batch
from rlflow.schemas.algorithms import LOSS_MODES, NEEDS

ACCEPTED = [mode for mode in LOSS_MODES if mode not in NEEDS]
SETTINGS = {  # knobs that make the loss do something on a batch this small
    "dro": {"dro_beta": 0.1},
    "clip_cov": {"clip_cov_ratio": 0.2, "clip_cov_lb": -5.0, "clip_cov_ub": 5.0},
    "kl_cov": {"kl_cov_ratio": 0.2, "ppo_kl_coef": 0.5},
    "sapo": {"tau_pos": 1.2, "tau_neg": 1.5},
    "dppo_tv": {"clip_ratio_c": 20.0},
    "dppo_kl": {"clip_ratio_c": 20.0},
}


def off_policy_batch(model, prompt_batch, tokenizer, seed: int) -> Batch:
    rows = prompt_batch.repeat_interleave(2)
    p = SamplingParams(
        max_new_tokens=8, eos_token_ids=(tokenizer.eos_token_id,), pad_token_id=tokenizer.pad_token_id, seed=seed
    )
    responses, mask = sample(model, rows["prompts"], rows["prompt_mask"], p)
    rows.update(Batch({"responses": responses, "response_mask": mask}))
    current, _ = batch_log_probs(model, rows, micro_batch_size=None, temperature=1.0, with_entropy=False)
    gen = torch.Generator().manual_seed(seed)
    rows["old_log_probs"] = current + 0.3 * torch.randn(current.shape, generator=gen)
    rows["advantages"] = torch.randn(len(rows), 1, generator=gen).expand_as(current) * mask
    return rows


@pytest.mark.parametrize("mode", ACCEPTED)
def test_update_equals_verls_registered_loss(mode, sharp_model, prompt_batch, tokenizer):
    from verl.trainer.ppo import core_algos

    algorithm = {"loss_mode": mode, "clip_ratio_high": 0.28, "loss_agg_mode": "token-mean", **SETTINGS.get(mode, {})}
    pipeline = make_pipeline(algorithm=algorithm, trainer={"ppo_mini_batch_size": 3})
    batch = off_policy_batch(sharp_model, prompt_batch, tokenizer, seed=3)
    by_hand = copy.deepcopy(sharp_model).train()
    torch.manual_seed(0)  # clip_cov picks its tokens with torch.randperm
    metrics = Actor(sharp_model, pipeline).update(batch, step=1)

    cfg = verl_actor_config(pipeline)
    mask = batch["response_mask"].bool()
    lp, _ = forward_log_probs(
        by_hand, batch["prompts"], batch["prompt_mask"], batch["responses"], batch["response_mask"]
    )
    torch.manual_seed(0)
    pg, pg_metrics = core_algos.get_policy_loss_fn(mode)(
        old_log_prob=batch["old_log_probs"], log_prob=lp, advantages=batch["advantages"], response_mask=mask,
        loss_agg_mode="token-mean", config=cfg,
    )  # fmt: skip
    pg.backward()
    torch.nn.utils.clip_grad_norm_(by_hand.parameters(), 1.0)
    torch.optim.AdamW(by_hand.parameters(), lr=1e-3, betas=(0.9, 0.999), weight_decay=0.01).step()

    assert metrics["actor/pg_loss"] == pytest.approx(pg.item(), rel=1e-5, abs=1e-7)
    assert {k for k in metrics if k in AVERAGED} == set(pg_metrics)  # verl's metrics for this loss, no others
    for name, value in pg_metrics.items():
        assert metrics[name] == pytest.approx(value, rel=1e-5, abs=1e-7)
    for ours, theirs in zip(sharp_model.parameters(), by_hand.parameters()):
        assert torch.allclose(ours, theirs, atol=1e-6)


def test_losses_differ_from_vanilla(sharp_model, prompt_batch, tokenizer):
    """A guard that loss_mode reaches the loss: gspo and cispo do not give vanilla's loss."""
    batch = off_policy_batch(sharp_model, prompt_batch, tokenizer, seed=3)
    losses = {}
    for mode in ("vanilla", "gspo", "cispo"):
        pipeline = make_pipeline(algorithm={"loss_mode": mode}, trainer={"ppo_mini_batch_size": 3})
        losses[mode] = Actor(copy.deepcopy(sharp_model), pipeline).update(batch, step=1)["actor/pg_loss"]
    assert len(set(losses.values())) == 3

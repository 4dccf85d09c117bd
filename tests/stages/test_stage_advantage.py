"""Stage ``grpo_advantage``: outputs EQUAL verl's own functions called on the same tensors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from stage_helpers import make_pipeline

from rlflow.batch import Batch
from rlflow.errors import StageError
from rlflow.stages.base import StageContext
from rlflow.stages.grpo_advantage import GrpoAdvantage


def scored_batch(seed: int = 0) -> Batch:
    gen = torch.Generator().manual_seed(seed)
    rows, width = 8, 6
    mask = (torch.arange(width)[None] < torch.tensor([6, 3, 1, 6, 4, 0, 2, 5])[:, None]).long()
    scores = torch.randint(0, 2, (rows,), generator=gen).float()
    token_scores = torch.zeros(rows, width)
    last = (mask.sum(-1) - 1).clamp(min=0)
    token_scores[torch.arange(rows), last] = scores
    old = -torch.rand(rows, width, generator=gen)
    ref = old + 0.2 * torch.randn(rows, width, generator=gen)
    uids = ["a", "a", "a", "b", "b", "b", "c", "d"]  # groups of 3, 3, and two singletons
    return Batch(
        {
            "token_level_scores": token_scores,
            "response_mask": mask,
            "old_log_probs": old,
            "ref_log_prob": ref,
            "scores": scores,
        },
        {"uid": uids},
    )


def run(batch: Batch, **algorithm) -> Batch:
    ctx = StageContext(
        pipeline=make_pipeline(algorithm=algorithm),
        config=GrpoAdvantage.parse_config({}),
        stage_name="advantage",
        step=1,
    )
    return GrpoAdvantage().run(batch, ctx)


@pytest.mark.parametrize("norm", [True, False])
def test_advantages_equal_verls_grpo(norm):
    from verl.trainer.ppo import core_algos

    batch = scored_batch()
    out = run(batch, norm_adv_by_std_in_grpo=norm)
    adv, ret = core_algos.compute_grpo_outcome_advantage(
        batch["token_level_scores"],
        batch["response_mask"],
        np.array(batch["uid"], dtype=object),
        epsilon=1e-6,
        norm_adv_by_std_in_grpo=norm,
    )
    assert torch.equal(out["advantages"], adv) and torch.equal(out["returns"], ret)
    assert torch.equal(out["token_level_rewards"], batch["token_level_scores"])
    # a group of one has mean 0 and std 1: it keeps its raw score on its response tokens
    singleton = batch["scores"][6] * batch["response_mask"][6]
    assert torch.allclose(out["advantages"][6], singleton, atol=1e-5)


def independent_kl(old: torch.Tensor, ref: torch.Tensor, kind: str) -> torch.Tensor:
    """The estimators as written in verl's docs (k1, k3, k2), computed here without verl."""
    d = old - ref
    if kind == "kl":
        return d
    if kind == "mse":
        return 0.5 * d * d
    x = torch.clamp(ref - old, -20, 20)
    return torch.clamp(torch.exp(x) - x - 1, -10, 10)


@pytest.mark.parametrize("kind", ["kl", "low_var_kl", "mse"])
def test_kl_in_reward_follows_verls_apply_kl_penalty(kind):
    from verl.trainer.ppo import core_algos

    batch = scored_batch(seed=3)
    out = run(batch, use_kl_in_reward=True, kl_coef=0.05, kl_penalty=kind)
    mask = batch["response_mask"].float()
    kld = independent_kl(batch["old_log_probs"], batch["ref_log_prob"], kind) * mask
    assert torch.allclose(out["token_level_rewards"], batch["token_level_scores"] - 0.05 * kld, atol=1e-7)
    per_row = (kld * mask).sum(-1) / (mask.sum(-1) + 1e-8)  # verl's masked_mean over each response
    assert out.metrics["actor/reward_kl_penalty"] == pytest.approx(per_row.mean().item(), rel=1e-6)
    assert out.metrics["actor/reward_kl_penalty_coeff"] == 0.05
    if kind == "kl":  # verl's compute_rewards is the same formula, unmasked
        expected = core_algos.compute_rewards(
            batch["token_level_scores"], batch["old_log_probs"], batch["ref_log_prob"], 0.05
        )
        assert torch.equal(out["token_level_rewards"][mask.bool()], expected[mask.bool()])
    adv, _ = core_algos.compute_grpo_outcome_advantage(
        out["token_level_rewards"], batch["response_mask"], np.array(batch["uid"], dtype=object)
    )
    assert torch.equal(out["advantages"], adv)


def with_values(batch: Batch, seed: int = 5) -> Batch:
    """``batch`` with a critic's ``values`` (random, zero past each response, as the critic writes them)."""
    gen = torch.Generator().manual_seed(seed)
    out = Batch(dict(batch.tensors), dict(batch.non_tensors))
    out["values"] = torch.randn(batch["response_mask"].shape, generator=gen) * batch["response_mask"]
    return out


@pytest.mark.parametrize(("gamma", "lam"), [(0.9, 0.8), (1.0, 0.95), (1.0, 1.0)])
def test_gae_equals_verls_compute_gae_advantage_return(gamma, lam):
    from verl.trainer.ppo import core_algos

    batch = with_values(scored_batch(seed=2))
    out = run(batch, adv_estimator="gae", gamma=gamma, lam=lam)
    adv, ret = core_algos.compute_gae_advantage_return(
        token_level_rewards=batch["token_level_scores"],
        values=batch["values"],
        response_mask=batch["response_mask"],
        gamma=gamma,
        lam=lam,
    )
    assert (out["advantages"] - adv).abs().max().item() == 0.0 and torch.equal(out["advantages"], adv)
    assert (out["returns"] - ret).abs().max().item() == 0.0 and torch.equal(out["returns"], ret)
    assert torch.equal(out["token_level_rewards"], batch["token_level_scores"])
    assert out["advantages"].abs().sum() > 0 and not torch.equal(out["returns"], out["advantages"])
    assert GrpoAdvantage.reads(make_pipeline(algorithm={"adv_estimator": "gae"}), None)[-1] == "values"


def test_gae_takes_the_kl_penalised_rewards():
    """``use_kl_in_reward``: GAE runs on the scores less ``kl_coef`` x KL(old, ref), as verl's apply_kl_penalty
    hands compute_advantage its token_level_rewards."""
    from verl.trainer.ppo import core_algos

    batch = with_values(scored_batch(seed=4))
    out = run(batch, adv_estimator="gae", gamma=0.9, lam=0.8, use_kl_in_reward=True, kl_coef=0.1, kl_penalty="kl")
    mask = batch["response_mask"]
    kld = core_algos.kl_penalty(batch["old_log_probs"], batch["ref_log_prob"], kl_penalty="kl") * mask
    rewards = batch["token_level_scores"] - 0.1 * kld
    assert torch.equal(out["token_level_rewards"], rewards) and not torch.equal(rewards, batch["token_level_scores"])
    adv, ret = core_algos.compute_gae_advantage_return(rewards, batch["values"], mask, gamma=0.9, lam=0.8)
    assert torch.equal(out["advantages"], adv) and torch.equal(out["returns"], ret)
    assert out.metrics["actor/reward_kl_penalty_coeff"] == 0.1


def test_missing_scores_are_named():
    batch = scored_batch()
    del batch.tensors["token_level_scores"]
    with pytest.raises(StageError, match=r"stage 'advantage'.*token_level_scores"):
        run(batch)

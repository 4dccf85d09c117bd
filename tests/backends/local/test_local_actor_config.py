"""verl's clip semantics: a pipeline written as for verl gets verl's policy loss on the same batch.

Each case builds verl's own actor config the way verl does (its generated trainer config plus the
same overrides on the command line, turned into a dataclass by ``omega_conf_to_dataclass``) and
rlflow's (``verl_actor_config`` of a pipeline with those settings), then runs both through
``core_algos.compute_policy_loss_vanilla`` on one random batch: the loss and its metrics must be
equal to the last bit. The batch is drawn so that ratios fall between the 0.2 and the 0.3 bounds,
which the ``differs`` assertions check (a batch that no bound clips would make every case pass).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from local_helpers import make_pipeline

from rlflow.backends.local.actor import verl_actor_config


@pytest.fixture(scope="module")
def verl_trainer_config():
    import verl
    from omegaconf import OmegaConf

    return OmegaConf.load(Path(verl.__file__).parent / "trainer" / "config" / "_generated_ppo_trainer.yaml")


def verl_config(trainer_config, **actor_overrides):
    """The ActorConfig verl builds from its defaults and ``actor_rollout_ref.actor.<key>=<value>`` overrides."""
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass

    dotlist = [
        "actor_rollout_ref.actor.strategy=fsdp",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.rollout.n=2",
        *(f"actor_rollout_ref.actor.{k}={'null' if v is None else v}" for k, v in actor_overrides.items()),
    ]
    merged = OmegaConf.merge(trainer_config, OmegaConf.from_dotlist(dotlist))
    return omega_conf_to_dataclass(merged.actor_rollout_ref.actor)


@pytest.fixture(scope="module")
def batch():
    """Ratios spread over exp(+-0.5): many rows beyond 1 +- 0.2, some beyond 1 +- 0.3; both signs of advantage."""
    gen = torch.Generator().manual_seed(0)
    old = -torch.rand(6, 10, generator=gen) * 3
    log_prob = old + (torch.rand(6, 10, generator=gen) - 0.5)
    advantages = torch.randn(6, 1, generator=gen).expand(6, 10).clone()
    mask = torch.ones(6, 10, dtype=torch.bool)
    mask[:, 7:] = False
    return old, log_prob, advantages, mask


def policy_loss(config, batch):
    from verl.trainer.ppo import core_algos

    old, log_prob, advantages, mask = batch
    loss, metrics = core_algos.compute_policy_loss_vanilla(
        old_log_prob=old,
        log_prob=log_prob,
        advantages=advantages,
        response_mask=mask,
        loss_agg_mode=config.loss_agg_mode,
        config=config,
    )
    return float(loss), {k: float(v) for k, v in metrics.items()}


def rlflow_config(**algorithm):
    return verl_actor_config(make_pipeline(algorithm=algorithm))


def test_clip_higher_equals_verl(verl_trainer_config, batch):
    """DAPO's clip-higher: clip_ratio_low 0.2, clip_ratio_high 0.28."""
    ours = policy_loss(rlflow_config(clip_ratio_low=0.2, clip_ratio_high=0.28), batch)
    theirs = policy_loss(verl_config(verl_trainer_config, clip_ratio_low=0.2, clip_ratio_high=0.28), batch)
    assert ours == theirs
    assert ours[0] != policy_loss(rlflow_config(), batch)[0]  # the upper bound clips some rows of this batch


def test_clip_ratio_alone_is_ignored_as_in_verl(verl_trainer_config, batch):
    """Only ``clip_ratio: 0.3``: both bounds keep their 0.2 defaults, in verl and in rlflow."""
    ours = policy_loss(rlflow_config(clip_ratio=0.3), batch)
    theirs = policy_loss(verl_config(verl_trainer_config, clip_ratio=0.3), batch)
    assert ours == theirs
    assert ours == policy_loss(rlflow_config(clip_ratio_low=0.2, clip_ratio_high=0.2), batch)
    differs = policy_loss(rlflow_config(clip_ratio_low=0.3, clip_ratio_high=0.3), batch)
    assert ours[0] != differs[0]


def test_null_bounds_fall_back_to_clip_ratio(verl_trainer_config, batch):
    nulls = {"clip_ratio": 0.3, "clip_ratio_low": None, "clip_ratio_high": None}
    ours = policy_loss(rlflow_config(**nulls), batch)
    theirs = policy_loss(verl_config(verl_trainer_config, **nulls), batch)
    assert ours == theirs
    assert ours == policy_loss(rlflow_config(clip_ratio_low=0.3, clip_ratio_high=0.3), batch)


def test_one_null_bound_falls_back_alone(verl_trainer_config, batch):
    mixed = {"clip_ratio": 0.3, "clip_ratio_low": None, "clip_ratio_high": 0.28}
    ours = policy_loss(rlflow_config(**mixed), batch)
    assert ours == policy_loss(verl_config(verl_trainer_config, **mixed), batch)
    assert ours == policy_loss(rlflow_config(clip_ratio_low=0.3, clip_ratio_high=0.28), batch)

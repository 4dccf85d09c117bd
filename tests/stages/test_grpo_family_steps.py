"""Every estimator and policy loss rlflow accepts trains two whole steps in-process (no Ray).

Each accepted estimator is paired with an accepted loss (the shorter list wraps), so every name
runs at least once: generate -> reward -> old_log_prob -> advantage -> update_actor ->
sync_weights (gae: with the critic's values and update), twice, on the built-in tiny model. The loss must be finite and the weights move.
"""

from __future__ import annotations

import math
from itertools import cycle

import pytest
import torch
from stage_helpers import data_batch, make_pipeline, run_stage, text_reward

from rlflow.schemas.algorithms import ADV_ESTIMATORS, LOSS_MODES, NEEDS

ESTIMATORS = [n for n in ADV_ESTIMATORS if n not in NEEDS]
LOSSES = [n for n in LOSS_MODES if n not in NEEDS]
PAIRS = list(zip(ESTIMATORS, LOSSES)) if len(ESTIMATORS) >= len(LOSSES) else list(zip(cycle(ESTIMATORS), LOSSES))
KNOBS = {"gdpo": {"gdpo_reward_keys": ["acc", "format_ok"]}, "dro": {"dro_beta": 0.1}}
ORDER = ("generate", "old_log_prob", "advantage", "update_actor", "sync_weights")


@pytest.mark.parametrize(("estimator", "loss"), PAIRS, ids=[f"{e}+{loss}" for e, loss in PAIRS])
def test_two_steps_train(estimator, loss):
    from rlflow.backends.local.local_engine import ALL_ROLES, LocalEngine

    algorithm = {"adv_estimator": estimator, "loss_mode": loss, **KNOBS.get(estimator, {}), **KNOBS.get(loss, {})}
    pipeline = make_pipeline(algorithm=algorithm, trainer={"ppo_mini_batch_size": 1, "optim": {"lr": 5e-3}})
    critic = estimator == "gae"  # PPO: the critic's values before the advantage, its update after
    order = ORDER[:2] + ("values", "advantage", "update_critic") + ORDER[3:] if critic else ORDER
    engine = LocalEngine(pipeline, roles=ALL_ROLES | {"critic"} if critic else ALL_ROLES)
    before = [p.detach().clone() for p in engine.model.parameters()]
    for step in (1, 2):
        batch = data_batch(engine.tokenizer, step)
        for name in order:
            out = run_stage(pipeline, engine, name, batch, step)
            batch = out if name == "generate" else batch.update(out)
            if name == "generate":
                batch.update(text_reward(batch))
        assert math.isfinite(batch.metrics["actor/pg_loss"]), (estimator, loss)
        if critic:
            assert math.isfinite(batch.metrics["critic/vf_loss"])
    assert any(not torch.equal(a, b) for a, b in zip(before, engine.model.parameters()))

"""The rollout contract: the plan resolves the rollout's sampling once, whichever kind the rollout is.

A plugin rollout kind (not ``generate``, its temperature under its own config model) gets its
temperature into the stages that score its samples (old_log_prob, update_actor), and validation
replaces its sampling through the kind, not by matching the names of another kind's keys.
"""

from __future__ import annotations

from typing import ClassVar

import pytest
from plan_helpers import spec_from_yaml
from pydantic import Field

from rlflow.batch import Batch
from rlflow.plan.compile import compile_plan, rollout_sampling
from rlflow.stages.base import StageConfig, StageContext, logprob_temperature
from rlflow.stages.generate import Generate
from rlflow.stages.old_log_prob import OldLogProb


class BeamishConfig(StageConfig):
    temperature: float = Field(0.7, ge=0)
    beams: int = 2


class Beamish(Generate):
    """A plugin rollout: its own name and config model, sampling at 0.7 unless told otherwise."""

    name = "test_beamish_rollout"
    config_model: ClassVar = BeamishConfig

    @classmethod
    def sampling(cls, pipeline, stage) -> dict:
        return {**super(Generate, cls).sampling(pipeline, stage), "n": pipeline.algorithm.n}


PIPELINE = """
name: plugin-rollout
data: {train: train.json, max_prompt_length: 32, max_response_length: 8}
resources: {pool: {type: local, device: cpu}, rewards: {type: cpu}}
stages:
  - {name: sample, uses: test_beamish_rollout, on: pool}
  - {name: reward, uses: text2sql_reward, on: rewards}
  - {name: old_log_prob, uses: old_log_prob, on: pool}
  - {name: advantage, uses: grpo_advantage, on: driver}
  - {name: update_actor, uses: update_actor, on: pool}
  - {name: sync_weights, uses: sync_weights, on: pool}
"""


@pytest.fixture(autouse=True)
def _plugin(register_kinds):
    register_kinds(Beamish)


def test_a_plugin_rollouts_temperature_reaches_the_log_prob_and_update_stages():
    spec = spec_from_yaml(PIPELINE)
    plan = compile_plan(spec)
    assert dict(rollout_sampling(spec)) == {"temperature": 0.7, "n": 8}
    for name in ("old_log_prob", "update_actor"):
        assert logprob_temperature(plan.stage(name).sampling) == 0.7, name
    assert dict(plan.stage("reward").sampling) == {}, "only the kinds that need it get it"


def test_the_log_prob_stage_asks_its_engine_at_the_plans_temperature():
    spec = spec_from_yaml(PIPELINE)
    seen = {}

    class Engine:  # records what the stage asks for; the engine itself is tested in tests/backends
        def compute_log_prob(self, batch, params):
            seen.update(params)
            raise StopIteration

    stage = compile_plan(spec).stage("old_log_prob")
    ctx = StageContext(
        spec, OldLogProb.parse_config({}), "old_log_prob", engine=Engine(), sampling=dict(stage.sampling)
    )
    try:
        OldLogProb().run(Batch(), ctx)
    except StopIteration:
        pass
    assert seen["temperature"] == 0.7


def test_validation_replaces_the_rollouts_sampling_through_its_kind():
    config = Beamish.with_sampling({"temperature": 0.7, "beams": 2}, {"temperature": 0.0, "top_p": 1.0, "n": 1})
    assert config == {"temperature": 0.0, "beams": 2}, "keys its config model lacks are not forced on it"

"""The JSON Schema of pipeline files accepts the shipped pipeline and catches what an editor should."""

from __future__ import annotations

import copy

import jsonschema
import pytest
from schema_helpers import BIRD, REPO

from rlflow.check import load_pipeline
from rlflow.check.json_schema import pipeline_json_schema
from rlflow.schemas.project import load_project_config

SCHEMA = pipeline_json_schema()
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
BIRD_DATA = load_pipeline(BIRD, project=load_project_config(REPO)).data
PPO_DATA = load_pipeline(REPO / "pipelines" / "ranking_ppo.yaml", project=load_project_config(REPO)).data


def test_schema_is_valid_and_accepts_the_shipped_pipeline():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert list(VALIDATOR.iter_errors(BIRD_DATA)) == []
    assert list(VALIDATOR.iter_errors(PPO_DATA)) == []  # its critic block and the critic's stage kinds


def test_the_critic_block_has_verls_names():
    critic = SCHEMA["$defs"]["CriticSpec"]
    assert SCHEMA["properties"]["critic"]["$ref"] == "#/$defs/CriticSpec"
    assert set(critic["properties"]) == {
        "enable", "model", "optim", "ppo_mini_batch_size", "ppo_micro_batch_size_per_gpu", "ppo_epochs",
        "cliprange_value", "loss_agg_mode", "grad_clip",
    }  # fmt: skip
    assert critic["additionalProperties"] is False
    assert SCHEMA["$defs"]["CriticOptimSpec"]["properties"]["lr"]["default"] == 1e-5
    assert "lam" in SCHEMA["$defs"]["AlgorithmSpec"]["properties"]


def _errors(mutate, data=BIRD_DATA) -> list[str]:
    data = copy.deepcopy(data)
    mutate(data)
    return [e.message for e in VALIDATOR.iter_errors(data)]


@pytest.mark.parametrize(
    "mutate, words",
    [
        (lambda d: d["trainer"].update(sedd=1), "'sedd' was unexpected"),
        (lambda d: d["stages"][0]["with"].update(temperatur=1), "'temperatur' was unexpected"),
        (lambda d: d["stages"][0]["with"].update(temperature=-1), "-1 is less than the minimum of 0"),
        (lambda d: d["resources"]["actor_pool"].update(type="lcoal"), "lcoal"),
        (lambda d: d.pop("stages"), "'stages' is a required property"),
    ],
)
def test_schema_catches_editor_level_mistakes(mutate, words):
    assert any(words in message for message in _errors(mutate)), _errors(mutate)


@pytest.mark.parametrize(
    "mutate, words",
    [
        (lambda d: d["critic"]["optim"].update(lrr=1), "'lrr' was unexpected"),
        (lambda d: d["critic"].update(cliprange_valu=0.2), "'cliprange_valu' was unexpected"),
        (lambda d: d["critic"].update(cliprange_value=0), "0 is less than or equal to the minimum of 0"),
        (lambda d: d["stages"][4].update({"with": {"micro_batch_sise": 8}}), "'micro_batch_sise' was unexpected"),
    ],
)
def test_schema_catches_mistakes_in_the_critic(mutate, words):
    assert any(words in message for message in _errors(mutate, PPO_DATA)), _errors(mutate, PPO_DATA)


def test_every_stage_kind_has_a_with_rule():
    from rlflow.stages import STAGE_KINDS

    stage = SCHEMA["$defs"]["StageSpec"]
    assert stage["properties"]["uses"]["examples"] == STAGE_KINDS.names()
    assert [rule["if"]["properties"]["uses"]["const"] for rule in stage["allOf"]] == STAGE_KINDS.names()


def test_a_file_with_a_base_states_only_what_differs():
    import yaml

    derived = yaml.safe_load((REPO / "pipelines" / "bird_grpo_remote.yaml").read_text())
    assert [e.message for e in VALIDATOR.iter_errors({k: v for k, v in derived.items() if k != "resources"})] == []
    assert any("'name' is a required property" in e.message for e in VALIDATOR.iter_errors({"data": {}}))
    assert any("was unexpected" in e.message for e in VALIDATOR.iter_errors({"base": "a.yaml", "bsae": 1}))

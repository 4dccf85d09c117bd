"""The critic's rules through ``load_pipeline``: each mistake is one line at its place with its fix (the corpus files
tests/schemas/broken/critic_*.yaml hold the cases; here: that nothing else is reported), and the shipped PPO
pipeline, colocated or not, validates."""

from __future__ import annotations

import pytest
from schema_helpers import BROKEN, MINIMAL, REPO, load_text, problems_of, read_case

from rlflow.check import load_pipeline
from rlflow.check.critic import fields_reported
from rlflow.errors import ConfigError
from rlflow.schemas.project import load_project_config

PPO = REPO / "pipelines" / "ranking_ppo.yaml"
CRITIC_STAGES = (
    "  - {name: values, uses: compute_values, on: pool}\n  - {name: update_critic, uses: update_critic, on: pool}\n"
)


def diagnostics_of(path, project_dir) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_pipeline(path, read_case(path)["set"], load_project_config(project_dir), check_paths=False)
    return [str(d) for d in info.value.diagnostics]


@pytest.mark.parametrize(
    "stem",
    [
        "critic_missing_stages",
        "critic_stage_without_gae",
        "critic_enable_false",
        "critic_separate_async",
        "critic_split_over_pools",
    ],
)
def test_each_critic_mistake_is_one_line(stem, project_dir):
    path = BROKEN / f"{stem}.yaml"
    [found] = diagnostics_of(path, project_dir)
    [(line, text)] = read_case(path)["expect"]
    assert f"{path}:{line}:" in found and text in found


def test_gae_without_the_critic_is_not_also_a_missing_field(project_dir):
    """The advantage reads ``values``: the data-flow rule would say so too, without naming the critic."""
    found = diagnostics_of(BROKEN / "critic_missing_stages.yaml", project_dir)
    assert not any("reads 'values'" in d for d in found)


def test_every_critic_mistake_at_once(project_dir):
    path = BROKEN / "critic_all_at_once.yaml"
    found = diagnostics_of(path, project_dir)
    assert len(found) == len(read_case(path)["expect"]) == 4, found


def test_critic_enable_without_gae_needs_the_stages_too(project_dir):
    text = MINIMAL + "critic: {enable: true}\n"
    (problem,) = problems_of(project_dir, text)
    assert problem.startswith("15:18: critic.enable: enable is true, so the step trains a critic, but no stage runs ")
    assert problem.endswith("(add {name: values, uses: compute_values, on: pool}, "
                            "{name: update_critic, uses: update_critic, on: pool})")  # fmt: skip


def test_critic_enable_trains_a_critic_beside_grpo(project_dir):
    """verl's rule: a critic trains whenever critic.enable is true; grpo's advantages just do not read it."""
    text = MINIMAL.replace("stages:\n", "critic: {enable: true}\nstages:\n") + CRITIC_STAGES
    spec = load_text(project_dir, text).spec
    assert spec.uses_critic and spec.algorithm.adv_estimator == "grpo"
    assert fields_reported(spec) == ()


def test_critic_stages_with_enable_false_and_grpo_say_how_to_keep_them(project_dir):
    text = MINIMAL.replace("stages:\n", "critic: {enable: false}\nstages:\n") + CRITIC_STAGES
    problems = problems_of(project_dir, text)
    assert len(problems) == 2
    assert all("(adv_estimator grpo, critic.enable false)" in p for p in problems)
    assert all(
        p.endswith("(remove the stage, or remove critic.enable: false and set algorithm.adv_estimator: gae)")
        for p in problems
    )


@pytest.mark.parametrize(
    "sets",
    [
        (),
        ("stages.4.on=actor_pool", "stages.6.on=actor_pool"),  # colocated: verl's hybrid engine
    ],
    ids=["own_pool", "colocated"],
)
def test_the_shipped_ppo_pipeline_validates(sets, monkeypatch):
    monkeypatch.chdir(REPO)
    spec = load_pipeline(PPO.relative_to(REPO), sets).spec
    assert spec.uses_critic and spec.algorithm.adv_estimator == "gae"
    pools = {s.on for s in spec.stages if s.uses in ("compute_values", "update_critic")}
    assert pools == ({"actor_pool"} if sets else {"critic_pool"})
    assert fields_reported(spec) == ()

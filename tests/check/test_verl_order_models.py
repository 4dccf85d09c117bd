"""The verl order check with models beside the policy: ``rm_score`` is the first part of verl's ``reward`` step
(compute_rm_score, before the rule reward), ``teacher_log_prob`` the teachers' part of ``gen`` (verl's agent loop
asks them right after each generation). The compiled order is accepted; a wrong one is named."""

from __future__ import annotations

from dataclasses import replace

import pytest
from schema_helpers import REPO, load_text, write_project

from rlflow.check.verl_order import compare_with_verl
from rlflow.check.verl_source import verl_root
from rlflow.plan.compile import compile_plan

pytestmark = pytest.mark.skipif(verl_root() is None, reason="verl is not installed")

MODELS = (
    'reward_model: {model_path: "builtin:tiny-rank-warm"}\n'
    'distillation: {enabled: true, teacher_models: {t: {model_path: "builtin:tiny-rank-warm"}}}\n'
)
STAGES = "  - {name: rm, uses: rm_score, on: actor_pool}\n  - {name: teacher, uses: teacher_log_prob, on: actor_pool}\n"


@pytest.fixture
def models(tmp_path, monkeypatch):
    """ranking_grpo with a reward model and a teacher on the actor's pool: (spec, plan)."""
    write_project(tmp_path, {"vars": {"rank_model_path": "builtin:tiny-rank-warm", "rank_root": "builtin:ranking"}})
    (tmp_path / "examples" / "ranking").mkdir(parents=True)
    (tmp_path / "examples" / "ranking" / "reward.py").write_text((REPO / "examples/ranking/reward.py").read_text())
    monkeypatch.chdir(tmp_path)
    text = (REPO / "pipelines" / "ranking_grpo.yaml").read_text().replace("stages:\n", MODELS + "stages:\n") + STAGES
    spec = load_text(tmp_path, text).spec
    return spec, compile_plan(spec)


def differences(spec, plan, step=None) -> list[str]:
    plan = plan if step is None else replace(plan, step=tuple(step))
    return list(compare_with_verl(spec, plan).differences)


def swapped(plan, a: str, b: str) -> list:
    step, names = list(plan.step), [e.name for e in plan.step]
    i, j = names.index(a), names.index(b)
    step[i], step[j] = step[j], step[i]
    return step


def test_the_compiled_order_runs_as_verl(models):
    spec, plan = models
    names = [e.name for e in plan.step]
    assert names.index("generate") < names.index("teacher") < names.index("old_log_prob")
    assert names.index("rm") < names.index("reward")
    assert differences(spec, plan) == []


def test_the_reward_model_after_the_rule_reward_is_named(models):
    spec, plan = models
    found = differences(spec, plan, swapped(plan, "rm", "reward"))
    assert any(
        d.startswith("verl runs `reward`'s reward-model scores (compute_rm_score, its first part) (trainer_base.py:")
        and d.endswith("before the rest of that work ('reward'); the plan runs 'reward' before 'rm'")
        for d in found
    ), found


def test_the_teachers_after_the_old_log_probs_are_named(models):
    spec, plan = models
    found = differences(spec, plan, swapped(plan, "teacher", "old_log_prob"))
    assert any(
        d.startswith("verl runs `gen`'s teacher log-probs") and "the plan runs 'old_log_prob' before 'teacher'" in d
        for d in found
    ), found


def test_teachers_and_reward_model_in_either_order(models):
    """verl fixes no order between them: a reward model on a pool of its own scores in the agent loop too."""
    spec, plan = models
    assert differences(spec, plan, swapped(plan, "rm", "teacher")) == []


def test_a_plan_without_the_teachers_verl_would_ask(models):
    spec, plan = models
    [found] = differences(spec, plan, [e for e in plan.step if e.name != "teacher"])
    assert found.endswith(
        "vs rlflow teacher_log_prob (not in the plan): under this pipeline's settings verl runs it, but the plan has "
        "no teacher_log_prob stage"
    )

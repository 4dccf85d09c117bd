"""`rlflow graph` names the models beside the policy on their pools: the reward model's path, the teachers'
names (given the pipeline the plan was compiled from); without it, the blocks' names as before."""

from __future__ import annotations

from plan_helpers import SMALL, spec_from_yaml

from rlflow.plan.compile import compile_plan
from rlflow.plan.render_dot import render_dot
from rlflow.plan.render_mermaid import render_mermaid
from rlflow.plan.render_text import models_text, render_text

MODELS = """
reward_model: {model_path: "builtin:tiny-rank-rm", enable_resource_pool: true}
distillation:
  enabled: true
  teacher_models:
    t1: {key: a, model_path: "builtin:tiny-rank-warm"}
    t2: {key: b, model_path: "builtin:tiny-rank-warm"}
"""
POOLS = "  rm_pool: {type: local, device: cpu}\n  teacher_pool: {type: local, device: cpu}\n"
STAGES = "  - {name: teacher, uses: teacher_log_prob, on: teacher_pool}\n  - {name: rm, uses: rm_score, on: rm_pool}\n"


def models_spec():
    text = SMALL.replace("resources:\n", MODELS + "resources:\n").replace("stages:\n", POOLS + "stages:\n") + STAGES
    return spec_from_yaml(text)


def test_each_pool_names_its_models():
    spec = models_spec()
    plan = compile_plan(spec)
    assert models_text(plan, "rm_pool", spec) == "models: reward_model (builtin:tiny-rank-rm)"
    assert models_text(plan, "teacher_pool", spec) == "models: distillation (teachers: t1, t2)"
    assert models_text(plan, "pool", spec) == "models: model"
    assert models_text(plan, "scorers", spec) == ""


def test_without_the_pipeline_the_blocks_names_as_before():
    plan = compile_plan(models_spec())
    assert models_text(plan, "rm_pool") == "models: reward_model"
    assert models_text(plan, "teacher_pool") == "models: distillation"


def test_every_renderer_shows_them():
    spec = models_spec()
    plan = compile_plan(spec)
    for render in (render_text, render_mermaid, render_dot):
        text = render(plan, spec)
        assert "reward_model (builtin:tiny-rank-rm)" in text and "distillation (teachers: t1, t2)" in text, render
        assert render(plan) == render(plan, None), "the pipeline is optional"

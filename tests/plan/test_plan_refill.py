"""DAPO's refill loop in the plan: the stages it repeats, and every rendering shows it."""

from __future__ import annotations

import json

from plan_helpers import SMALL, spec_from_yaml

from rlflow.plan.compile import compile_plan
from rlflow.plan.render_dot import render_dot
from rlflow.plan.render_json import render_json
from rlflow.plan.render_mermaid import render_mermaid
from rlflow.plan.render_text import render_text


def plan_of(algorithm: str = ""):
    text = SMALL.replace("name: small\n", f"name: small\nalgorithm: {{{algorithm}}}\n")
    return compile_plan(spec_from_yaml(text))


def test_dynamic_sampling_repeats_the_stages_up_to_the_last_reward():
    assert plan_of().refill == ()
    plan = plan_of("filter_groups: {enable: true, metric: acc}")
    assert plan.refill == ("generate", "reward")
    assert plan.stage_names()[:2] == plan.refill  # they still head the step, in its order


def test_every_rendering_shows_the_refill_loop():
    plain, looped = plan_of(), plan_of("filter_groups: {enable: true}")
    assert "refill" not in render_text(plain) and "refill" not in render_dot(plain)
    assert "  refill: generate -> reward again on new prompts until the batch is full" in render_text(looped)
    assert '"reward" -> "generate" [label="refill until the batch is full\\n(algorithm.filter_groups)"' in (
        render_dot(looped)
    )
    assert 's_reward -.->|"refill until the batch is full"| s_generate' in render_mermaid(looped)
    assert json.loads(render_json(looped))["refill"] == ["generate", "reward"]

"""What may run at once: the step's groups, the cross-step overlap of an async mode, its lanes and bound."""

from __future__ import annotations

import json
import pickle

import pytest
from plan_helpers import SMALL, spec_from_yaml, with_stages

from rlflow.plan.compile import compile_plan
from rlflow.plan.model import Staleness
from rlflow.plan.render_json import render_json
from rlflow.stages.base import StageKind

ASYNC = (
    SMALL.replace(
        "trainer: {save_freq: -1, test_freq: -1, val_before_train: false}",
        "trainer: {save_freq: -1, test_freq: -1, val_before_train: false, trainer_mode: separate_async,\n"
        "          max_off_policy_threshold: 2, max_off_policy_strategy: wait}",
    )
    .replace(
        "  pool: {type: local, device: cpu}",
        "  pool: {type: local, device: cpu}\n  rollout: {type: local, device: cpu}",
    )
    .replace("{name: generate, uses: generate, on: pool}", "{name: generate, uses: generate, on: rollout}")
)


def test_sync_plan_has_groups_but_no_overlap_lanes_or_bound():
    plan = compile_plan(with_stages())
    assert plan.trainer_mode == "sync" and not plan.is_async
    assert plan.groups == (
        ("generate",),
        ("reward", "old_log_prob"),  # old_log_prob reads nothing the reward writes
        ("advantage",),
        ("update_actor",),
        ("sync_weights",),  # the weights it reads are the update's, written in this step
    )
    assert plan.overlap == () and plan.staleness is None and plan.lanes() == {} and plan.staleness_edges() == ()
    assert set(json.loads(render_json(plan))) == {"pipeline", "init", "stages", "resources", "edges"}


def test_async_rollout_of_the_next_step_runs_beside_the_training_of_this_one():
    plan = compile_plan(spec_from_yaml(ASYNC))
    assert plan.is_async and plan.staleness == Staleness(2, "wait", 1)
    assert plan.staleness.describe() == "weights, up to 1 version behind"
    assert [(e.src, e.dst) for e in plan.staleness_edges()] == [("sync_weights", "generate")]
    beside = dict(plan.overlap)
    assert beside["generate"] == ("reward", "old_log_prob", "advantage", "update_actor", "sync_weights")
    # the trainer lane runs its steps in order, and the actor's passes wait for the last update
    assert {"old_log_prob", "update_actor", "sync_weights"}.isdisjoint(beside)
    # the scorers are free once they scored step t: step t+1's reward may run beside step t's training
    assert beside["reward"] == ("old_log_prob", "advantage", "update_actor", "sync_weights")
    assert list(plan.lanes()) == ["rollout", "pool", "scorers", "driver"]
    assert plan.lanes()["pool"] == ("old_log_prob", "update_actor", "sync_weights")


@pytest.mark.parametrize(
    ("threshold", "text"),
    [(1, "weights, never behind"), (3, "weights, up to 2 versions behind"), (None, "any number of versions")],
)
def test_the_staleness_edge_says_how_far_behind_the_weights_may_be(threshold, text):
    assert text in Staleness(threshold, "drop", 1).describe()


def test_overlap_is_derived_from_the_data_not_listed():
    """A stage that reads what the update wrote, on the rollout's resource, waits for the update."""
    text = ASYNC.replace("data: {train: train.json}", "data: {train: train.json, val: dev.json}").replace(
        "test_freq: -1", "test_freq: 5"
    )
    plan = compile_plan(spec_from_yaml(text))
    assert plan.stage("validate").resource == "rollout"  # the implicit validation, on the rollout's resource
    assert plan.groups[-1] == ("validate",)  # it reads the weights sync_weights writes in the step
    beside = dict(plan.overlap)
    assert "validate" not in beside["generate"]  # same resource: one at a time
    assert "validate" in beside["update_actor"]  # the update of t+1 needs nothing validation does


def test_a_row_changing_stage_separates_the_groups():
    plan = compile_plan(with_stages("{name: keep_varied, uses: group_filter, on: driver, with: {min_std: 0.01}}"))
    assert plan.groups[:3] == (("generate",), ("reward",), ("keep_varied",))
    assert plan.groups[3] == ("old_log_prob", "advantage")


def test_sync_pipeline_made_async_only_by_the_knob_keeps_its_order():
    sync, made_async = compile_plan(with_stages()), compile_plan(spec_from_yaml(ASYNC))
    assert sync.stage_names() == made_async.stage_names()
    assert sync.groups == made_async.groups


def test_a_plugin_stage_joins_the_groups_by_what_it_reads(register_kinds):
    class Probe(StageKind):
        name = "probe"
        reads_fields = ("scores",)
        writes_fields = ("probe_metrics",)
        allowed_on = frozenset({"cpu", "driver"})

    register_kinds(Probe)
    plan = compile_plan(spec_from_yaml(ASYNC + "  - {name: probe, uses: probe, on: scorers}\n"))
    group = next(g for g in plan.groups if "probe" in g)
    assert "probe" in group and "reward" not in group and "advantage" in group
    beside = dict(plan.overlap)
    assert "probe" not in beside["reward"] and "probe" in beside["generate"]


@pytest.mark.parametrize("text", [ASYNC, SMALL])
def test_plans_stay_frozen_and_pickle(text):
    plan = compile_plan(spec_from_yaml(text))
    assert pickle.loads(pickle.dumps(plan)) == plan
    with pytest.raises(AttributeError):
        plan.overlap = ()  # type: ignore[misc]


def test_async_json_carries_mode_lanes_groups_overlap_and_bound():
    data = json.loads(render_json(compile_plan(spec_from_yaml(ASYNC))))
    assert data["trainer_mode"] == "separate_async"
    assert data["lanes"]["rollout"] == ["generate"]
    assert data["groups"][1] == ["reward", "old_log_prob"]
    assert "update_actor" in data["overlap"]["generate"]
    assert data["staleness"] == {"max_off_policy_threshold": 2, "max_off_policy_strategy": "wait",
                                 "num_warmup_batches": 1}  # fmt: skip

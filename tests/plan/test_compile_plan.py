"""compile_plan: computed order, implicit stages, init phase, edges, and every data-flow error."""

from __future__ import annotations

import pickle
import random
import time
from typing import ClassVar

import pytest
from plan_helpers import SMALL, spec_from_yaml, with_stages

from rlflow.errors import ConfigError
from rlflow.plan.compile import compile_plan, dataflow_problems
from rlflow.plan.model import DATA_SOURCE, RESUME, Edge
from rlflow.schemas.pipeline import StageSpec
from rlflow.stages.base import StageConfig, StageKind

GRPO_ORDER = ["generate", "reward", "old_log_prob", "advantage", "update_actor", "sync_weights"]


def kind(name: str, reads: tuple[str, ...], writes: tuple[str, ...], timer: str | None = None) -> type[StageKind]:
    """A stage kind for one test (registered through the ``register_kinds`` fixture)."""
    attrs = {"name": name, "reads_fields": reads, "writes_fields": writes, "verl_timer": timer,
             "allowed_on": frozenset({"driver", "cpu", "local"})}  # fmt: skip
    return type(name, (StageKind,), attrs)


def test_small_pipeline_runs_in_verl_order():
    plan = compile_plan(with_stages())
    assert plan.stage_names() == tuple(GRPO_ORDER)
    timers = ["gen", "reward", "old_log_prob", "adv", "update_actor", "update_weights"]
    assert [s.verl_timer for s in plan.step] == timers
    assert all(s.cadence == "every_step" and not s.implicit for s in plan.step)


def test_order_is_computed_not_declared():
    spec = with_stages()
    shuffled = list(spec.stages)
    random.Random(3).shuffle(shuffled)
    plan = compile_plan(spec.model_copy(update={"stages": shuffled}))
    assert plan.stage_names() == tuple(GRPO_ORDER)


def test_reference_stage_only_with_a_kl_term():
    ref = "{name: ref, uses: ref_log_prob, on: pool}"
    assert "ref" not in compile_plan(with_stages(ref)).stage_names()
    kl = SMALL.replace("trainer:", "algorithm: {use_kl_loss: true}\ntrainer:")
    names = compile_plan(with_stages(ref, text=kl)).stage_names()
    assert names.index("old_log_prob") < names.index("ref") < names.index("advantage")


def test_implicit_checkpoint_and_validation_follow_trainer_settings():
    text = SMALL.replace("data: {train: train.json}", "data: {train: train.json, val: dev.json}")
    text = text.replace("save_freq: -1, test_freq: -1, val_before_train: false", "save_freq: 5, test_freq: 5")
    plan = compile_plan(spec_from_yaml(text))
    assert plan.stage_names()[-3:] == ("save_checkpoint", "sync_weights", "validate")
    save, validate = plan.stage("save_checkpoint"), plan.step[-1]
    assert save.implicit and save.resource == "pool" and save.cadence == "save_freq"
    assert validate.implicit and validate.resource == "pool" and validate.cadence == "test_freq"
    assert [(s.name, s.cadence) for s in plan.init] == [(RESUME, "resume"), ("sync_weights", "init"),
                                                         ("validate", "init")]  # fmt: skip


def test_validation_only_before_training_stays_out_of_the_step():
    text = SMALL.replace("data: {train: train.json}", "data: {train: train.json, val: dev.json}")
    plan = compile_plan(spec_from_yaml(text.replace("val_before_train: false", "val_before_train: true")))
    assert "validate" not in plan.stage_names()
    assert [s.name for s in plan.init] == [RESUME, "sync_weights", "validate"]


def test_declared_checkpoint_is_not_duplicated_and_an_implicit_name_avoids_clashes():
    text = SMALL.replace("save_freq: -1", "save_freq: 2")
    plan = compile_plan(with_stages("{name: ckpt, uses: save_checkpoint, on: pool}", text=text))
    assert [s.name for s in plan.step if s.kind == "save_checkpoint"] == ["ckpt"]
    assert not plan.stage("ckpt").implicit
    renamed = text.replace("name: sync_weights", "name: save_checkpoint")
    plan = compile_plan(spec_from_yaml(renamed))
    assert [s.name for s in plan.step if s.kind == "save_checkpoint"] == ["save_checkpoint_2"]


def test_init_syncs_weights_before_any_generation():
    plan = compile_plan(with_stages())
    assert [s.kind for s in plan.init] == [RESUME, "sync_weights"]
    load = plan.init[0]
    assert load.resource == plan.stage("update_actor").resource and load.writes == ("actor_weights",)


def test_edges_carry_fields_and_mark_the_step_loop():
    plan = compile_plan(with_stages())
    assert Edge("sync_weights", "generate", ("rollout_weights",), loop=True) in plan.edges
    assert Edge("update_actor", "sync_weights", ("actor_weights",), loop=False) in plan.edges
    assert Edge(DATA_SOURCE, "generate", ("prompts", "prompt_mask"), loop=False) in plan.edges
    assert plan.loop_edges() == (Edge("sync_weights", "generate", ("rollout_weights",), loop=True),)
    order = {name: i for i, name in enumerate(plan.stage_names())}
    for edge in plan.edges:
        if edge.src != DATA_SOURCE and not edge.loop:
            assert order[edge.src] < order[edge.dst], edge


def test_stage_config_is_parsed_with_defaults_and_read_only():
    plan = compile_plan(with_stages().model_copy(update={"stages": [
        s.model_copy(update={"with_": {"temperature": 0.7}}) if s.name == "generate" else s
        for s in with_stages().stages]}))  # fmt: skip
    config = plan.stage("generate").config
    assert config["temperature"] == 0.7 and config["top_p"] == 1.0 and config["engine"] == "torch"
    with pytest.raises(TypeError):
        config["temperature"] = 1.0  # type: ignore[index]
    assert plan.stage("generate").timeout_s == 900.0
    assert pickle.loads(pickle.dumps(plan)) == plan


def test_group_filter_lands_between_reward_and_old_log_prob():
    plan = compile_plan(with_stages("{name: keep_varied, uses: group_filter, on: driver}"))
    names = plan.stage_names()
    assert names.index("reward") + 1 == names.index("keep_varied") < names.index("old_log_prob")
    assert Edge("reward", "keep_varied", ("scores",), loop=False) in plan.edges


def on_workers(gpus_per_node: int, nnodes: int = 1, text: str = SMALL) -> str:
    """``text`` with the actor's pool split over ``gpus_per_node x nnodes`` data-parallel workers."""
    pool = f"pool: {{type: local, device: cpu, gpus_per_node: {gpus_per_node}, nnodes: {nnodes}}}"
    return text.replace("pool: {type: local, device: cpu}", pool)


def test_batch_balancing_runs_after_the_reward_when_the_actor_has_several_workers():
    order = ["generate", "reward", "balance_batch", "old_log_prob", "advantage", "update_actor", "sync_weights"]
    for text in (on_workers(2), on_workers(1, nnodes=2)):
        plan = compile_plan(spec_from_yaml(text))
        assert list(plan.stage_names()) == order
        balance = plan.stage("balance_batch")
        assert (balance.role, balance.resource, balance.dispatch, balance.implicit) == ("balance", "driver",
                                                                                       "driver", True)  # fmt: skip
        assert balance.changes_rows and balance.verl_timer is None


@pytest.mark.parametrize(
    "text",
    [
        SMALL,  # one worker: nothing to balance
        on_workers(2).replace("val_before_train: false", "val_before_train: false, balance_batch: false"),
        # the rollout has two workers, the actor one: verl balances over the actor's ranks
        SMALL.replace("  scorers:", "  rollout: {type: local, device: cpu, gpus_per_node: 2}\n  scorers:").replace(
            "{name: generate, uses: generate, on: pool}", "{name: generate, uses: generate, on: rollout}"
        ),
    ],
)
def test_no_batch_balancing_without_several_actor_workers_or_with_the_knob_off(text):
    plan = compile_plan(spec_from_yaml(text))
    assert not plan.with_role("balance") and "balance_batch" not in plan.resources["driver"].stages


def test_balancing_comes_after_a_group_filter():
    plan = compile_plan(with_stages("{name: keep_varied, uses: group_filter, on: driver}", text=on_workers(2)))
    names = plan.stage_names()
    assert names.index("reward") < names.index("keep_varied") < names.index("balance_batch")
    assert names.index("balance_batch") + 1 == names.index("old_log_prob")


def test_a_declared_balance_stage_follows_the_same_rule():
    declared = "{name: rebalance, uses: balance_batch, on: driver}"
    plan = compile_plan(with_stages(declared, text=on_workers(2)))
    assert [s.name for s in plan.with_role("balance")] == ["rebalance"] and not plan.stage("rebalance").implicit
    assert not compile_plan(with_stages(declared)).with_role("balance")


def test_plugin_kind_runs_right_after_its_last_producer(register_kinds):
    register_kinds(kind("adv_stats", ("advantages", "response_mask"), ("adv_report",)),
                   kind("weight_audit", ("actor_weights",), ("audit",)))  # fmt: skip
    spec = with_stages("{name: audit, uses: weight_audit, on: driver}", "{name: stats, uses: adv_stats, on: driver}")
    names = compile_plan(spec).stage_names()
    assert names == ("generate", "reward", "old_log_prob", "advantage", "stats", "update_actor", "audit",
                     "sync_weights")  # fmt: skip


def test_chained_plugins_keep_their_chain(register_kinds):
    register_kinds(kind("first_pass", ("scores",), ("cleaned",)), kind("second_pass", ("cleaned",), ("ranked",)))
    spec = with_stages("{name: b, uses: second_pass, on: driver}", "{name: a, uses: first_pass, on: driver}")
    names = compile_plan(spec).stage_names()
    assert names[names.index("reward") + 1 : names.index("reward") + 3] == ("a", "b")


def test_missing_producer_names_stage_field_and_kinds_that_produce_it():
    problems = dataflow_problems(with_stages(drop=("old_log_prob",)))
    assert problems == [
        ("stages[3]", "stage 'update_actor' reads 'old_log_probs' but no stage produces it "
                      "(add a stage using one of: old_log_prob)")
    ]  # fmt: skip
    with pytest.raises(ConfigError, match="old_log_probs"):
        compile_plan(with_stages(drop=("old_log_prob",)))


def test_field_no_known_kind_produces(register_kinds):
    register_kinds(kind("needs_teacher", ("teacher_log_probs",), ("teacher_report",)))
    problems = dataflow_problems(with_stages("{name: teacher_check, uses: needs_teacher, on: driver}"))
    assert problems == [("stages[6]", "stage 'teacher_check' reads 'teacher_log_probs' but no stage produces it "
                                      "(no known stage kind produces it)")]  # fmt: skip


def test_two_producers_are_both_named(register_kinds):
    register_kinds(kind("other_reward", ("response_text",), ("scores",)))
    ((path, message),) = dataflow_problems(with_stages("{name: shaped, uses: other_reward, on: driver}"))
    assert path == "stages[6]"
    assert "field 'scores' has two producers" in message
    assert "'reward' (stages[1])" in message and "'shaped' (stages[6])" in message


def test_writing_a_data_loader_field_is_an_error(register_kinds):
    register_kinds(kind("retag", ("scores",), ("uid",)))
    ((path, message),) = dataflow_problems(with_stages("{name: retag, uses: retag, on: driver}"))
    assert path == "stages[6]" and "'uid'" in message and "data loader" in message


def test_cycle_names_every_stage_in_it(register_kinds):
    register_kinds(kind("ping", ("pong_out", "scores"), ("ping_out",)), kind("pong", ("ping_out",), ("pong_out",)))
    spec = with_stages("{name: ping, uses: ping, on: driver}", "{name: pong, uses: pong, on: driver}")
    ((path, message),) = dataflow_problems(spec)
    assert path == "stages[6]"
    assert "cycle: ping -> pong -> ping" in message
    assert "'pong' reads 'ping_out' from 'ping'" in message and "'ping' reads 'pong_out' from 'pong'" in message
    with pytest.raises(ConfigError, match="cycle"):
        compile_plan(spec)


def test_a_stage_reading_its_own_output_is_a_cycle(register_kinds):
    register_kinds(kind("selfish", ("mine",), ("mine",)))
    ((_, message),) = dataflow_problems(with_stages("{name: me, uses: selfish, on: driver}"))
    assert "cycle: me -> me" in message


def test_every_problem_is_reported_at_once(register_kinds):
    register_kinds(kind("other_reward", ("response_text",), ("scores",)), kind("selfish", ("mine",), ("mine",)))
    spec = with_stages("{name: shaped, uses: other_reward, on: driver}", "{name: me, uses: selfish, on: driver}",
                       drop=("old_log_prob",))  # fmt: skip
    messages = [m for _, m in dataflow_problems(spec)]
    assert len(messages) == 3
    assert any("two producers" in m for m in messages) and any("cycle" in m for m in messages)
    assert any("old_log_probs" in m for m in messages)


def test_unknown_kinds_silence_missing_producers():
    """The validator reports the unknown kind; guessing what it would have produced helps nobody."""
    spec = with_stages(drop=("generate",)).model_copy()
    spec = spec.model_copy(update={"stages": [*spec.stages, spec.stages[0].model_copy(update={"uses": "genrate"})]})
    assert dataflow_problems(spec) == []


class ChainConfig(StageConfig):
    src: str
    dst: str


class ChainLink(StageKind):
    """Reads one field and writes another, both named in ``with:`` (a long synthetic chain)."""

    name: ClassVar[str] = "chain_link"
    config_model = ChainConfig
    allowed_on = frozenset({"driver"})

    @classmethod
    def reads(cls, pipeline, stage):
        return (stage.with_["src"],)

    @classmethod
    def writes(cls, pipeline, stage):
        return (stage.with_["dst"],)


def test_a_thousand_stage_pipeline_compiles_fast(register_kinds):
    register_kinds(ChainLink)
    links = [StageSpec(name=f"link{i}", uses="chain_link", on="driver", with_={"src": f"f{i}", "dst": f"f{i + 1}"})
             for i in range(1, 1000)]  # fmt: skip
    links.append(StageSpec(name="link0", uses="chain_link", on="driver", with_={"src": "scores", "dst": "f1"}))
    random.Random(0).shuffle(links)
    base = with_stages()
    spec = base.model_copy(update={"stages": [*base.stages, *links]})
    start = time.perf_counter()
    plan = compile_plan(spec)
    elapsed = time.perf_counter() - start
    names = plan.stage_names()
    assert names[names.index("reward") + 1 : names.index("reward") + 1001] == tuple(f"link{i}" for i in range(1000))
    assert elapsed < 1.0, f"compiling 1006 stages took {elapsed:.2f} s"
    start = time.perf_counter()
    overlapping = compile_plan(spec.model_copy(update={"trainer": spec.trainer.model_copy(
        update={"trainer_mode": "separate_async"})}))  # fmt: skip
    elapsed = time.perf_counter() - start
    assert overlapping.stage_names() == names and len(overlapping.groups) > 1000
    assert elapsed < 3.0, f"compiling 1006 stages for separate_async took {elapsed:.2f} s"


def test_compiling_an_unknown_kind_is_an_error_not_a_silent_drop():
    spec = with_stages()
    spec = spec.model_copy(update={"stages": [*spec.stages, spec.stages[0].model_copy(update={"uses": "genrate"})]})
    with pytest.raises(ConfigError, match=r"stages\[6\]\.uses: unknown stage kind 'genrate' \(did you mean 'generate'"):
        compile_plan(spec)

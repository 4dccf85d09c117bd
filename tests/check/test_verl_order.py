"""The compiled plan runs as the installed verl's PPOTrainerSync does, and every kind of drift is caught.

The plans are compiled from the shipped pipelines; verl is the installed one, or a copy of its
trainer with one edit (``verl_copy``): two calls swapped, a stage moved out of the step timer, a
cadence changed, a new timed stage, a condition dropped. Each edit must be reported, each by a
line that names verl's timer or call and the rlflow stage.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from rlflow.check import load_pipeline
from rlflow.check.verl_order import HYBRID_SWITCH_TIMERS, LEAVES, NOT_INSTALLED, STEP_STAGES, compare_with_verl
from rlflow.check.verl_source import SEPARATE_ASYNC_TRAINER, read_trainer, verl_root
from rlflow.plan.compile import compile_plan
from rlflow.schemas.project import load_project_config
from rlflow.stages import STAGE_KINDS

pytestmark = pytest.mark.skipif(verl_root() is None, reason="verl is not installed")

REPO = Path(__file__).resolve().parents[2]
SHIPPED = ("bird_grpo", "ranking_grpo", "bird_grpo_remote", "bird_grpo_async", "ranking_ppo")
COLOCATED_CRITIC = ("stages.4.on=actor_pool", "stages.6.on=actor_pool")  # ranking_ppo's critic on the actor's pool


def compiled(name: str = "bird_grpo", *sets: str, path: Path | None = None):
    path = path or REPO / "pipelines" / f"{name}.yaml"
    spec = load_pipeline(path, sets, load_project_config(REPO), check_paths=False).spec
    return spec, compile_plan(spec)


def without_kl(tmp_path) -> tuple:
    """bird_grpo without its KL loss and its reference stage."""
    text = (REPO / "pipelines" / "bird_grpo.yaml").read_text()
    lines = [line for line in text.splitlines(keepends=True) if "uses: ref_log_prob" not in line]
    path = tmp_path / "bird_no_kl.yaml"
    path.write_text("".join(lines).replace("use_kl_loss: true", "use_kl_loss: false"))
    return compiled(path=path)


@pytest.fixture(scope="module")
def bird():
    return compiled()


def differences(bird, root=None) -> list[str]:
    return list(compare_with_verl(*bird, root=root).differences)


# ---- the installed verl ----------------------------------------------------------------------


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_pipeline_runs_as_the_installed_verl(name):
    assert differences(compiled(name)) == []


@pytest.mark.parametrize(
    "sets",
    [
        ("algorithm.use_kl_loss=false", "algorithm.use_kl_in_reward=true"),
        ("trainer.save_freq=-1",),  # no checkpoint stage
        ("trainer.test_freq=-1",),  # no validation in the step
        ("trainer.val_before_train=false",),  # no validation at start-up
        ("trainer.save_freq=1", "trainer.test_freq=1", "trainer.total_steps=3"),
    ],
)
def test_settings_that_change_the_plan_change_verl_alike(sets):
    assert differences(compiled("bird_grpo", *sets)) == []


def test_a_pipeline_without_a_reference_stage_runs_as_verl(tmp_path):
    spec, plan = without_kl(tmp_path)
    assert not plan.with_role("reference")
    assert compare_with_verl(spec, plan).differences == ()  # verl skips `ref` as well


def test_step_timers_match_verl_one_to_one_and_in_order(bird):
    _, plan = bird
    step = read_trainer(verl_root(), LEAVES).step
    verl_timers = [s.name for s in step if s.kind == "timer"]
    plan_timers = [s.verl_timer for s in plan.step if s.verl_timer]
    assert len(plan_timers) == len(plan.step), "every step stage of the GRPO pipeline maps to a verl timer"
    assert len(set(plan_timers)) == len(plan_timers), f"two stages share a verl timer: {plan_timers}"
    assert set(plan_timers) <= set(verl_timers), f"the plan times what verl never times (verl has {verl_timers})"
    assert plan_timers == [t for t in verl_timers if t in plan_timers]


def test_init_phase_follows_verl_start_up_order(bird):
    _, plan = bird
    assert [s.kind for s in plan.init] == ["load_checkpoint", "sync_weights", "validate"]
    assert [s.cadence for s in plan.init] == ["resume", "init", "init"]
    [found] = differences((bird[0], replace(plan, init=plan.init[:2])))  # no validation before training
    assert found.startswith("verl `_validate()` (trainer_base.py:")
    assert found.endswith(
        "(not in the plan): under this pipeline's settings verl runs it, but the plan has no validate stage"
    )


# ---- a changed verl: each change is caught -------------------------------------------------


def test_two_calls_swapped(bird, verl_copy):
    verl_copy.replace(
        "trainer_base.py", "                self.on_step_end()\n                metrics", "                metrics"
    )
    verl_copy.replace(
        "trainer_base.py", "                # 2. save checkpoint\n", "                self.on_step_end()\n"
    )
    [found] = differences(bird, verl_copy.root)
    assert "`update_weights`" in found and "before `save_checkpoint`" in found
    assert "the plan runs 'save_checkpoint' before 'sync_weights'" in found


def test_two_step_stages_swapped(bird, verl_copy):
    verl_copy.replace("trainer_base.py", "# 4. compute old_log_prob", "# 4. (moved)")
    ref = '        if self.use_reference_policy:\n            with marked_timer("ref", timing_raw, color="olive"):\n'
    ref += "                batch = self._compute_ref_log_prob(batch, metrics=metrics)\n"
    verl_copy.replace("trainer_base.py", ref, "")
    verl_copy.replace("trainer_base.py", "        # 4. (moved)\n", ref)
    [found] = differences(bird, verl_copy.root)
    assert "verl runs `ref`" in found and "before `old_log_prob`" in found and "'ref_log_prob'" in found


def test_a_stage_moved_out_of_the_step_timer(bird, verl_copy):
    verl_copy.replace("trainer_base.py", "                self.on_step_end()\n", "")
    verl_copy.replace("trainer_base.py", "            # 4. validate\n", "            self.on_step_end()\n")
    [found] = differences(bird, verl_copy.root)
    assert found.startswith("verl `update_weights` (trainer_sync.py:")
    assert "'sync_weights' (sync_weights)" in found and "outside the `step` timer, rlflow inside" in found


def test_a_stage_moved_into_the_step_timer(bird, verl_copy):
    # the validation block, right after `with marked_timer("step")`, indented into it
    verl_copy.indent("trainer_base.py", "            # 4. validate", "                metrics.update(val_metrics)")
    [found] = differences(bird, verl_copy.root)
    assert found.startswith("verl `testing` (trainer_base.py:") and "'validate' (validate)" in found
    assert "inside the `step` timer, rlflow outside (rlflow's timing_s/step leaves it out)" in found


def test_save_without_the_last_step(bird, verl_copy):
    verl_copy.replace(
        "trainer_base.py",
        "is_last_step or self.global_steps % self.config.trainer.save_freq == 0",
        "self.global_steps % self.config.trainer.save_freq == 0",
    )
    [found] = differences(bird, verl_copy.root)
    assert "`save_checkpoint`" in found and "'save_checkpoint' (save_checkpoint)" in found
    assert "verl runs it at steps 3, 6, rlflow (save_freq) at steps 3, 6, 7" in found


def test_validation_without_its_test_freq_check(bird, verl_copy):
    verl_copy.unwrap_if(
        "trainer_base.py",
        "self.config.trainer.test_freq > 0 and (is_last_step or self.global_steps % self.config.trainer.test_freq == 0)",
    )
    [found] = differences(bird, verl_copy.root)
    assert "`testing`" in found and "'validate' (validate)" in found
    assert "verl runs it every step, rlflow (test_freq) at steps 2, 4, 6, 7" in found


def test_weight_sync_no_longer_every_step(bird, verl_copy):
    verl_copy.replace(
        "trainer_base.py",
        "                self.on_step_end()\n",
        "                if self.global_steps % self.config.trainer.save_freq == 0:\n                    self.on_step_end()\n",
    )
    [found] = differences(bird, verl_copy.root)
    assert "`update_weights`" in found and "'sync_weights'" in found and "rlflow (every_step) every step" in found


def test_a_new_timed_stage_inside_the_step(bird, verl_copy):
    verl_copy.replace(
        "trainer_base.py",
        "        # 4. compute old_log_prob\n",
        '        with marked_timer("filter_groups", timing_raw):\n'
        "            batch = self._filter_groups(batch, metrics=metrics)\n",
    )
    [found] = differences(bird, verl_copy.root)
    assert found.startswith("verl `filter_groups` (trainer_base.py:")
    assert "inside verl's step (calls _filter_groups) that rlflow has no stage for" in found


def test_a_condition_dropped(bird, verl_copy):
    verl_copy.unwrap_if("trainer_base.py", "self.use_reference_policy")
    [found] = differences(bird, verl_copy.root)
    assert "`ref`" in found and "'ref_log_prob' (ref_log_prob)" in found
    assert "no longer runs it under `if self.use_reference_policy`" in found


def test_a_condition_dropped_shows_in_the_plan_of_a_pipeline_without_kl(verl_copy, tmp_path):
    verl_copy.unwrap_if("trainer_base.py", "self.use_reference_policy")
    found = differences(without_kl(tmp_path), verl_copy.root)
    assert len(found) == 2 and "ref_log_prob (not in the plan)" in found[0]
    assert "verl runs it, but the plan has no ref_log_prob stage" in found[1]


def test_a_condition_added(bird, verl_copy):
    verl_copy.replace("trainer_base.py", "        # 3. balance batch across data parallel groups\n", "")
    verl_copy.replace(
        "trainer_base.py",
        "        batch = self._balance_batch(batch, metrics=metrics)\n",
        "        if self.config.trainer.balance_batch:\n            batch = self._balance_batch(batch, metrics=metrics)\n",
    )
    verl_copy.replace("trainer_base.py", "        # 1. sample batch from replay buffer\n", "        if self.use_rm:\n")
    verl_copy.indent("trainer_base.py", 'with marked_timer("gen"', "self.on_sample_end()")
    found = differences(bird, verl_copy.root)
    assert any("`gen`" in d and "only if `self.use_rm`, a condition rlflow does not model" in d for d in found)
    assert any("`_balance_batch()`" in d and "only if `self.config.trainer.balance_batch`" in d for d in found)


def test_a_critic_stage_made_unconditional(bird, verl_copy):
    verl_copy.replace(
        "trainer_base.py", "# 6. [OPTIONAL] compute critic values\n        if self.use_critic:", "if True:"
    )
    verl_copy.unwrap_if("trainer_base.py", "True")
    found = differences(bird, verl_copy.root)  # GRPO: `self.use_critic` is false, so verl ran no values before
    assert len(found) == 2 and all(d.startswith("verl `values` (trainer_base.py:") for d in found)
    assert found[0].endswith(
        "vs rlflow compute_values (not in the plan): verl no longer runs it under `if self.use_critic` "
        "(rlflow's condition for it: a critic (algorithm.adv_estimator gae, or critic.enable))"
    )
    assert found[1].endswith("under this pipeline's settings verl runs it, but the plan has no compute_values stage")
    [found] = differences(compiled("ranking_ppo"), verl_copy.root)  # PPO runs it anyway: only the condition differs
    assert "vs rlflow 'values' (compute_values): verl no longer runs it under `if self.use_critic`" in found


def test_a_stage_repeated_in_a_loop(bird, verl_copy):
    verl_copy.replace(
        "trainer_base.py",
        "        # 9. update actor\n        if self.config.trainer.critic_warmup <= self.global_steps:\n",
        "        for _ in range(self.config.actor_rollout_ref.actor.ppo_epochs):\n",
    )
    found = differences(bird, verl_copy.root)
    assert len(found) == 2 and all("verl `update_actor`" in d and "'update_actor' (update_actor)" in d for d in found)
    assert "no longer runs it under `if self.config.trainer.critic_warmup <= self.global_steps`" in found[0]
    assert "repeats it in a loop over `range(self.config.actor_rollout_ref.actor.ppo_epochs)`" in found[1]


def test_a_stage_gone_from_verl(bird, verl_copy):
    verl_copy.replace("trainer_base.py", 'marked_timer("adv"', 'marked_timer("advantage"')
    found = differences(bird, verl_copy.root)
    assert len(found) == 2
    assert found[0] == "verl's step has no `adv` any more; rlflow's 'advantage' (grpo_advantage) stands for it"
    assert found[1].startswith("verl `advantage` (trainer_base.py:")
    assert found[1].endswith("a timed stage inside verl's step (calls _compute_advantage) that rlflow has no stage for")


def test_start_up_without_the_weight_sync(bird, verl_copy):
    sync = "        # update weights after loading checkpoint\n        self.checkpoint_manager.update_weights(self.global_steps)\n"
    verl_copy.replace("trainer_sync.py", sync, "        return\n")
    [found] = differences(bird, verl_copy.root)
    assert (
        found
        == "verl's start-up has no `checkpoint_manager.update_weights()` any more; rlflow's 'sync_weights' (sync_weights) stands for it"
    )


# ---- PPO with a critic: verl's steps 6 and 8 -------------------------------------------------


@pytest.fixture(scope="module")
def ppo():
    return compiled("ranking_ppo")


VALUES = """        # 6. [OPTIONAL] compute critic values
        if self.use_critic:
            with marked_timer("values", timing_raw, color="cyan"):
                batch = self._compute_values(batch, metrics=metrics)
"""
ADVANTAGE = """        # 7. compute advantage and return
        with marked_timer("adv", timing_raw, color="brown"):
            batch = self._compute_advantage(batch, metrics=metrics)
"""
UPDATE_CRITIC = """        # 8. [OPTIONAL] update critic
        if self.use_critic:
            with marked_timer("update_critic", timing_raw, color="pink"):
                batch = self._update_critic(batch, metrics=metrics)
"""
UPDATE_ACTOR = """        # 9. update actor
        if self.config.trainer.critic_warmup <= self.global_steps:
            with marked_timer("update_actor", timing_raw, color="red"):
                batch = self._update_actor(batch, metrics=metrics)
"""


@pytest.mark.parametrize(
    "sets", [(), COLOCATED_CRITIC, ("trainer.critic_warmup=2",)], ids=["own_pool", "colocated", "warmup"]
)
def test_ppo_runs_as_verls_step_with_a_critic(sets):
    spec, plan = compiled("ranking_ppo", *sets)
    report = compare_with_verl(spec, plan)
    assert report.differences == () and report.summary().startswith("verl order: the plan runs as PPOTrainerSync")
    step = read_trainer(verl_root(), LEAVES).step
    verl_timers = [s.name for s in step if s.kind == "timer"]
    plan_timers = [s.verl_timer for s in plan.step if s.verl_timer]
    assert {"values", "update_critic"} <= set(plan_timers)
    assert plan_timers == [t for t in verl_timers if t in plan_timers]


def test_values_swapped_with_the_advantage(ppo, verl_copy):
    verl_copy.replace("trainer_base.py", VALUES + "\n" + ADVANTAGE, ADVANTAGE + "\n" + VALUES)
    [found] = differences(ppo, verl_copy.root)
    assert found.startswith("verl runs `adv` (trainer_base.py:") and "before `values` (trainer_base.py:" in found
    assert found.endswith("the plan runs 'values' before 'advantage'")
    assert differences(compiled("ranking_grpo"), verl_copy.root) == [], "GRPO has no values to misplace"


def test_the_critic_update_moved_after_the_actors(ppo, verl_copy):
    verl_copy.replace("trainer_base.py", UPDATE_CRITIC + "\n" + UPDATE_ACTOR, UPDATE_ACTOR + "\n" + UPDATE_CRITIC)
    [found] = differences(ppo, verl_copy.root)
    assert found.startswith("verl runs `update_actor` (trainer_base.py:")
    assert "before `update_critic` (trainer_base.py:" in found
    assert found.endswith("the plan runs 'update_critic' before 'update_actor'")


def test_the_critic_warmup_bound_changed(ppo, verl_copy):
    verl_copy.replace("trainer_base.py", UPDATE_ACTOR, UPDATE_ACTOR.replace("critic_warmup <=", "critic_warmup <"))
    found = differences(ppo, verl_copy.root)
    assert len(found) == 2 and all("verl `update_actor`" in d and "'update_actor' (update_actor)" in d for d in found)
    assert "no longer runs it under `if self.config.trainer.critic_warmup <= self.global_steps`" in found[0]
    # a test of the step counter: read as a cadence, which the warm-up, not among its knobs, makes unreadable
    assert found[1].endswith(
        "verl runs it under `self.config.trainer.critic_warmup < self.global_steps`, a cadence rlflow cannot read"
    )


# ---- the plan side -------------------------------------------------------------------------


def test_a_plan_without_a_stage_verl_runs(bird):
    spec, plan = bird
    found = differences((spec, replace(plan, step=tuple(s for s in plan.step if s.role != "reference"))))
    [found] = found
    assert found.startswith("verl `ref` (trainer_base.py:") and found.endswith(
        "vs rlflow ref_log_prob (not in the plan): under this pipeline's settings verl runs it, "
        "but the plan has no ref_log_prob stage"
    )


def test_a_plan_stage_under_a_timer_verl_does_not_use(bird):
    spec, plan = bird
    step = tuple(replace(s, verl_timer="scoring") if s.role == "reward" else s for s in plan.step)
    [found] = differences((spec, replace(plan, step=step)))
    assert (
        found
        == "rlflow 'reward' (text2sql_reward) is timed as timing_s/scoring; verl times it as `reward` (_compute_reward_colocate)"
    )


def test_a_plan_out_of_verl_order(bird):
    spec, plan = bird
    step = list(plan.step)
    step[2], step[3] = step[3], step[2]  # ref_log_prob before old_log_prob
    [found] = differences((spec, replace(plan, step=tuple(step))))
    assert "verl runs `old_log_prob`" in found and "the plan runs 'ref_log_prob' before 'old_log_prob'" in found


def test_balancing_over_several_workers(bird):
    spec, plan = compiled("bird_grpo", "resources.actor_pool.gpus_per_node=2")
    found = differences((spec, plan))
    if "balance_batch" in STAGE_KINDS:  # the compiler places it over more than one data-parallel rank
        assert found == []
    else:
        [found] = found
        assert found.startswith("verl `_balance_batch()` (trainer_base.py:") and found.endswith(
            "vs rlflow balance_batch (not in the plan): under this pipeline's settings verl runs it, "
            "but the plan has no balance_batch stage"
        )


def test_the_table_maps_every_verl_timer_of_the_step():
    step = read_trainer(verl_root(), LEAVES).step
    known = {row.timer for row in STEP_STAGES} | {"step"}
    assert {s.name for s in step if s.kind == "timer"} <= known


# ---- without verl, or with a verl this check cannot read -----------------------------------


def test_without_verl_the_check_says_so_and_skips(bird, monkeypatch):
    monkeypatch.delenv("RLFLOW_VERL_SOURCE", raising=False)
    monkeypatch.setattr("rlflow.check.verl_source.find_spec", lambda name: None)
    report = compare_with_verl(*bird)
    assert report.skipped == NOT_INSTALLED and report.warnings() == [NOT_INSTALLED] and not report.differences


def test_an_unreadable_verl_is_one_difference(bird, tmp_path):
    report = compare_with_verl(*bird, root=tmp_path)
    assert len(report.differences) == 1 and report.differences[0].startswith("cannot read verl's PPOTrainerSync: ")
    assert report.warnings() == [f"verl order: {report.differences[0]}"]


def test_the_environment_points_the_check_at_another_source(bird, verl_copy, monkeypatch):
    verl_copy.unwrap_if("trainer_base.py", "self.use_reference_policy")
    monkeypatch.setenv("RLFLOW_VERL_SOURCE", str(verl_copy.root))
    report = compare_with_verl(*bird)
    assert len(report.differences) == 1 and "RLFLOW_VERL_SOURCE" in report.summary()


# ---- separate_async: the trainer lane against verl's PPOTrainerSeparateAsync -----------------


@pytest.fixture(scope="module")
def bird_async():
    return compiled("bird_grpo_async")


def test_an_async_pipeline_is_compared_with_verls_separate_async_trainer(bird_async):
    report = compare_with_verl(*bird_async)
    assert report.trainer == "PPOTrainerSeparateAsync" and report.differences == ()
    assert report.summary().endswith(
        "does (trainer lane; as verl with trainer.v1.separate_async.parameter_sync_step=4, its default: the update's "
        "4 mini-batches are its cycles; the rollout runs ahead, as in verl)"
    )
    sites = read_trainer(verl_root(), LEAVES, SEPARATE_ASYNC_TRAINER)
    # verl's hybrid GPU switching is timed in its step; rlflow has no such stage and the check leaves it out
    assert HYBRID_SWITCH_TIMERS <= {s.name for s in sites.step if s.kind == "timer"}
    assert any(s.name == "_load_checkpoint" for s in sites.startup), "found through super()._setup()"
    # the trainer-side order of verl's v1 _step_once is the plan's, and so the same as the sync trainer's
    plan_timers = [s.verl_timer for s in bird_async[1].step]
    assert plan_timers == [s.name for s in sites.step if s.kind == "timer" and s.name in plan_timers]


def test_async_trainer_renaming_its_weight_push_is_caught(bird_async, verl_copy):
    verl_copy.replace(
        "trainer_separate_async.py",
        'with marked_timer("update_weights", self.timing_raw, color="red"):',
        'with marked_timer("push_weights", self.timing_raw, color="red"):',
    )
    found = differences(bird_async, verl_copy.root)
    assert any("verl's step has no `update_weights` any more; rlflow's 'sync_weights'" in d for d in found), found
    assert any(d.startswith("verl `push_weights` (trainer_separate_async.py:") for d in found), found
    assert differences(compiled("bird_grpo"), verl_copy.root) == [], "the sync trainer is not the one edited"


def test_async_trainer_without_the_first_weight_push_is_caught(bird_async, verl_copy):
    verl_copy.replace(
        "trainer_separate_async.py",
        "        self.standalone_checkpoint_manager.update_weights(self.global_steps)\n        if self._enable",
        "        if self._enable",
    )
    [found] = differences(bird_async, verl_copy.root)
    assert found.startswith("verl's start-up has no `standalone_checkpoint_manager.update_weights()` any more")

"""Reading verl's PPOTrainerSync from source: the walk sees start-up and the whole step, with each site's context."""

from __future__ import annotations

import pytest

from rlflow.check.verl_order import LEAVES
from rlflow.check.verl_source import SOURCE_ENV, VerlSourceError, read_trainer, verl_root

pytestmark = pytest.mark.skipif(verl_root() is None, reason="verl is not installed")

INIT_CALLS = ("_load_checkpoint", "checkpoint_manager.update_weights", "_validate")


@pytest.fixture(scope="module")
def trainer():
    return read_trainer(verl_root(), LEAVES)


def timers(sites) -> list[str]:
    return [s.name for s in sites if s.kind == "timer"]


def site(sites, kind: str, name: str):
    return next(s for s in sites if s.kind == kind and s.name == name)


def test_the_walk_sees_the_whole_grpo_step(trainer):
    """The step reaches the sync trainer's hook (on_step_end, in trainer_sync.py) and the nested step body."""
    calls = [s.name for s in trainer.step if s.kind == "call"]
    assert "on_step_end" in calls and "_step_once" in calls
    assert timers(trainer.step)[0] == "step"
    assert {"gen", "reward", "old_log_prob", "ref", "adv", "update_actor"} <= set(timers(trainer.step))
    assert site(trainer.step, "timer", "update_weights").file == "trainer_sync.py"


def test_verl_times_the_weight_sync_after_the_checkpoint_and_before_validation(trainer):
    names = timers(trainer.step)
    assert names.index("update_actor") < names.index("save_checkpoint") < names.index("update_weights")
    assert names.index("update_weights") < names.index("testing")


def test_start_up_loads_syncs_then_validates(trainer):
    calls = [s.name for s in trainer.startup if s.kind == "call"]
    positions = [calls.index(name) for name in INIT_CALLS]
    assert positions == sorted(positions), calls
    assert site(trainer.startup, "call", "_validate").conditions == (
        "self.config.trainer.get('val_before_train', True)",
    )


def test_each_site_knows_its_timers_conditions_and_loops(trainer):
    ref = site(trainer.step, "timer", "ref")
    assert ref.conditions == ("self.use_reference_policy",) and ref.in_step
    assert ref.loops == ("range(self.parameter_sync_step)",)  # step() runs _step_once parameter_sync_step times
    save = site(trainer.step, "timer", "save_checkpoint")
    assert save.in_step and "save_freq" in save.conditions[0] and "is_last_step" in save.conditions[0]
    testing = site(trainer.step, "timer", "testing")
    assert not testing.in_step and "test_freq" in testing.conditions[0]
    balance = site(trainer.step, "call", "_balance_batch")
    assert balance.in_step and balance.conditions == () and balance.timers == ("step",)


def test_stage_calls_are_leaves_and_other_methods_are_walked_into():
    walked = {s.name for s in read_trainer(verl_root(), frozenset()).step}
    assert "_val_metrics_update" in walked, "without leaves the walk enters _validate"
    assert "_val_metrics_update" not in {s.name for s in read_trainer(verl_root(), frozenset({"_validate"})).step}


def test_an_early_exit_guards_everything_after_it(verl_copy):
    verl_copy.replace(
        "trainer_base.py",
        "            # 1. perform rollout and actor/critic training\n",
        "            if self.skip_this_step():\n                continue\n",
    )
    step = read_trainer(verl_copy.root, LEAVES).step
    after = step[next(i for i, s in enumerate(step) if s.name == "skip_this_step") + 1 :]
    assert after and all("not self.skip_this_step()" in s.conditions for s in after)


def test_the_source_folder_comes_from_the_environment_or_the_installed_package(monkeypatch, tmp_path):
    monkeypatch.setenv(SOURCE_ENV, str(tmp_path))
    assert verl_root() == tmp_path
    monkeypatch.delenv(SOURCE_ENV)
    assert (verl_root() / "verl" / "trainer" / "ppo" / "v1" / "trainer_sync.py").is_file()
    monkeypatch.setattr("rlflow.check.verl_source.find_spec", lambda name: None)
    assert verl_root() is None


@pytest.mark.parametrize(
    ("module", "old", "new", "message"),
    [
        ("trainer_sync.py", "class PPOTrainerSync(PPOTrainer)", "class SyncTrainer(PPOTrainer)", "no class"),
        ("trainer_base.py", "        while current_epoch <", "        if current_epoch <", "no training loop"),
        ("trainer_base.py", "    def fit(self, agent_loop_manager", "    def train(self, agent_loop_manager", "fit()"),
        ("trainer_base.py", "    def _step_once(self,", "    def _step_once(self,,", "cannot be parsed"),
    ],
)
def test_a_changed_layout_is_an_error_naming_what_is_missing(verl_copy, module, old, new, message):
    verl_copy.replace(module, old, new)
    with pytest.raises(VerlSourceError, match=message):
        read_trainer(verl_copy.root, LEAVES)


def test_a_missing_module_is_an_error_naming_the_file(tmp_path):
    with pytest.raises(VerlSourceError, match="trainer_sync.py is missing"):
        read_trainer(tmp_path, LEAVES)

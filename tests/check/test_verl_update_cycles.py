"""The separate-async plan's mini-batches against verl's ``parameter_sync_step`` update cycles.

verl's own statements decide: its trainer config gives the default (read with OmegaConf, as
verl's Hydra config is), and the assert of ``PPOTrainerSeparateAsync.__init__`` (read with
``ast``) must accept the ``parameter_sync_step`` the check says the plan equals.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from rlflow.check import load_pipeline
from rlflow.check.verl_order import LEAVES, compare_with_verl
from rlflow.check.verl_source import SEPARATE_ASYNC_TRAINER, read_trainer, verl_root
from rlflow.check.verl_update_cycles import CONFIG, KNOB, compare_update_cycles, verl_default
from rlflow.plan.compile import compile_plan
from rlflow.schemas.project import load_project_config

pytestmark = pytest.mark.skipif(verl_root() is None, reason="verl is not installed")

REPO = Path(__file__).resolve().parents[2]


def async_spec(*sets: str):
    path = REPO / "pipelines" / "bird_grpo_async.yaml"
    return load_pipeline(path, sets, load_project_config(REPO), check_paths=False).spec


def verls_assert_accepts(train_batch_size: int, parameter_sync_step: int, ppo_mini_batch_size: int) -> bool:
    """verl's ``assert train_batch_size == parameter_sync_step * ppo_mini_batch_size``, evaluated on these."""
    path = verl_root() / "verl" / "trainer" / "ppo" / "v1" / "trainer_separate_async.py"
    init = next(
        node
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef) and node.name == "__init__"
    )
    test = next(
        node.test
        for node in ast.walk(init)
        if isinstance(node, ast.Assert) and "parameter_sync_step" in ast.unparse(node.test)
    )
    env = {"train_batch_size": train_batch_size, "parameter_sync_step": parameter_sync_step,
           "ppo_mini_batch_size": ppo_mini_batch_size}  # fmt: skip
    return eval(compile(ast.Expression(test), "<verl>", "eval"), env)  # verl's own expression, read above


def cycles(*sets: str, root: Path | None = None):
    root = root or verl_root()
    sites = read_trainer(root, LEAVES, SEPARATE_ASYNC_TRAINER)
    return compare_update_cycles(async_spec(*sets), sites.step, root)


def test_verls_default_is_read_from_its_config():
    from omegaconf import OmegaConf

    config = OmegaConf.load(verl_root() / CONFIG)
    assert verl_default(verl_root()) == config.trainer.v1.separate_async.parameter_sync_step == 4


def test_the_shipped_async_pipeline_runs_as_verls_default_cycles():
    found = cycles()  # train_batch_size 16, ppo_mini_batch_size 4
    assert (found.equals, found.default, found.differences) == (4, 4, ())
    assert verls_assert_accepts(16, found.equals, 4)
    summary = compare_with_verl(spec := async_spec(), compile_plan(spec)).summary()
    assert f"(trainer lane; as verl with {KNOB}=4, its default: the update's 4 mini-batches are its cycles;" in summary


def test_other_mini_batches_name_the_parameter_sync_step_they_equal():
    found = cycles("trainer.ppo_mini_batch_size=8")
    assert (found.equals, found.differences) == (2, ()) and verls_assert_accepts(16, 2, 8)
    assert found.describe() == f"as verl with {KNOB}=2, not its default 4: the update's 2 mini-batches are its cycles"


def test_a_batch_of_no_whole_mini_batches_is_a_difference():
    (difference,) = cycles("trainer.ppo_mini_batch_size=6").differences
    assert difference.startswith("verl repeats its trainer lane in a loop over `range(self.parameter_sync_step)` (")
    assert "no parameter_sync_step matches train_batch_size 16 with ppo_mini_batch_size 6" in difference
    assert not any(verls_assert_accepts(16, p, 6) for p in range(1, 17))


def test_several_epochs_run_in_another_order_than_verls_cycles():
    (difference,) = cycles("trainer.ppo_epochs=2").differences
    assert "each of its 4 cycles runs ppo_epochs 2 epochs over its mini-batch before the next cycle" in difference
    report = compare_with_verl(spec := async_spec("trainer.ppo_epochs=2"), compile_plan(spec))
    assert report.differences == (difference,)


def test_a_verl_whose_step_runs_its_lane_once_has_nothing_to_compare(verl_copy):
    verl_copy.replace(
        "trainer_base.py",
        "        for trigger_idx in range(self.parameter_sync_step):\n",
        "        for trigger_idx in [0]:\n",
    )
    found = cycles(root=verl_copy.root)
    assert (found.equals, found.default, found.differences, found.describe()) == (None, None, (), "")


def test_a_learning_rate_warmup_ends_sooner_in_verls_cycles():
    (difference,) = cycles("trainer.optim.lr_warmup_steps=8").differences
    assert "steps the learning-rate schedule once a cycle (4 a step" in difference
    assert difference.endswith("optim.lr_warmup_steps 8 ends after 2 steps in verl and 8 here")
    base = (verl_root() / "verl" / "trainer" / "ppo" / "v1" / "trainer_base.py").read_text()
    assert "optim_total_training_steps = total_training_steps * self.parameter_sync_step" in base

"""verl's cadence conditions, evaluated: the steps they pick, compared with rlflow's own rule."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rlflow.check.verl_cadence import Unreadable, mentions_cadence, steps_where
from rlflow.stages.base import due

# verl 0.9.1's conditions, as ast.unparse writes them (rlflow.check.verl_source records them so)
SAVE = "self.config.trainer.save_freq > 0 and (is_last_step or self.global_steps % self.config.trainer.save_freq == 0)"
TEST = "self.config.trainer.test_freq > 0 and (is_last_step or self.global_steps % self.config.trainer.test_freq == 0)"


@pytest.mark.parametrize(("condition", "cadence"), [(SAVE, "save_freq"), (TEST, "test_freq")])
@pytest.mark.parametrize("freq", [-1, 1, 2, 3, 5, 9])
@pytest.mark.parametrize("total", [1, 7, 10])
def test_verl_save_and_test_conditions_pick_rlflow_steps(condition, cadence, freq, total):
    knobs = SimpleNamespace(save_freq=freq, test_freq=freq)
    assert steps_where([condition], knobs, total) == [s for s in range(1, total + 1) if due(cadence, knobs, s, total)]


def test_a_condition_without_the_last_step_misses_it():
    knobs = SimpleNamespace(save_freq=3, test_freq=3)
    assert steps_where(["self.global_steps % self.config.trainer.save_freq == 0"], knobs, 7) == [3, 6]
    assert steps_where(["is_last_step"], knobs, 7) == [7]
    assert steps_where([], knobs, 3) == [1, 2, 3]


def test_conditions_all_hold_and_negation_chains_and_arithmetic_evaluate():
    knobs = SimpleNamespace(save_freq=2, test_freq=3)
    conditions = ["not is_last_step", "0 < self.global_steps - 1 <= 4", "(self.global_steps + 1) // 2 * 2 == 4"]
    assert steps_where(conditions, knobs, 6) == [3, 4]


@pytest.mark.parametrize(
    "condition",
    [
        "self.global_steps % self.parameter_sync_step == 0",  # a name outside the four
        "self.config.trainer.get('save_freq') > 0",  # a call
        "self.global_steps % self.config.trainer.save_freq == 0",  # save_freq=0: verl divides by zero
        "self.global_steps in (1, 2)",  # an operator outside the comparisons evaluated
    ],
)
def test_anything_else_is_unreadable_and_named(condition):
    with pytest.raises(Unreadable) as caught:
        steps_where([condition], SimpleNamespace(save_freq=0, test_freq=0), 3)
    assert str(caught.value) == condition


def test_mentions_cadence():
    assert mentions_cadence(SAVE) and mentions_cadence("is_last_step")
    assert mentions_cadence("self.config.trainer.critic_warmup <= self.global_steps")
    assert not mentions_cadence("self.use_reference_policy")

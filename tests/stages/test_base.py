"""What every stage kind shares: when a stage of each cadence runs."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rlflow.stages.base import due


@pytest.mark.parametrize(
    ("cadence", "save_freq", "test_freq", "steps"),
    [
        ("every_step", -1, -1, [1, 2, 3, 4, 5, 6, 7]),
        ("save_freq", 3, -1, [3, 6, 7]),  # every save_freq steps and the last one
        ("test_freq", -1, 2, [2, 4, 6, 7]),
        ("save_freq", 7, 1, [7]),
        ("save_freq", -1, 1, []),  # 0 or less: never, not even the last step
        ("test_freq", 1, 0, []),
    ],
)
def test_a_cadence_runs_every_n_steps_and_at_the_last(cadence, save_freq, test_freq, steps):
    trainer = SimpleNamespace(save_freq=save_freq, test_freq=test_freq)
    assert [s for s in range(1, 8) if due(cadence, trainer, s, 7)] == steps

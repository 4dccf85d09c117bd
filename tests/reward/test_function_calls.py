"""Reward functions in the sandbox: their returns as scores and extras, a bad return or a raise as that row's
error, and a function that no longer loads named at the start."""

from __future__ import annotations

import pytest
from reward_calls import PLUGINS, calls

from rlflow.reward.function_calls import FunctionRunner, RewardFunctionError

RAISE_LINE = next(
    i for i, line in enumerate((PLUGINS / "rewards.py").read_text().splitlines(), 1) if "cannot score" in line
)


def test_scores_and_extras_come_back_in_order(runner_of):
    runner = runner_of("length", "with_extras")
    out = runner.run(calls("abc", "42"))
    assert [[o.score for o in row] for row in out] == [[0.3, 0.0], [0.2, 1.0]]
    assert out[1][1].extras == {"acc": 1.0, "format_ok": 1.0}  # the string "answer" is not a metric
    assert all(o.failure is None for row in out for o in row)


@pytest.mark.parametrize(
    "text, kind, detail",
    [
        ("raise", "raised ValueError", f"rewards.py:{RAISE_LINE} in on_cue: cannot score 'raise'"),
        ("exit", "raised SystemExit", "in on_cue: 1"),
        ("nan", "bad return", "returned float nan, not a finite number"),
        ("inf", "bad return", "returned float -inf"),
        ("none", "bad return", "returned NoneType None"),
        ("str", "bad return", "returned str '1.0'"),
        ("nodict", "bad return", "a dict whose 'score' is None"),
        ("huge", "bad return", "returned float 1e+308, not a finite number within +-1e+18"),  # inf as float32
        ("hugeint", "bad return", "not a finite number within +-1e+18"),
        ("hugedict", "bad return", "a dict whose 'score' is -1e+19, not a finite number within"),
    ],
)
def test_a_bad_call_is_an_error_for_its_row_only(runner_of, text, kind, detail):
    runner = runner_of("on_cue")
    out = runner.run(calls("ok", text, "ok"))
    assert [o.failure for row in out for o in row] == [None, "error", None]
    assert out[1][0].score == 0.0 and out[1][0].kind == kind and detail in out[1][0].detail
    assert runner.starts == 1  # an exception or a bad value does not cost the child


def test_a_function_that_cannot_load_fails_at_start(tmp_path):
    (tmp_path / "later.py").write_text("def f(data_source, solution_str, ground_truth, extra_info):\n    return 1\n")
    runner = FunctionRunner(["later.py:f"], tmp_path, 5.0, None)
    (tmp_path / "later.py").write_text("raise ImportError('gone')\n")  # changed after validation
    with pytest.raises(RewardFunctionError, match="'later.py:f' cannot be loaded: .*ImportError: gone"):
        runner.run(calls("x"))

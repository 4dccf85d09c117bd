"""The old import paths of what moved into the sandbox still work, and say where the names live now."""

from __future__ import annotations

import importlib
import sys

import pytest


def test_the_old_function_runner_path_warns_and_still_works():
    sys.modules.pop("rlflow.reward.function_runner", None)  # imported earlier: import it afresh
    with pytest.warns(DeprecationWarning, match="rlflow.reward.function_runner is deprecated; import from"):
        old = importlib.import_module("rlflow.reward.function_runner")
    from rlflow.reward.function_calls import FunctionRunner, RewardFunctionError
    from rlflow.sandbox.protocol import Outcome, answer_of

    assert (old.FunctionRunner, old.RewardFunctionError) == (FunctionRunner, RewardFunctionError)
    assert (old.Outcome, old.answer_of) == (Outcome, answer_of)

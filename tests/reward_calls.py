"""Reward-function calls over the test reward plugins (tests/reward/reward_plugins), for the reward and sandbox
tests: the calls' arguments, and a fixture that makes runners and closes them."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlflow.reward.function_calls import FunctionRunner

PLUGINS = Path(__file__).parent / "reward" / "reward_plugins"


def calls(*texts: str, source: str = "gsm8k") -> list[dict]:
    return [
        {"data_source": source, "solution_str": t, "ground_truth": "42", "extra_info": {"index": i}}
        for i, t in enumerate(texts)
    ]


@pytest.fixture
def runner_of():
    runners = []

    def make(*names: str, timeout_s: float = 5.0, max_memory_mb: int | None = 1024) -> FunctionRunner:
        runner = FunctionRunner([f"rewards.py:{n}" for n in names], PLUGINS, timeout_s, max_memory_mb)
        runners.append(runner)
        return runner

    yield make
    for runner in runners:
        runner.close()

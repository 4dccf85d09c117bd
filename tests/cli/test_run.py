"""``rlflow run``'s own options: --sink picks this run's metrics sinks, --drop removes a stage."""

from __future__ import annotations

import pytest
import yaml
from cli_helpers import rlflow


def test_a_sink_and_a_drop_from_the_command_line_reach_the_run(short_run):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(short_run / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("critic/score/mean")] == [1, 2]
    stages = [s["name"] for s in yaml.safe_load((short_run / "pipeline.resolved.yaml").read_text())["stages"]]
    assert "ref_log_prob" not in stages and "generate" in stages


def test_an_unknown_sink_is_one_line_with_exit_2():
    result = rlflow("run", "pipelines/arithmetic_grpo.yaml", "--sink", "wandbb", timeout=120)
    assert result.returncode == 2
    assert result.stderr == "error: --sink: unknown metrics sink 'wandbb' (did you mean 'wandb'?)\n"

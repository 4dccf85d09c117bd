"""Single-turn against multi-turn: accuracy read at fixed minutes, the table, the step cost, a reused agent run."""

from __future__ import annotations

import json

import pytest
import yaml

from benchmarks import agent_side_by_side as agent


def arm(name: str, curve: list[list[float]], turns: float | None) -> dict:
    return {
        "algorithm": name,
        "pipeline": f"pipelines/{name}.yaml",
        "before": curve[0][1],
        "curve": curve,
        "steps": 30,
        "step_seconds": 20.0,
        "num_turns_mean": turns,
    }


def test_accuracy_at_each_mark_is_the_last_validation_within_it():
    run = arm("multi", [[0.2, 0.41], [4.0, 0.44], [9.5, 0.47], [16.0, 0.52]], 3.9)
    assert [agent.accuracy_at(run, m) for m in (5, 10, 15)] == [0.44, 0.47, 0.47]
    assert agent.accuracy_at(run, 0.1) is None


def test_the_table_and_the_step_cost():
    runs = [arm("single", [[0.1, 0.30], [6.0, 0.40]], None), arm("multi", [[0.2, 0.41]], 3.9)]
    lines = agent.table(runs, (5.0, 10.0)).splitlines()
    assert (
        lines[0]
        == "| rollout | pipeline | val acc before | after 5 min | after 10 min | steps | s/step | num_turns/mean |"
    )
    assert lines[2] == "| single | `pipelines/single.yaml` | 0.30 | 0.30 | 0.40 | 30 | 20.0 | - |"
    assert lines[3] == "| multi | `pipelines/multi.yaml` | 0.41 | 0.41 | 0.41 | 30 | 20.0 | 3.90 |"
    cost = agent.step_cost(
        {"step_seconds": 24.0, "response_length_mean": 120.0}, {"step_seconds": 12.0, "response_length_mean": 30.0}
    )
    assert cost["ratio"] == 2.0 and not cost["met"]
    assert (
        cost["ms_per_response_token"] == {"multi_turn": 200.0, "single_turn": 400.0} and cost["per_token_ratio"] == 0.5
    )
    assert "a transcript averages 120 tokens" in agent.per_token_text(cost) and "(0.50x)" in agent.per_token_text(cost)


def test_a_reused_agent_run_must_be_the_agent_pipeline_with_the_same_seed(tmp_path):
    (tmp_path / "pipeline.resolved.yaml").write_text(yaml.safe_dump({"name": "bird-grpo", "trainer": {"seed": 1}}))
    with pytest.raises(SystemExit, match="the multi-turn arm must be a run of pipelines/bird_grpo_agent.yaml"):
        agent.finished_arm(1, tmp_path, 1, 15.0)
    (tmp_path / "pipeline.resolved.yaml").write_text(
        yaml.safe_dump({"name": "bird-grpo-agent", "trainer": {"seed": 1}})
    )
    trace = [
        {"step": 0, "stage": "validate", "start": 0.0, "end": 6.0},
        {"step": 1, "stage": "generate", "start": 6.0, "end": 30.0},
    ]
    metrics = [
        {"step": 0, "val-core/bird/acc/mean@1": 0.41},
        {"step": 1, "timing_s/step": 24.0, "num_turns/mean": 3.5, "val-core/bird/acc/mean@1": 0.45},
    ]
    (tmp_path / "trace.jsonl").write_text("".join(json.dumps(r) + "\n" for r in trace))
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in metrics))
    run = agent.finished_arm(1, tmp_path, 1, 15.0)
    assert run["curve"] == [[0.1, 0.41], [0.5, 0.45]] and run["step_seconds"] == 24.0 and run["num_turns_mean"] == 3.5

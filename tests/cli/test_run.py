"""`rlflow run` as a user (or a CI log) sees it: the console's narration of a real short run, -q, and the
run's own options (--sink picks this run's metrics sinks, --drop removes a stage)."""

from __future__ import annotations

import re

import pytest
import yaml
from runtime_helpers import REPO, read_jsonl, rlflow, small_sets

PIPELINE = str(REPO / "pipelines" / "bird_grpo.yaml")
PHASES = ("start Ray", "load data", "start actor_pool", "start reward_pool", "load model on actor_pool")


def test_a_run_says_where_it_writes_what_it_starts_and_each_step(short_run):
    run_dir, result = short_run
    lines = result.stdout.splitlines()
    assert lines[0] == f"[rlflow] running bird-grpo: {run_dir}", "the run directory comes first"
    assert "[rlflow]   pool actor_pool   local, 1 worker, device auto" in lines
    assert "[rlflow]   sinks             console, metrics.jsonl" in lines
    said = {m["label"]: m for m in map(re.compile(r"\[rlflow\] (?P<label>[^:]+): (?P<s>\d+\.\d) s").match, lines) if m}
    for label in (*PHASES, "validate before training"):
        assert label in said, f"no line for {label!r} in:\n{result.stdout}"
    assert re.search(r"load data: .*\(train 4\d\d prompts, val 8 prompts\)", result.stdout)
    assert re.search(r"start Ray: .*\(embedded, 1 node, \d+ CPUs, 0 GPUs\)", result.stdout)
    assert re.search(r"load model on actor_pool: .*\(actor, ref, rollout\)", result.stdout)
    steps = [line for line in lines if line.startswith("[rlflow] step ")]
    assert [line.split()[2] for line in steps] == ["0/2", "1/2", "2/2"]
    assert re.fullmatch(r"\[rlflow\] step 0/2  val bird/acc [\d.e-]+", steps[0])
    assert re.match(r"\[rlflow\] step 1/2  reward [\d.e-]+ .* len [\d.]+  kl [\d.e-]+  entropy [\d.]+  ", steps[1])
    assert re.search(r"  [\d.]+ s/step  eta (\d+\.\d s|\d+m\d\ds|\d+h\d\dm)$", steps[1]), (
        "measured, so known after step 1"
    )
    assert "val bird/acc" in steps[2] and all(len(line) < 140 for line in steps)
    assert lines[-3].startswith("[rlflow] run finished at step 2 in ") and lines[-1].endswith(str(run_dir))
    assert "\r" not in result.stdout and "\x1b" not in result.stdout, "a pipe gets plain lines, no redraws"
    assert "Token authentication" not in result.stderr, "Ray's notice about its default stays out of the narration"
    recorded = {r["phase"]: r for r in read_jsonl(run_dir / "startup.jsonl")}
    assert sorted(recorded) == sorted(PHASES)
    assert all(r["end"] >= r["start"] and r["attempt"] == 0 for r in recorded.values())
    ray_up = recorded["start Ray"]["end"]
    assert recorded["load data"]["end"] <= recorded["start Ray"]["start"], "the data loads (and fails) before Ray"
    actor, reward = recorded["start actor_pool"], recorded["start reward_pool"]
    assert ray_up <= min(actor["start"], reward["start"]) and max(actor["start"], reward["start"]) < min(
        actor["end"], reward["end"]
    ), "the pools start side by side, after Ray"
    assert recorded["load model on actor_pool"]["start"] >= recorded["start actor_pool"]["end"]
    for label, r in recorded.items():  # each line shows the phase's own duration
        assert float(said[label]["s"]) == pytest.approx(r["end"] - r["start"], abs=0.051), label
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert "critic/score/mean" in metrics[1] and "reward" not in metrics[1], "the sinks keep verl's names"


def test_quiet_prints_only_the_summary(tmp_path):
    run_dir = tmp_path / "quiet"
    sets = small_sets("trainer.total_steps=1", "trainer.test_freq=-1", "trainer.val_before_train=false")
    result = rlflow("run", PIPELINE, "-q", "--run-dir", str(run_dir), *sets)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert len(lines) == 3, result.stdout
    assert lines[0].startswith("[rlflow] run finished at step 1 in ") and lines[1].startswith("[rlflow]   last: reward")
    assert lines[2] == f"[rlflow]   run directory: {run_dir}"


def test_quiet_and_verbose_together_are_refused():
    result = rlflow("run", PIPELINE, "-q", "-v")
    assert result.returncode == 2 and "choose one of --quiet and --verbose" in result.stderr


def test_a_sink_and_a_drop_from_the_command_line_reach_the_run(checkpointed_run):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(checkpointed_run / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("critic/score/mean")] == [1, 2]
    stages = [s["name"] for s in yaml.safe_load((checkpointed_run / "pipeline.resolved.yaml").read_text())["stages"]]
    assert "ref_log_prob" not in stages and "generate" in stages


def test_an_unknown_sink_is_one_line_with_exit_2():
    result = rlflow("run", "pipelines/ranking_grpo.yaml", "--sink", "wandbb", timeout=120)
    assert result.returncode == 2
    assert result.stderr == "error: --sink: unknown metrics sink 'wandbb' (did you mean 'wandb'?)\n"

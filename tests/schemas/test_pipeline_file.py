"""load_pipeline: every shipped pipeline validates; the LoadedPipeline API; every problem reported at once."""

from __future__ import annotations

import pytest
import yaml
from schema_helpers import BIRD, MINIMAL, REPO, load_text, problems_of

from rlflow.check import load_pipeline
from rlflow.errors import ConfigError
from rlflow.schemas.diagnostics import Diagnostic, format_path, parse_path
from rlflow.schemas.pipeline import Pipeline
from rlflow.schemas.pipeline_file import LoadedPipeline
from rlflow.schemas.project import load_project_config

PIPELINES = sorted((REPO / "pipelines").glob("*.yaml"))


def test_pipelines_are_shipped():
    assert BIRD in PIPELINES
    assert REPO / "pipelines" / "ranking_ppo.yaml" in PIPELINES  # PPO with a critic: validated below like the rest


@pytest.mark.parametrize("path", PIPELINES, ids=lambda p: p.name)
def test_every_shipped_pipeline_validates(path, monkeypatch):
    monkeypatch.chdir(REPO)
    loaded = load_pipeline(path.relative_to(REPO))
    assert isinstance(loaded.spec, Pipeline) and loaded.spec.stages


def test_loaded_pipeline_api(monkeypatch):
    monkeypatch.chdir(REPO)
    loaded = load_pipeline("pipelines/bird_grpo.yaml", ["bird_root=/data/bird"], check_paths=False)
    assert isinstance(loaded, LoadedPipeline)
    assert str(loaded.path) == "pipelines/bird_grpo.yaml"
    assert "{{ bird_root }}" in loaded.source and "{{" not in loaded.rendered
    assert loaded.data["data"]["train"] == "/data/bird/train.json"
    assert loaded.project.root == REPO
    assert len(loaded.spec.stages) == 7 and set(loaded.spec.resources) == {"actor_pool", "reward_pool"}


def test_resolved_yaml_round_trips(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    loaded = load_pipeline(BIRD, ["stages.0.with.temperature=0.5"])
    text = loaded.resolved_yaml()
    assert "{{" not in text and yaml.safe_load(text)["stages"][0]["with"] == {"temperature": 0.5}
    copy = tmp_path / "pipeline.resolved.yaml"
    copy.write_text(text)
    again = load_pipeline(copy, project=load_project_config(tmp_path), check_paths=False)  # its data is in REPO
    assert again.spec == loaded.spec
    assert again.resolved_yaml() == text


def test_missing_file_is_a_diagnostic(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_pipeline(tmp_path / "nope.yaml", project=load_project_config(tmp_path))
    assert str(info.value.diagnostics[0]).endswith("nope.yaml:1:1: cannot read the pipeline: No such file or directory")


def test_schema_and_rule_errors_are_reported_together(project_dir):
    text = MINIMAL.replace("{train: data/train.json}", "{train: data/train.json, shufle: true}")
    text = text.replace("ppo_mini_batch_size: 4}", "ppo_mini_batch_size: 9}")
    text = text.replace("on: rw}", "on: rww}").replace("uses: old_log_prob", "uses: old_log_prb")
    text = text.replace("algorithm: {n: 4}", "algorithm: {n: four}")
    problems = problems_of(project_dir, text)
    assert problems == [
        "2:32: data.shufle: unknown key 'shufle' (did you mean 'shuffle'?)",
        "3:16: algorithm.n: expected an integer, got string 'four'",
        "4:53: trainer.ppo_mini_batch_size: train_batch_size 8 is smaller than ppo_mini_batch_size 9 "
        "(verl refuses this too) (set ppo_mini_batch_size to at most 8)",
        "10:47: stages[1].on: unknown resource 'rww' (did you mean 'rw'?)",
        "11:32: stages[2].uses: unknown stage kind 'old_log_prb'; known kinds: "
        + ", ".join(__import__("rlflow.stages", fromlist=["STAGE_KINDS"]).STAGE_KINDS.names())
        + " (did you mean 'old_log_prob'?)",
    ]


def test_a_broken_stage_does_not_cause_false_alarms(project_dir):
    text = MINIMAL.replace("on: pool}\n  - {name: reward", "on: pool, x: 1}\n  - {name: reward")
    text = text.replace("{name: reward, uses: text2sql_reward, on: rw}", "{name: reward, uses: 7, on: rw}")
    problems = problems_of(project_dir, text)
    assert problems == [
        "9:48: stages[0].x: unknown key 'x' (known keys: name, on, timeout_s, uses, with)",
        "10:26: stages[1].uses: expected a string, got integer 7",
    ]


def test_broken_resources_silence_resource_rules(project_dir):
    text = MINIMAL.replace("  pool: {type: local, device: cpu}\n  rw: {type: cpu}\n", "  - pool\n")
    problems = problems_of(project_dir, text)
    assert problems == ["6:3: resources: expected a mapping, got list ['pool']"]


def test_every_diagnostic_has_a_file_and_a_line(project_dir):
    text = "name: 1x\ndata: 3\nstages: {}\nextra: 1\n"
    with pytest.raises(ConfigError) as info:
        load_text(project_dir, text)
    assert len(info.value.diagnostics) == 4
    assert all(d.file.endswith("p.yaml") and d.line >= 1 for d in info.value.diagnostics)


def test_diagnostic_text_and_paths():
    d = Diagnostic(
        "bird_grpo.yaml", 14, 5, "stages[2].on", "unknown resource 'actor_pol'", "did you mean 'actor_pool'?"
    )
    assert str(d) == "bird_grpo.yaml:14:5: stages[2].on: unknown resource 'actor_pol' (did you mean 'actor_pool'?)"
    assert str(Diagnostic("f", 1, 1, "", "empty")) == "f:1:1: empty"
    assert d.to_dict()["fix"] == "did you mean 'actor_pool'?"
    assert (
        parse_path("stages[2].with.temperature")
        == parse_path("stages.2.with.temperature")
        == ("stages", 2, "with", "temperature")
    )
    assert format_path(("stages", 2, "on")) == "stages[2].on"

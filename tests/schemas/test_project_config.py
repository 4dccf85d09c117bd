"""rlflow.yaml: found by walking up, optional, strict, errors positioned like pipeline errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError
from schema_helpers import REPO

from rlflow.errors import ConfigError
from rlflow.schemas.project import ProjectConfig, find_project_file, load_project_config


def test_found_by_walking_up_from_a_subfolder(tmp_path, monkeypatch):
    (tmp_path / "rlflow.yaml").write_text("vars: {a: 1}\nruns_dir: out\nray: {address: auto, num_cpus: 4}\n")
    deep = tmp_path / "x" / "y"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    config = load_project_config()
    assert config.root == tmp_path.resolve()
    assert config.file == tmp_path.resolve() / "rlflow.yaml"
    assert config.vars == {"a": 1} and config.runs_dir == "out"
    assert config.ray.address == "auto" and config.ray.num_cpus == 4 and config.ray.init == {}
    assert config.resolve("data/x.json") == tmp_path.resolve() / "data/x.json"
    assert config.resolve("/abs/x") == Path("/abs/x")
    assert load_project_config(deep).root == tmp_path.resolve()


def test_a_home_of_a_user_who_does_not_exist_is_a_plain_relative_path(tmp_path):
    """pathlib's expanduser raised RuntimeError on ``~0/x`` (no user named 0): validate ended in a traceback."""
    (tmp_path / "rlflow.yaml").write_text("vars: {}\n")
    config = load_project_config(tmp_path)
    assert config.resolve("~0/x.json") == tmp_path.resolve() / "~0/x.json"
    assert config.resolve("~/x.json") == Path.home() / "x.json"


def test_defaults_when_there_is_none(tmp_path):
    assert find_project_file(tmp_path) is None
    config = load_project_config(tmp_path)
    assert config.root == tmp_path.resolve() and config.file is None
    assert config.model_dump() == ProjectConfig().model_dump()
    assert config.logging.sinks == ["console", "jsonl"] and config.plugins == [] and config.inventory is None
    assert config.resolve("runs") == tmp_path.resolve() / "runs"


def test_the_repository_config_loads():
    config = load_project_config(REPO / "pipelines")
    assert config.root == REPO and set(config.vars) >= {"model_path", "bird_root"}


def test_config_is_frozen(tmp_path):
    config = load_project_config(tmp_path)
    with pytest.raises(ValidationError):
        config.runs_dir = "x"


@pytest.mark.parametrize(
    "text, expected",
    [
        ("ray: {adress: auto}\n", "rlflow.yaml:1:7: ray.adress: unknown key 'adress' (did you mean 'address'?)"),
        (
            "logging:\n  sinks: [console, wandbb]\n",
            "rlflow.yaml:2:20: logging.sinks[1]: 'wandbb' is not one of console, jsonl, tensorboard, wandb, mlflow "
            "(did you mean 'wandb'?)",
        ),
        (
            "inventory:\n  nodes:\n    - {name: a, gpus: -1, cpus: 4}\n",
            "rlflow.yaml:3:23: inventory.nodes[0].gpus: should be greater than or equal to 0; got -1",
        ),
        (
            "inventory:\n  nodes:\n    - {name: a, cpus: 4}\n    - {name: a, cpus: 4}\n",
            "rlflow.yaml:4:14: inventory.nodes[1].name: duplicate node name 'a' (also nodes[0])",
        ),
        ("- a\n", "rlflow.yaml:1:1: rlflow.yaml must be a mapping of settings (see docs/pipeline_format.md)"),
        ("vars: {a: 1, a: 2}\n", "rlflow.yaml:1:14: vars.a: duplicate key 'a', first set on line 1"),
        ("runs_dir: [a\n", "rlflow.yaml:2:1: YAML syntax error"),
        (
            "logging:\n  wandb: {mode: onlin}\n",
            "rlflow.yaml:2:17: logging.wandb.mode: 'onlin' is not one of online, offline, disabled (did you mean 'online'?)",
        ),
    ],
)
def test_errors_are_positioned(text, expected, tmp_path, monkeypatch):
    (tmp_path / "rlflow.yaml").write_text(text)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as info:
        load_project_config()
    assert any(str(d).startswith(expected) for d in info.value.diagnostics), info.value


def test_empty_file_means_defaults(tmp_path):
    (tmp_path / "rlflow.yaml").write_text("# nothing yet\n")
    assert load_project_config(tmp_path).model_dump() == ProjectConfig().model_dump()


def test_wandb_and_mlflow_settings_and_sinks_chosen_per_run(tmp_path):
    (tmp_path / "rlflow.yaml").write_text(
        "logging:\n"
        "  sinks: [console, jsonl, wandb]\n"
        "  wandb: {project: grpo, entity: team, tags: [bird]}\n"
        "  mlflow: {experiment: exp, tags: {task: bird}}\n"
    )
    config = load_project_config(tmp_path)
    w, m = config.logging.wandb, config.logging.mlflow
    assert (w.project, w.entity, w.name, w.tags, w.mode) == ("grpo", "team", None, ["bird"], None)
    assert (m.experiment, m.tracking_uri, m.tags) == ("exp", None, {"task": "bird"})
    chosen = config.with_sinks(["tensorboard", "mlflow", "tensorboard"])
    assert chosen.logging.sinks == ["tensorboard", "mlflow"] and chosen.logging.wandb == w
    assert chosen.root == config.root and chosen.file == config.file and config.logging.sinks[-1] == "wandb"
    with pytest.raises(
        ConfigError, match=r"--sink: unknown metrics sink 'tensorbord' \(did you mean 'tensorboard'\?\)"
    ):
        config.with_sinks(["tensorbord"])

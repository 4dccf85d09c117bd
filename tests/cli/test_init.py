"""``rlflow init``: the starter project it writes runs on its own, and it never overwrites by accident."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from rlflow.assets import ASSETS, BIRD_SAMPLE, PIPELINES, WARM_START
from rlflow.cli.app import app
from rlflow.errors import TargetExists

REPO = Path(__file__).resolve().parents[2]


def init(*args: str):
    return CliRunner().invoke(app, ["init", *args])


def test_writes_the_starter_project_and_says_what_next(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = init("demo")
    assert result.exit_code == 0, result.output
    demo = tmp_path / "demo"
    for shipped, copied in (
        (ASSETS / "rlflow.yaml", demo / "rlflow.yaml"),
        (PIPELINES / "bird_grpo.yaml", demo / "pipelines" / "bird_grpo.yaml"),
        (PIPELINES / "bird_grpo_remote.yaml", demo / "pipelines" / "bird_grpo_remote.yaml"),
        (BIRD_SAMPLE / "train.json", demo / "data" / "bird_sample" / "train.json"),
        (WARM_START / "model.safetensors", demo / "models" / "tiny-sql-warm" / "model.safetensors"),
    ):
        assert copied.read_bytes() == shipped.read_bytes(), copied
    assert len(list((demo / "data" / "bird_sample" / "databases").glob("*/*.sqlite"))) == 5
    assert not list(demo.rglob("__init__.py")) and not list(demo.rglob("__pycache__"))
    assert "data/bird_sample/ (8 files)" in result.output and "models/tiny-sql-warm/ (7 files)" in result.output
    assert result.output.rstrip().endswith(
        "next, in demo:\n  rlflow validate pipelines/bird_grpo.yaml\n"
        "  rlflow graph pipelines/bird_grpo.yaml\n"
        "  rlflow run pipelines/bird_grpo.yaml"
    )


def test_the_project_resolves_everything_inside_itself(tmp_path, monkeypatch):
    from rlflow.check import load_pipeline
    from rlflow.schemas.project import load_project_config

    assert init(str(tmp_path)).exit_code == 0
    monkeypatch.chdir(tmp_path / "pipelines")  # the project is found from a sub-folder too
    project = load_project_config()
    assert project.root == tmp_path
    spec = load_pipeline(tmp_path / "pipelines" / "bird_grpo.yaml", project=project).spec
    assert project.resolve(spec.model.path) == tmp_path / "models" / "tiny-sql-warm"
    assert project.resolve(spec.data.train) == tmp_path / "data" / "bird_sample" / "train.json"


def test_default_folder_is_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = init()
    assert result.exit_code == 0, result.output
    assert (tmp_path / "rlflow.yaml").is_file() and "\nnext:\n" in result.output


def test_refuses_to_overwrite_unless_forced(tmp_path):
    assert init(str(tmp_path)).exit_code == 0
    (tmp_path / "rlflow.yaml").write_text("vars: {mine: 1}\n")
    (tmp_path / "notes.txt").write_text("kept")
    result = init(str(tmp_path))
    assert isinstance(result.exception, TargetExists)
    assert "rlflow.yaml" in str(result.exception) and "--force" in str(result.exception)
    assert (tmp_path / "rlflow.yaml").read_text() == "vars: {mine: 1}\n"

    assert init(str(tmp_path), "--force").exit_code == 0
    assert (tmp_path / "rlflow.yaml").read_bytes() == (ASSETS / "rlflow.yaml").read_bytes()
    assert (tmp_path / "notes.txt").read_text() == "kept"


def test_refusal_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "pipelines" / "bird_grpo.yaml").write_text("name: mine\n")
    cmd = [sys.executable, "-m", "rlflow.cli.main", "init", str(tmp_path)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result
    assert result.stderr.startswith("error: ") and "Traceback" not in result.stderr
    assert f"{tmp_path / 'pipelines' / 'bird_grpo.yaml'}" in result.stderr
    assert not (tmp_path / "rlflow.yaml").exists()  # all or nothing


def test_a_file_is_not_a_folder(tmp_path):
    target = tmp_path / "demo"
    target.write_text("x")
    result = init(str(target))
    assert isinstance(result.exception, TargetExists) and "not a folder" in str(result.exception)


def test_the_repository_runs_the_shipped_files():
    """One copy: the package's pipelines are the repository's, and the project vars lead into the package."""
    import yaml

    assert PIPELINES.resolve() == (REPO / "pipelines").resolve()
    project_vars = yaml.safe_load((REPO / "rlflow.yaml").read_text())["vars"]
    assert (REPO / project_vars["bird_root"]).resolve() == BIRD_SAMPLE
    assert (REPO / project_vars["model_path"]).resolve() == WARM_START


def test_a_folder_under_a_file_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "afile").write_text("x")
    cmd = [sys.executable, "-m", "rlflow.cli.main", "init", str(tmp_path / "afile" / "demo")]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip() == (
        f"error: {tmp_path / 'afile' / 'demo' / 'rlflow.yaml'}: cannot write there, {tmp_path / 'afile'} is a file, "
        "not a folder; give a folder you can write to"
    )

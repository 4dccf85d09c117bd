"""The path rule: data files, the databases folder and the model directory must exist, each reported at its line."""

from __future__ import annotations

from schema_helpers import MINIMAL

from rlflow.check import load_pipeline
from rlflow.errors import ConfigError
from rlflow.schemas.project import load_project_config

BIRD = MINIMAL.replace(
    "data: {train: data/train.json}",
    "data: {format: bird, train: data/train.json, val: data/dev.json, databases: data/databases}\n"
    "model: {path: models/policy, tokenizer: models/tok}",
)


def problems(folder, text: str = BIRD, **kwargs) -> list[str]:
    (folder / "p.yaml").write_text(text)
    try:
        load_pipeline(folder / "p.yaml", project=load_project_config(folder), **kwargs)
    except ConfigError as exc:
        return [str(d).split(":", 1)[1] for d in exc.diagnostics]
    return []


def test_each_missing_path_is_reported_at_its_line_with_what_to_do(project_dir):
    root = project_dir
    assert problems(project_dir) == [
        f"2:29: data.train: no file at {root}/data/train.json, resolved from the project root {root} "
        "(point it at the train split file, or validate with --no-check-paths on a machine without the data)",
        f"2:51: data.val: no file at {root}/data/dev.json, resolved from the project root {root} "
        "(point it at the validation split file, or remove data.val, "
        "or validate with --no-check-paths on a machine without the data)",
        f"2:77: data.databases: no folder at {root}/data/databases, resolved from the project root {root} "
        "(point it at the folder holding <db_id>/<db_id>.sqlite, "
        "or validate with --no-check-paths on a machine without the data)",
        f"3:15: model.path: no folder at {root}/models/policy, resolved from the project root {root} "
        "(point it at a local Hugging Face model directory (rlflow never downloads), builtin:tiny-qwen2 or "
        "builtin:tiny-sql-warm, "
        "or validate with --no-check-paths on a machine without the data)",
        f"3:41: model.tokenizer: no folder at {root}/models/tok, resolved from the project root {root} "
        "(point it at a local tokenizer directory, or remove model.tokenizer, "
        "or validate with --no-check-paths on a machine without the data)",
    ]
    assert problems(project_dir, check_paths=False) == []


def test_paths_that_exist_pass_wherever_the_command_runs(project_dir, monkeypatch, tmp_path_factory):
    for folder in ("data/databases", "models/policy", "models/tok"):
        (project_dir / folder).mkdir(parents=True)
    for file in ("data/train.json", "data/dev.json"):
        (project_dir / file).write_text("[]")
    monkeypatch.chdir(tmp_path_factory.mktemp("elsewhere"))  # relative paths start at the project root, not here
    assert problems(project_dir) == []


def test_a_folder_for_a_file_and_a_file_for_a_folder_are_named(project_dir):
    (project_dir / "data" / "train.json").mkdir(parents=True)
    (project_dir / "models").mkdir()
    (project_dir / "models" / "policy").write_text("weights?")
    found = problems(project_dir)
    assert f"data.train: {project_dir}/data/train.json is a folder, not a regular file" in found[0]
    assert any(f"model.path: {project_dir}/models/policy is a file, not a folder" in p for p in found)


def test_databases_of_another_format_and_builtin_models_are_not_paths(project_dir):
    text = BIRD.replace("format: bird", "format: jsonl").replace("path: models/policy", "path: 'builtin:tiny-qwen2'")
    checked = [p.split(":")[2].strip() for p in problems(project_dir, text)]
    assert checked == ["data.train", "data.val", "model.tokenizer"]


def test_an_absolute_path_is_named_as_it_is(project_dir, tmp_path_factory):
    missing = tmp_path_factory.mktemp("abs") / "train.json"
    found = problems(project_dir, BIRD.replace("train: data/train.json", f"train: {missing}"))
    assert found[0] == (
        f"2:29: data.train: no file at {missing} "
        "(point it at the train split file, or validate with --no-check-paths on a machine without the data)"
    )


def test_verl_data_needs_no_databases(project_dir, rows_reward):
    (project_dir / "data").mkdir()
    (project_dir / "data" / "train.parquet").write_bytes(b"")
    text = MINIMAL.replace("data: {train: data/train.json}", "data: {format: verl, train: data/train.parquet}")
    assert problems(project_dir, text.replace("uses: text2sql_reward", f"uses: {rows_reward}")) == []

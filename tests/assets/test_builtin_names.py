"""Packaged warm starts and samples by name (``builtin:tiny-sql-warm``, ``builtin:bird_sample``...) from any project."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlflow.assets import BIRD_SAMPLE, RANK_WARM_START, RANKING, WARM_START, builtin_path

REPO = Path(__file__).resolve().parents[2]


def test_each_name_is_its_packaged_folder_and_paths_go_inside():
    assert (
        builtin_path("builtin:tiny-sql-warm") == WARM_START
        and builtin_path("builtin:tiny-rank-warm") == RANK_WARM_START
    )
    assert builtin_path("builtin:bird_sample/train.json") == BIRD_SAMPLE / "train.json"
    assert builtin_path("builtin:ranking/train.parquet").is_file() and builtin_path("builtin:ranking") == RANKING
    assert builtin_path("builtin:tiny-qwen2") is None, "a model made in code, not a folder"
    assert builtin_path("models/tiny-sql-warm") is None
    with pytest.raises(ValueError, match="unknown built-in 'builtin:tiny-sql-wram'; the packaged ones are "):
        builtin_path("builtin:tiny-sql-wram")


def rlflow(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "rlflow.cli.main", *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_a_project_anywhere_trains_on_the_packaged_sample_and_warm_start(tmp_path):
    (tmp_path / "rlflow.yaml").write_text("vars: {model_path: builtin:tiny-sql-warm, bird_root: builtin:bird_sample}\n")
    (tmp_path / "p.yaml").write_text((REPO / "pipelines" / "bird_grpo.yaml").read_text())
    result = rlflow("validate", "p.yaml", cwd=tmp_path)  # paths checked: each name is a real folder
    assert result.returncode == 0 and "p.yaml: ok" in result.stdout, result.stderr

    from rlflow.check import load_pipeline
    from rlflow.data import load_split
    from rlflow.data.tokenizer import load_prompt_tokenizer
    from rlflow.schemas.project import load_project_config

    spec = load_pipeline(tmp_path / "p.yaml", project=load_project_config(tmp_path)).spec
    tokenizer = load_prompt_tokenizer(spec.model, tmp_path)
    rows = load_split(spec, "train", tmp_path, tokenizer)
    assert len(rows) > 0
    from rlflow.data.tokenizer import builtin_name, local_dir

    assert local_dir(spec.model.path, tmp_path, "model.path") == WARM_START, "the model loads from the package"
    assert builtin_name(spec.model.path) is None and builtin_name("builtin:tiny-qwen2") == "tiny-qwen2"


def test_an_unknown_name_is_one_line_naming_the_known_ones(tmp_path):
    (tmp_path / "rlflow.yaml").write_text("vars: {model_path: builtin:tiny-sql-wram, bird_root: builtin:bird_sample}\n")
    (tmp_path / "p.yaml").write_text((REPO / "pipelines" / "bird_grpo.yaml").read_text())
    result = rlflow("validate", "p.yaml", cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert (
        "model.path: unknown built-in 'builtin:tiny-sql-wram'; the packaged ones are builtin:bird_sample"
        in result.stderr
    )

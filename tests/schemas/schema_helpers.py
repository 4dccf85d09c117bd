"""Helpers for the loading/validation tests: project folders, the corpus header reader, the CLI runner."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
BIRD = REPO / "pipelines" / "bird_grpo.yaml"
BROKEN = Path(__file__).resolve().parent / "broken"
PROJECT_VARS = {"model_path": "builtin:tiny-qwen2", "bird_root": "data/bird_sample"}
_HEADER = re.compile(rb"^# (expect|set|project): ?(.*)$")


def write_project(folder: Path, extra: dict | None = None) -> Path:
    """An rlflow.yaml with the template vars the shipped pipelines use (plus ``extra`` settings)."""
    config = {"vars": dict(PROJECT_VARS), **(extra or {})}
    (folder / "rlflow.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    return folder


def read_case(path: Path) -> dict:
    """The header of a corpus file: ``# expect: LINE:text``, ``# set: a.b=1``, ``# project: {yaml}``."""
    case = {"expect": [], "set": [], "project": None}
    for raw in path.read_bytes().splitlines():
        match = _HEADER.match(raw)
        if not match:
            if raw.startswith(b"#"):
                continue
            break
        key, value = match.group(1).decode(), match.group(2).decode("utf-8")
        if key == "expect":
            line, _, text = value.partition(":")
            case["expect"].append((int(line), text))
        elif key == "set":
            case["set"].append(value)
        else:
            case["project"] = yaml.safe_load(value)
    return case


def run_cli(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    """``rlflow ARGS`` in a fresh interpreter, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "rlflow.cli.main", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def load_text(folder: Path, text: str, sets=(), name: str = "p.yaml"):
    """Write ``text`` as a pipeline in ``folder`` (which holds rlflow.yaml) and load it.

    The pipelines of these tests name data and models that do not exist: paths are not checked
    (tests/check/test_paths.py tests that rule).
    """
    from rlflow.check import load_pipeline
    from rlflow.schemas.project import load_project_config

    path = folder / name
    path.write_text(text, encoding="utf-8")
    return load_pipeline(path, sets, load_project_config(folder), check_paths=False)


def problems_of(folder: Path, text: str, sets=()) -> list[str]:
    """The diagnostics (as text, file name dropped) of a pipeline that must be invalid."""
    from rlflow.errors import ConfigError

    try:
        load_text(folder, text, sets)
    except ConfigError as exc:
        return [str(d).split(":", 1)[1] for d in exc.diagnostics]
    raise AssertionError("the pipeline was valid")


MINIMAL = """\
name: tiny
data: {train: data/train.json}
algorithm: {n: 4}
trainer: {train_batch_size: 8, ppo_mini_batch_size: 4}
resources:
  pool: {type: local, device: cpu}
  rw: {type: cpu}
stages:
  - {name: generate, uses: generate, on: pool}
  - {name: reward, uses: text2sql_reward, on: rw}
  - {name: old_log_prob, uses: old_log_prob, on: pool}
  - {name: advantage, uses: grpo_advantage, on: driver}
  - {name: update_actor, uses: update_actor, on: pool}
  - {name: sync_weights, uses: sync_weights, on: pool}
"""

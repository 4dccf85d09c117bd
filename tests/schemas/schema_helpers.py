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

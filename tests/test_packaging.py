"""The wheel outside the repository: the core install validates, draws and writes projects without torch.

Builds the wheel from a clean copy of what it is built from (pyproject.toml, README.md,
rlflow/: no stale build/ folder can leak in), installs it without extras into a fresh venv
(the core dependencies come from the package index, through pip's cache), and runs the first
commands a new user runs, in a project written by ``rlflow init``. ``rlflow run`` there must
name the extra to install in one line. About 30 s with a warm pip cache.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _sh(*cmd, cwd: Path | None = None, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    if check and result.returncode != 0:
        pytest.fail(f"{' '.join(map(str, cmd))} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


@pytest.fixture(scope="module")
def core_venv(tmp_path_factory) -> Path:
    """A fresh venv holding the rlflow wheel and its core dependencies only; its bin folder."""
    root = tmp_path_factory.mktemp("packaging")
    source = root / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    shutil.copytree(REPO / "rlflow", source / "rlflow", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    _sh(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", root / "dist", source)
    (wheel,) = (root / "dist").glob("rlflow-*.whl")
    _sh(sys.executable, "-m", "venv", root / "venv")
    bin_dir = root / "venv" / "bin"
    _sh(bin_dir / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check", wheel)
    return bin_dir


@pytest.fixture(scope="module")
def clean_env() -> dict:
    """The environment without this checkout on the path: the venv must find only what it installed."""
    drop = ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "RLFLOW_DEBUG")
    return {k: v for k, v in os.environ.items() if k not in drop}


def test_core_install_runs_the_first_commands(core_venv, clean_env, tmp_path):
    rlflow = core_venv / "rlflow"
    _sh(rlflow, "init", "demo", cwd=tmp_path, env=clean_env)
    demo = tmp_path / "demo"
    assert (demo / "models" / "tiny-sql-warm" / "model.safetensors").is_file()
    assert (demo / "models" / "tiny-rank-warm" / "model.safetensors").is_file()
    pipelines = ("pipelines/bird_grpo.yaml", "pipelines/bird_grpo_remote.yaml", "pipelines/ranking_grpo.yaml")
    validated = _sh(rlflow, "validate", *pipelines, cwd=demo, env=clean_env)
    assert "pipelines/bird_grpo.yaml: ok" in validated.stdout
    assert "pipelines/ranking_grpo.yaml: ok" in validated.stdout  # its reward function loads from examples/
    graph = _sh(rlflow, "graph", "pipelines/bird_grpo.yaml", cwd=demo, env=clean_env)
    assert "update_actor" in graph.stdout
    assert '"properties"' in _sh(rlflow, "schema", cwd=demo, env=clean_env).stdout


def test_core_install_has_no_training_stack(core_venv, clean_env, tmp_path):
    probe = (
        "import importlib.util as u, rlflow; print(rlflow.__file__); "
        "print([m for m in ('torch', 'ray', 'verl', 'numpy') if u.find_spec(m)])"
    )
    where, found = _sh(core_venv / "python", "-c", probe, cwd=tmp_path, env=clean_env).stdout.splitlines()
    assert Path(where).is_relative_to(core_venv.parent), where  # the wheel, not this checkout
    assert found == "[]"


def test_training_commands_name_the_extra(core_venv, clean_env, tmp_path):
    _sh(core_venv / "rlflow", "init", cwd=tmp_path, env=clean_env)
    for command in (
        ["run", "pipelines/bird_grpo.yaml"],
        ["plot", "runs"],
        ["export", "runs", "-o", "model"],
        ["import-verl", "ppo_trainer"],
    ):
        result = _sh(core_venv / "rlflow", *command, cwd=tmp_path, env=clean_env, check=False)
        assert result.returncode == 2, result
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
        assert f"`rlflow {command[0]}` needs" in result.stderr and "pip install 'rlflow[train]'" in result.stderr

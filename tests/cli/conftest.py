"""Fixtures of the CLI tests (helpers live in cli_helpers.py): real short training runs that several
commands then read: one of the shipped BIRD pipeline (for `run`'s console, `plot` and `graph --timeline`)
and one with a checkpoint at each step, chosen sinks and a dropped stage (for `run`'s options and `export`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import SHORT_RUN
from cli_helpers import rlflow as cli_rlflow

sys.path.insert(0, str(Path(__file__).parents[1] / "runtime"))  # runtime_helpers: shared with tests/runtime

from runtime_helpers import REPO, rlflow, small_sets  # noqa: E402


@pytest.fixture(scope="session")
def short_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """Two steps of the shipped pipeline at small sizes on the CPU (embedded Ray), validating before
    training and at step 2: the run directory and the finished process (its stdout was a pipe)."""
    run_dir = tmp_path_factory.mktemp("short") / "two-steps"
    sets = small_sets("trainer.total_steps=2", "trainer.save_freq=-1", "trainer.test_freq=2")
    result = rlflow("run", str(REPO / "pipelines" / "bird_grpo.yaml"), "--run-dir", str(run_dir), *sets)
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir, result


@pytest.fixture(scope="session")
def checkpointed_run(tmp_path_factory) -> Path:
    """The run directory of a real ``rlflow run`` (Ray, torch, the CPU) of ``SHORT_RUN``."""
    run_dir = tmp_path_factory.mktemp("checkpointed") / "run"
    result = cli_rlflow("run", *SHORT_RUN, "--run-dir", str(run_dir))
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir

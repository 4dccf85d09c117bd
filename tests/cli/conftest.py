"""Fixtures of the CLI tests: one real short run shared by the tests of `rlflow run`, `plot` and `graph --timeline`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

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

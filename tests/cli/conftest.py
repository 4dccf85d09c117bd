"""Fixtures of the CLI tests (helpers live in cli_helpers.py): one real short training run that several
commands then read."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import SHORT_RUN, rlflow


@pytest.fixture(scope="session")
def short_run(tmp_path_factory) -> Path:
    """The run directory of a real ``rlflow run`` (Ray, torch, the CPU) of ``SHORT_RUN``."""
    run_dir = tmp_path_factory.mktemp("short") / "run"
    result = rlflow("run", *SHORT_RUN, "--run-dir", str(run_dir))
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir

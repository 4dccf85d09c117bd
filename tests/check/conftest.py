"""Fixtures for the validator's tests: they load pipelines as the schema tests do, with the same helpers,
and edit copies of verl's trainer for the verl order check (verl_copy.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "schemas"))  # schema_helpers: shared with tests/schemas
sys.path.insert(0, str(Path(__file__).parent))  # verl_copy: shared with tests/cli and tests/runtime

from schema_helpers import write_project  # noqa: E402
from verl_copy import VerlCopy  # noqa: E402


@pytest.fixture
def project_dir(tmp_path, monkeypatch):
    """A fresh project folder (with an rlflow.yaml) as the working directory."""
    write_project(tmp_path)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def rows_reward():
    """A reward stage kind, ``test_rows_reward``, that reads any data format (as a reward for verl rows would)."""
    from rlflow.stages.base import StageKind
    from rlflow.stages.registry import STAGE_KINDS, register_stage

    @register_stage
    class RowsReward(StageKind):
        name = "test_rows_reward"
        role = "reward"
        verl_timer = "reward"
        reads_fields = ("response_text", "reward_info")
        writes_fields = ("token_level_scores", "scores")
        allowed_on = frozenset({"cpu"})

    yield RowsReward.name
    STAGE_KINDS.unregister(RowsReward.name)


@pytest.fixture
def verl_copy(tmp_path) -> VerlCopy:
    """An editable copy of the installed verl's sync trainer (read it with ``root=verl_copy.root``)."""
    return VerlCopy(tmp_path / "verl_src")

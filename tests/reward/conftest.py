"""Fixtures for the reward tests: a private copy of one of the shipped sample's databases."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from reward_calls import runner_of  # noqa: F401  (the fixture, for these tests)

from rlflow.assets import BIRD_SAMPLE

SAMPLE_DB = BIRD_SAMPLE / "databases" / "company" / "company.sqlite"


@pytest.fixture
def company_db(tmp_path: Path) -> Path:
    """company.sqlite (tables dept, emp with 40 rows) alone in its own folder, so new files would show."""
    path = tmp_path / "company" / "company.sqlite"
    path.parent.mkdir()
    shutil.copyfile(SAMPLE_DB, path)
    return path

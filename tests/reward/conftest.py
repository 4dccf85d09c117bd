"""Fixtures for the reward tests: a private copy of one of the shipped sample's databases."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

SAMPLE_DB = Path(__file__).resolve().parents[2] / "data" / "bird_sample" / "databases" / "company" / "company.sqlite"


@pytest.fixture
def company_db(tmp_path: Path) -> Path:
    """company.sqlite (tables dept, emp with 40 rows) alone in its own folder, so new files would show."""
    path = tmp_path / "company" / "company.sqlite"
    path.parent.mkdir()
    shutil.copyfile(SAMPLE_DB, path)
    return path

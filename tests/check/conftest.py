"""Fixtures for the validator's tests: they load pipelines as the schema tests do, with the same helpers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "schemas"))  # schema_helpers: shared with tests/schemas

from schema_helpers import write_project  # noqa: E402


@pytest.fixture
def project_dir(tmp_path, monkeypatch):
    """A fresh project folder (with an rlflow.yaml) as the working directory."""
    write_project(tmp_path)
    monkeypatch.chdir(tmp_path)
    return tmp_path

"""Fixtures for the loading/validation tests."""

from __future__ import annotations

import pytest
from schema_helpers import write_project


@pytest.fixture
def project_dir(tmp_path, monkeypatch):
    """A fresh project folder (with an rlflow.yaml) as the working directory."""
    write_project(tmp_path)
    monkeypatch.chdir(tmp_path)
    return tmp_path

"""Fixtures for plan tests: stage kinds registered for one test."""

from __future__ import annotations

import pytest

from rlflow.stages.registry import STAGE_KINDS, register_stage


@pytest.fixture
def register_kinds():
    """Register StageKind classes for one test; they are unregistered afterwards."""
    names: list[str] = []

    def register(*kinds):
        for kind in kinds:
            register_stage(kind)
            names.append(kind.name)

    yield register
    for name in names:
        STAGE_KINDS.unregister(name)

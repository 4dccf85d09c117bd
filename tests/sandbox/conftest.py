"""Fixtures of the sandbox tests."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from reward_calls import runner_of  # noqa: F401  (the fixture, for these tests)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def attempts(tmp_path):
    """Run a script of escape attempts in a fresh Python, given an ``outside`` and an ``inside`` folder as its
    arguments; its printed JSON (attempt -> outcome) and the two folders."""

    def run(script: str, env: dict[str, str] | None = None) -> tuple[dict, Path, Path]:
        outside, inside = tmp_path / "outside", tmp_path / "inside"
        outside.mkdir()
        inside.mkdir()
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(script), str(outside), str(inside)],
            capture_output=True,
            text=True,
            timeout=120,
            env={"PYTHONPATH": str(REPO), **(env or {})},
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout), outside, inside

    return run

"""Helpers for plan tests: small pipelines from YAML text (imported by the tests of this folder)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from rlflow.schemas.pipeline import Pipeline
from rlflow.schemas.safe_yaml import parse_yaml

REPO = Path(__file__).resolve().parents[2]


# A complete GRPO step on a CPU pool; tests append or swap stages.
SMALL = """
name: small
data: {train: train.json}
trainer: {save_freq: -1, test_freq: -1, val_before_train: false}
resources:
  pool: {type: local, device: cpu}
  scorers: {type: cpu, workers: 2}
stages:
  - {name: generate, uses: generate, on: pool}
  - {name: reward, uses: text2sql_reward, on: scorers}
  - {name: old_log_prob, uses: old_log_prob, on: pool}
  - {name: advantage, uses: grpo_advantage, on: driver}
  - {name: update_actor, uses: update_actor, on: pool}
  - {name: sync_weights, uses: sync_weights, on: pool}
"""


def spec_from_yaml(text: str) -> Pipeline:
    """A Pipeline from YAML text, parsed as rlflow parses files (``on:`` stays a string key)."""
    data, _, problems = parse_yaml(textwrap.dedent(text), "test.yaml")
    assert not problems, problems
    return Pipeline.model_validate(data)


def with_stages(*extra: str, text: str = SMALL, drop: tuple[str, ...] = ()) -> Pipeline:
    """SMALL with ``drop`` stage lines removed (by name) and ``extra`` stage lines appended."""
    lines = [line for line in text.splitlines() if not any(f"name: {d}," in line for d in drop)]
    return spec_from_yaml("\n".join(lines + [f"  - {e}" for e in extra]))

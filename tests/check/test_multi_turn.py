"""A multi_turn block copied from verl loads: every key of verl's own block is taken, the ignored ones noted.

The block is read from the installed verl's ``trainer/config/rollout/rollout.yaml`` (the file a
verl user copies it from, Hydra's ``_target_`` included) and pasted under the generate stage.
"""

from __future__ import annotations

import json
from importlib.metadata import distribution
from pathlib import Path

import yaml
from schema_helpers import MINIMAL, load_text, problems_of

GENERATE = "  - {name: generate, uses: generate, on: pool}\n"


def verl_block() -> dict:
    path = Path(distribution("verl").locate_file("verl/trainer/config/rollout/rollout.yaml"))
    return yaml.safe_load(path.read_text())["multi_turn"]


def with_block(block: dict) -> str:
    """MINIMAL whose generate stage (line 9) has ``block`` as its multi_turn, one key a line from line 14."""
    lines = "".join(f"        {key}: {json.dumps(value)}\n" for key, value in block.items())  # JSON is YAML
    stage = f"  - name: generate\n    uses: generate\n    on: pool\n    with:\n      multi_turn:\n{lines}"
    return MINIMAL.replace(GENERATE, stage)


def test_verls_own_block_loads_whole(project_dir):
    block = verl_block()
    assert {"_target_", "tokenization_sanity_check_mode", "num_repeat_rollouts"} <= set(block)
    loaded = load_text(project_dir, with_block({**block, "enable": True}))
    assert loaded.spec.stage("generate").with_["multi_turn"]["enable"] is True
    assert loaded.warnings == ()  # verl's defaults: nothing to note


def test_an_ignored_key_off_verls_default_is_noted_at_its_line(project_dir):
    block = {"enable": True, "tokenization_sanity_check_mode": "disable", "num_repeat_rollouts": 2}
    loaded = load_text(project_dir, with_block(block))
    notes = [str(w).split(":", 1)[1] for w in loaded.warnings]
    assert len(notes) == 2
    assert notes[0].startswith("15:") and "'disable' is ignored: verl 0.9.1's agent loop does not read" in notes[0]
    assert "tokenization_sanity_check_mode either" in notes[0] and "verl's default ('strict')" in notes[0]
    assert notes[1].startswith("16:") and "algorithm.n" in notes[1]
    off = load_text(project_dir, with_block({**block, "enable": False}))
    assert off.warnings == ()  # a disabled block does nothing, as in verl


def test_another_target_is_not_verls_block(project_dir):
    problems = problems_of(project_dir, with_block({"enable": True, "_target_": "my.Config"}))
    assert any("unknown key '_target_'" in p for p in problems)

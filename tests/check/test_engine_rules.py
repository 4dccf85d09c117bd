"""Engine choices are checked at validation: a missing extra is named, log-probs follow the training engine."""

from __future__ import annotations

import importlib.util

import pytest
from schema_helpers import MINIMAL, load_text, problems_of, write_project


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed in this environment")
def test_an_engine_whose_extra_is_missing_is_named_with_the_install_command(tmp_path):
    write_project(tmp_path)
    text = MINIMAL.replace(
        "{name: generate, uses: generate, on: pool}", "{name: generate, uses: generate, on: pool, with: {engine: vllm}}"
    )
    assert any(
        "stages[0].with.engine: engine 'vllm' needs the vllm extra: pip install 'rlflow[vllm]'" in p
        for p in problems_of(tmp_path, text)
    )


def test_deepspeed_log_probs_need_a_deepspeed_update(tmp_path):
    write_project(tmp_path)
    text = MINIMAL.replace(
        "{name: old_log_prob, uses: old_log_prob, on: pool}",
        "{name: old_log_prob, uses: old_log_prob, on: pool, with: {engine: deepspeed}}",
    )
    problems = [p for p in problems_of(tmp_path, text) if "with.engine" in p]
    if importlib.util.find_spec("deepspeed") is None:
        assert any("needs the deepspeed extra" in p for p in problems)
    assert any("stages[2].with.engine: old_log_prob runs on deepspeed but update_actor on torch" in p for p in problems)
    both = text.replace(
        "{name: update_actor, uses: update_actor, on: pool}",
        "{name: update_actor, uses: update_actor, on: pool, with: {engine: deepspeed}}",
    )
    if importlib.util.find_spec("deepspeed") is not None:
        load_text(tmp_path, both)  # valid once both stages agree
    else:
        assert not [p for p in problems_of(tmp_path, both) if "runs on deepspeed but" in p]

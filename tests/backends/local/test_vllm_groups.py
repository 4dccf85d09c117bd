"""How ``VllmRollout`` splits a batch on the CPU (pure: needs no vLLM).

vLLM's CPU worker fails on a seeded row whose prompt is prefilled in chunks, so on the CPU
the rollout hands vLLM groups of rows whose prompts fit one scheduler step's token budget.
"""

from __future__ import annotations

from rlflow.backends.local.vllm_rollout import CPU_MAX_SEQS, VllmRollout


def _rollout(budget):
    rollout = object.__new__(VllmRollout)  # the grouping rule alone, without starting vLLM
    rollout.token_budget = budget
    return rollout


def _inputs(*lengths):
    return [{"prompt_token_ids": [7] * n} for n in lengths]


def test_off_the_cpu_the_batch_is_one_group():
    assert _rollout(None)._groups(_inputs(5, 5, 5)) == [(0, 3)]


def test_groups_fit_the_budget_and_keep_row_order():
    groups = _rollout(10)._groups(_inputs(4, 4, 4, 2, 9))
    assert groups == [(0, 2), (2, 4), (4, 5)]  # each row counts its prompt plus one token


def test_a_prompt_over_the_budget_still_goes_alone():
    assert _rollout(10)._groups(_inputs(20, 3)) == [(0, 1), (1, 2)]


def test_groups_hold_at_most_the_row_cap():
    groups = _rollout(10**9)._groups(_inputs(*([1] * (CPU_MAX_SEQS + 3))))
    assert groups == [(0, CPU_MAX_SEQS), (CPU_MAX_SEQS, CPU_MAX_SEQS + 3)]


def test_an_empty_batch_has_no_group():
    assert _rollout(10)._groups([]) == []

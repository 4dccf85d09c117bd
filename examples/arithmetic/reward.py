"""Reward for the arithmetic task: 1 when the number after the last ``####`` is the right result.

A reward function as a user writes one for rlflow (or for verl's ``custom_reward_function``):
a plain function with verl's signature, no rlflow import. The pipeline names it by path,
``function: examples/arithmetic/reward.py:compute_score``.
"""

import re

ANSWER = re.compile(r"####\s*(-?[\d,]+)")


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """``score`` and ``acc``: 1.0 for the right number after ``####``; ``format_ok``: an answer was given."""
    found = ANSWER.findall(solution_str)
    if not found:
        return {"score": 0.0, "acc": 0.0, "format_ok": 0.0}
    correct = found[-1].replace(",", "") == str(ground_truth).strip()
    return {"score": float(correct), "acc": float(correct), "format_ok": 1.0}

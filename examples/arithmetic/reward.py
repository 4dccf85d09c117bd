"""Reward for the arithmetic task: the number after the last ``####``, checked digit by digit.

A reward function as a user writes one for rlflow (or for verl's ``custom_reward_function``):
a plain function with verl's signature, no rlflow import. The pipeline names it by path,
``function: examples/arithmetic/reward.py:compute_score``.

The score is 1 for the right number. A wrong number earns partial credit, half the share of
its digits that match the right result's, aligned from the units (a wrong length counts
against it): "#### 57" for 67 scores 0.25. The credit gives GRPO a signal in groups where no
sample is exactly right yet. ``acc`` is exact-match only, and is what validation reports.
"""

import re

ANSWER = re.compile(r"####\s*(-?\d[\d,]*)")


def digit_credit(answer: str, truth: str) -> float:
    """The share of digit positions (aligned from the right) where ``answer`` agrees with ``truth``."""
    width = max(len(answer), len(truth))
    same = sum(a == b for a, b in zip(answer.rjust(width), truth.rjust(width)))
    return same / width


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """``score`` (1, or partial credit for a wrong number), ``acc`` (exact) and ``format_ok`` (an answer given)."""
    found = ANSWER.findall(solution_str)
    if not found:
        return {"score": 0.0, "acc": 0.0, "format_ok": 0.0}
    answer, truth = found[-1].replace(",", ""), str(ground_truth).strip()
    if answer == truth:
        return {"score": 1.0, "acc": 1.0, "format_ok": 1.0}
    return {"score": 0.5 * digit_credit(answer, truth), "acc": 0.0, "format_ok": 1.0}

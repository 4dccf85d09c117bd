"""Reward for the ranking task: 1 when the response is exactly ``#### <the asked-for number>``.

A reward function as a user writes one for rlflow (or for verl's ``custom_reward_function``):
a plain function with verl's signature, no rlflow import. The pipeline names it by path,
``function: examples/ranking/reward.py:compute_score``.

Strict on purpose: anything after the answer makes it wrong. A lenient reward (the last number
after ``####`` anywhere in the text) lets the policy drift into run-on responses that stop only
at ``max_response_length``, since text after a right answer costs nothing.
"""

import re

ANSWER = re.compile(r"####\s*(-?\d+)")
EXACT = re.compile(r"\s*####\s*(-?\d+)\s*")


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """``score`` and ``acc``: 1.0 for exactly ``#### <right number>``; ``format_ok``: the response is ``#### <number>``."""
    exact = EXACT.fullmatch(solution_str)
    if exact is None:
        return {"score": 0.0, "acc": 0.0, "format_ok": 0.0, "answered": float(bool(ANSWER.search(solution_str)))}
    correct = float(exact.group(1) == str(ground_truth).strip())
    return {"score": correct, "acc": correct, "format_ok": 1.0, "answered": 1.0}

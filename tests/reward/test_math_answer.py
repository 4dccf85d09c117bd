"""math_answer: GSM8K and \\boxed answers, numbers written every way, and responses with no answer."""

from __future__ import annotations

import time

import pytest

from rlflow.reward.math_answer import compute_score, extract_answer


def score(text: str, truth) -> dict:
    return compute_score("openai/gsm8k", text, truth)


@pytest.mark.parametrize(
    "text, answer",
    [
        ("She pays 3 * 4 = 12.\n#### 12", "12"),
        ("#### 5 first draft\nthen #### 7", "7"),  # the last one
        ("#### $1,234.50.", "1234.50"),
        ("#### -3", "-3"),
        ("#### .5", ".5"),
        ("The answer is \\boxed{42}.", "42"),
        ("\\boxed{1} then \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),  # nested braces, the last box
        ("\\boxed{ $ 1,000 $ }", "1000"),
        ("#### 8 and also \\boxed{9}", "8"),  # #### wins over \\boxed
        ("no answer here", None),
        ("cut off \\boxed{\\frac{1}{2", None),  # an unbalanced last box is no answer
        ("#### not a number", None),
        ("\\boxed{}", None),
    ],
)
def test_extract_answer(text, answer):
    assert extract_answer(text) == answer


@pytest.mark.parametrize(
    "text, truth",
    [
        ("#### 72", "72"),
        ("#### 72", 72),
        ("#### 72.0", "72"),
        ("#### 1,234", "1234"),
        ("#### 1234", "1,234"),
        ("#### 3.50", 3.5),
        ("#### -0.25", "-1/4"),
        ("\\boxed{0.75}", "3/4"),
        ("#### 1000000.0000001", 1000000),  # within the relative tolerance
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),  # not numbers: equal as normalised strings
        ("\\boxed{x = 2}", "x=2"),
        ("#### 18", "Janet sells 16 - 3 - 4 = 9 eggs ... 9 * 2 = 18.\n#### 18"),  # a worked solution as truth
    ],
)
def test_right_answers_score_one(text, truth):
    assert score(text, truth) == {"score": 1.0, "acc": 1.0, "format_ok": 1.0}


@pytest.mark.parametrize(
    "text, truth",
    [
        ("#### 71", "72"),
        ("#### -72", "72"),
        ("#### 72.001", 72),
        ("\\boxed{1/3}", "0.3333"),
        ("\\boxed{inf}", "1e400"),  # not finite: never equal as numbers
    ],
)
def test_wrong_answers_score_zero_with_the_format_kept(text, truth):
    assert score(text, truth) == {"score": 0.0, "acc": 0.0, "format_ok": 1.0}


def test_no_answer_scores_zero_and_fails_the_format():
    assert score("I think it is 42", "42") == {"score": 0.0, "acc": 0.0, "format_ok": 0.0}


def test_hostile_responses_cost_linear_time():
    start = time.monotonic()
    for text in ("####" + " " * 200_000, "\\boxed{" * 100_000, "#### 1" + ",000" * 50_000, "{" * 300_000):
        score(text, "1")
    assert score("\\boxed{" + "9" * 5000 + "/1}", "1")["score"] == 0.0  # no int() of a huge string
    assert time.monotonic() - start < 2

"""extract_sql: fenced blocks, <answer> tags, bare SQL, and auto's order."""

from __future__ import annotations

import pytest

from rlflow.reward.extract import extract_sql

FENCE = "```"


@pytest.mark.parametrize(
    "text,expected",
    [
        (f"{FENCE}sql\nSELECT 1\n{FENCE}", "SELECT 1"),
        (f"{FENCE}SQLite\nSELECT 1;\n{FENCE}", "SELECT 1;"),
        (f"{FENCE}\nSELECT 1\n{FENCE}", "SELECT 1"),
        (f"{FENCE}sql SELECT 1{FENCE}", "SELECT 1"),
        (f"draft {FENCE}sql\nSELECT 1\n{FENCE} final {FENCE}sql\nSELECT 2\n{FENCE}", "SELECT 2"),
        (f"{FENCE}python\nprint(1)\n{FENCE} then {FENCE}sql\nSELECT 3\n{FENCE}", "SELECT 3"),
        (f"{FENCE}sql\nSELECT 4 and no closing fence", None),
        (f"{FENCE}python\nprint(1)\n{FENCE}", None),
        (f"{FENCE}sql\n\n{FENCE}", None),
    ],
)
def test_fenced(text, expected):
    assert extract_sql(text, "fenced") == expected


def test_answer_tag_prefers_a_fenced_block_inside():
    assert extract_sql("<think>x</think><answer>SELECT 1</answer>", "answer_tag") == "SELECT 1"
    assert extract_sql(f"<answer>{FENCE}sql\nSELECT 2\n{FENCE}</answer>", "answer_tag") == "SELECT 2"
    assert extract_sql("<answer>SELECT 1</answer> <ANSWER> SELECT 3 </ANSWER>", "answer_tag") == "SELECT 3"
    assert extract_sql("no tags", "answer_tag") is None


def test_bare_must_look_like_a_query():
    assert extract_sql("  select name from t ", "bare") == "select name from t"
    assert extract_sql("(SELECT 1)", "bare") == "(SELECT 1)"
    assert extract_sql("WITH a AS (SELECT 1) SELECT * FROM a", "bare").startswith("WITH")
    assert extract_sql("The answer is 42.", "bare") is None
    assert extract_sql("", "bare") is None


def test_auto_tries_fenced_then_answer_tag_then_bare():
    both = f"<answer>SELECT 1</answer>\n{FENCE}sql\nSELECT 2\n{FENCE}"
    assert extract_sql(both, "auto") == "SELECT 2"
    assert extract_sql("<answer>SELECT 1</answer>", "auto") == "SELECT 1"
    assert extract_sql("SELECT 3", "auto") == "SELECT 3"
    assert extract_sql("I do not know", "auto") is None
    assert extract_sql(f"{FENCE}sql\nSELECT 4\n{FENCE}", "bare") is None


def test_unknown_mode_is_an_error():
    with pytest.raises(ValueError, match="choose one of auto, fenced, answer_tag, bare"):
        extract_sql("SELECT 1", "xml")

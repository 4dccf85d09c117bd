"""``valid_text``: a lone surrogate (what a JSON escape can put in a string) becomes U+FFFD; valid text is kept."""

from __future__ import annotations

import json

import pytest

from rlflow.tools.text import valid_text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (json.loads('"run_sql\\ud800"'), "run_sql\ufffd"),
        (json.loads('"\\udcff"'), "\ufffd"),
        ("\ud800\ud800x", "\ufffd\ufffdx"),
        ("\ud83d\ude00 \udcff", "\U0001f600 \ufffd"),  # a pair held as two code points is its character
        ("plain é 😀", "plain é 😀"),
        ("", ""),
    ],
)
def test_lone_surrogates_become_the_replacement_character(text, expected):
    assert valid_text(text) == expected
    valid_text(text).encode("utf-8")  # what a tokenizer, a log file or a pipe asks of it


def test_valid_text_is_returned_as_it_is():
    text = "SELECT name FROM t"
    assert valid_text(text) is text

"""The protocol's checks: an answer that is not exactly what was due is refused, without running anything."""

from __future__ import annotations

import pytest

from rlflow.sandbox.protocol import answer_of


@pytest.mark.parametrize(
    "raw",
    [
        b"\x80\x04pickle",
        b"{}",
        b"[]",
        b'["ok", 6, 1.0, {}, 0]',  # another call's answer
        b'["ok", true, 1.0, {}, 0]',
        b'["ok", 5, "1.0", {}, 0]',
        b'["ok", 5, 1e999, {}, 0]',
        b'["ok", 5, 1.0, {"a": null}, 0]',
        b'["ok", 5, 1.0, {}, -1]',
        b'["ok", 5, 1.0, {}]',
        b'["raised", 5, "X"]',
        b'["bad", 5, 3]',
        b'["exec", 5, "import os"]',
        b'["ok", 5, ' + b"1" * 5000 + b", {}, 0]",
    ],
)
def test_a_malformed_answer_is_refused_without_running_anything(raw):
    outcome = answer_of(raw, 5)
    assert outcome.failure == "error" and outcome.kind == "bad message" and outcome.distrusted

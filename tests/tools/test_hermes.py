"""The hermes parser: well-formed calls as verl parses them, malformed ones kept with the reason."""

from __future__ import annotations

import json

import pytest

from rlflow.tools.hermes import ToolCall, parse_tool_calls


def test_calls_and_the_text_around_them():
    text = 'Let me look.<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call> then <tool_call>\n{"name": "x", "arguments": {}}\n</tool_call>'
    content, calls = parse_tool_calls(text)
    assert content == "Let me look. then "
    assert calls == [ToolCall("add", json.dumps({"a": 1, "b": 2})), ToolCall("x", "{}")]


def test_no_call_without_both_tags():
    assert parse_tool_calls('<tool_call>{"name": "add", "arguments": {}}') == (
        '<tool_call>{"name": "add", "arguments": {}}',
        [],
    )
    assert parse_tool_calls("plain answer") == ("plain answer", [])


@pytest.mark.parametrize(
    ("body", "name", "error"),
    [
        ('{"name": "add", "arguments": {"a": 1,}}', "", "not valid JSON"),
        ("[1, 2]", "", "a JSON list, not an object"),
        ('{"arguments": {}}', "", 'no "name" string'),
        ('{"name": 7, "arguments": {}}', "", 'no "name" string'),
        ('{"name": "add", "arguments": [1, 2]}', "add", "a JSON list, not an object"),
        ('{"name": "add", "arguments": "{not json"}', "add", "Invalid JSON in arguments for 'add'"),
        ("[" * 100_000 + "]" * 100_000, "", "not valid JSON"),
    ],
)
def test_malformed_calls_become_errors_not_exceptions(body, name, error):
    _, calls = parse_tool_calls(f"<tool_call>{body}</tool_call>")
    assert len(calls) == 1 and calls[0].name == name and error in calls[0].error


def test_arguments_given_as_a_json_string_are_read_as_an_object():
    _, calls = parse_tool_calls('<tool_call>{"name": "add", "arguments": "{\\"a\\": 1}"}</tool_call>')
    assert calls == [ToolCall("add", '{"a": 1}')]

"""The hermes parser: well-formed calls as verl parses them, malformed ones kept with the reason.

The calls verl's own ``HermesToolParser`` keeps and drops are read from it on the same text
(its module loaded from the installed verl by file: its package imports the whole agent loop).
On hostile text the calls are still verl's, found in linear time, and lone surrogates become U+FFFD.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import json
import random
import time
from importlib.metadata import distribution
from pathlib import Path

import pytest

from rlflow.tools.hermes import ToolCall, parse_tool_calls
from rlflow.tools.text import valid_text

# model turns a parser meets: well-formed, malformed, half-formed
TRICKY = [
    '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>',
    'Let me look.<tool_call>\n{"name": "x", "arguments": {}}\n</tool_call> and <tool_call>{"name": "y", "arguments": {"q": "é"}}</tool_call>',
    '<tool_call>{"name": "add", "arguments": {"a": 1,}}</tool_call>',
    '<tool_call>{"name": "add", "arguments": {"a": 1}}',
    "<tool_call>[1, 2]</tool_call>",
    '<tool_call>"add"</tool_call>',
    "<tool_call>42</tool_call>",
    "<tool_call>null</tool_call>",
    '<tool_call>{"arguments": {"a": 1}}</tool_call>',
    '<tool_call>{"name": 7, "arguments": {}}</tool_call>',
    '<tool_call>{"name": null, "arguments": {}}</tool_call>',
    '<tool_call>{"name": "", "arguments": {}}</tool_call>',
    '<tool_call>{"name": "add"}</tool_call>',
    '<tool_call>{"name": "add", "arguments": "{\\"a\\": 1}"}</tool_call>',
    '<tool_call>{"name": "add", "arguments": "{not json"}</tool_call>',
    '<tool_call>{"name": "add", "arguments": [1, 2]}</tool_call>',
    '<tool_call>{"name": "add", "arguments": null}</tool_call>',
    '<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call><tool_call>{"name": "add" "arguments": {}}</tool_call>',
    "<tool_call>" + "[" * 5000 + "]" * 5000 + "</tool_call>",
    "<tool_call>{'name': 'add', 'arguments': {'a': 1}}</tool_call>",
    '<tool_call>{"name": "add", "arguments": {"a": 1}, "id": "c1"}</tool_call>',
]


@functools.cache
def verl_parser():
    """verl 0.9.1's ``HermesToolParser`` over a tokenizer whose decode is the identity (it is handed text)."""
    path = Path(distribution("verl").locate_file("verl/experimental/agent_loop/tool_parser.py"))
    spec = importlib.util.spec_from_file_location("verl_tool_parser", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.HermesToolParser(type("Identity", (), {"decode": staticmethod(lambda ids: ids)})())


def verl_parse(text: str):
    return asyncio.run(verl_parser().extract_tool_calls(text))


@pytest.mark.parametrize("text", TRICKY)
def test_the_calls_verl_keeps_are_those_rlflow_does_not_drop(text):
    verl_content, verl_calls = verl_parse(text)
    content, calls = parse_tool_calls(text)
    kept = [call for call in calls if not call.verl_drops]
    assert content == verl_content
    assert [call.name for call in kept] == [call.name for call in verl_calls]  # so the trajectory ends as in verl
    for ours, theirs in zip(kept, verl_calls, strict=True):
        if isinstance(json.loads(theirs.arguments), dict):
            assert ours.arguments == theirs.arguments and ours.error is None
        else:  # verl hands the tool a non-object, which fails on it: an error observation in both
            assert ours.error is not None or isinstance(json.loads(theirs.arguments), str)
    assert all(call.error for call in calls if call.verl_drops)


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


def test_a_lone_surrogate_in_a_name_or_an_argument_becomes_the_replacement_character():
    # the model writes JSON escapes; json.loads makes them lone surrogates, which no tokenizer encodes
    text = (
        '<tool_call>{"name": "run_sql\\ud800", "arguments": {"\\udcff": 1, "sql": "SELECT \\ud83d\\ude00"}}</tool_call>'
    )
    _, (theirs,) = verl_parse(text)
    _, (ours,) = parse_tool_calls(text)
    assert theirs.name == "run_sql\ud800"  # verl hands it on, and the error text echoing it breaks its tokenizer
    assert (ours.name, ours.arguments) == (valid_text(theirs.name), valid_text(theirs.arguments))
    assert json.loads(ours.arguments) == {"\ufffd": 1, "sql": "SELECT \U0001f600"} and ours.error is None
    _, (dropped,) = parse_tool_calls('<tool_call>{"name": "run_sql\\ud800"}</tool_call>')
    assert dropped.verl_drops and dropped.name == "run_sql\ufffd" and dropped.error.encode()


def hostile(n: int) -> str:
    """Unclosed calls after a lone closing tag: verl's regex rescans the rest of the text from each one."""
    return "</tool_call>" + "<tool_call>{" * n


def test_the_calls_found_are_verls_on_text_of_tags_in_any_order():
    rng = random.Random(0)
    parts = ["<tool_call>", "</tool_call>", '{"name": "a", "arguments": {}}', "x", "\n"]
    for text in [hostile(300)] + ["".join(rng.choices(parts, k=rng.randint(1, 12))) for _ in range(300)]:
        verl_content, verl_calls = verl_parse(text)
        content, calls = parse_tool_calls(text)
        assert content == verl_content
        assert [c.name for c in calls if not c.verl_drops] == [c.name for c in verl_calls]


def best_seconds(text: str) -> float:
    times = []
    for _ in range(7):
        start = time.perf_counter()
        parse_tool_calls(text)
        times.append(time.perf_counter() - start)
    return min(times)


def test_unclosed_calls_parse_in_linear_time():
    # verl's regex takes seconds on 8,000 of them (96 KB), 4x that on twice the text; here 8x the text costs
    # about 8x the time (a quadratic parse: 64x)
    small, large = best_seconds(hostile(8_000)), best_seconds(hostile(64_000))
    assert large / small < 24

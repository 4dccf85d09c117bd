"""Hermes tool calls (``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``), parsed as verl's ``HermesToolParser``.

Same regex and the same fields; where verl logs and drops a call that does not parse, this
parser keeps it with an ``error``, so the agent loop answers the model with an error
observation (the model learns from it) instead of silently skipping the call.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

START, END = "<tool_call>", "</tool_call>"
_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


@dataclass(frozen=True)
class ToolCall:
    """One call: ``arguments`` is the JSON text of the arguments; ``error`` says why the call cannot run."""

    name: str
    arguments: str = "{}"
    error: str | None = None


def parse_tool_calls(text: str) -> tuple[str, list[ToolCall]]:
    """(the text outside the calls, the calls in order); no calls unless both tags are present, as verl."""
    if START not in text or END not in text:
        return text, []
    calls = []
    for body in _CALL.findall(text):
        calls.append(_parse_one(body))
    return _CALL.sub("", text), calls


def _parse_one(body: str) -> ToolCall:
    try:
        call = json.loads(body)
    except (json.JSONDecodeError, RecursionError) as exc:
        return ToolCall(name="", error=f"the tool call is not valid JSON: {exc}")
    if not isinstance(call, dict):
        return ToolCall(name="", error=f"the tool call is a JSON {type(call).__name__}, not an object")
    name, arguments = call.get("name"), call.get("arguments", {})
    if not isinstance(name, str) or not name:
        return ToolCall(name="", error='the tool call has no "name" string')
    if isinstance(arguments, str):  # some models write the arguments as a JSON string, as OpenAI's API does
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as exc:
            return ToolCall(name=name, error=f"Invalid JSON in arguments for '{name}': {exc}")
    if not isinstance(arguments, dict):
        return ToolCall(
            name=name, error=f"the arguments of '{name}' are a JSON {type(arguments).__name__}, not an object"
        )
    return ToolCall(name=name, arguments=json.dumps(arguments, ensure_ascii=False))

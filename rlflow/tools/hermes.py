"""Hermes tool calls (``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``), parsed as verl parses them.

Matches and fields are verl's ``HermesToolParser``'s; a call verl drops is kept with ``error`` and ``verl_drops``
set. Design notes: docs/design/tools.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from rlflow.tools.text import valid_text

START, END = "<tool_call>", "</tool_call>"


@dataclass(frozen=True)
class ToolCall:
    """One call: ``arguments`` is the JSON text of the arguments; ``error`` says why the call cannot run;
    ``verl_drops``: verl's ``HermesToolParser`` drops it (it never reaches a tool there)."""

    name: str
    arguments: str = "{}"
    error: str | None = None
    verl_drops: bool = False


def parse_tool_calls(text: str) -> tuple[str, list[ToolCall]]:
    """(the text outside the calls, the calls in order); no calls unless both tags are present, as verl."""
    if START not in text or END not in text:
        return text, []
    calls, outside, at = [], [], 0
    while (start := text.find(START, at)) >= 0:
        end = text.find(END, start + len(START))
        if end < 0:  # no later <tool_call> is closed either: the regex finds nothing more
            break
        outside.append(text[at:start])
        calls.append(_parse_one(text[start + len(START) : end]))
        at = end + len(END)
    outside.append(text[at:])
    return "".join(outside), calls


def _parse_one(body: str) -> ToolCall:
    try:
        call = json.loads(body)
    except (json.JSONDecodeError, RecursionError) as exc:
        return _dropped(f"the tool call is not valid JSON: {exc}")
    if not isinstance(call, dict):
        return _dropped(f"the tool call is a JSON {type(call).__name__}, not an object")
    name = call.get("name")
    if not isinstance(name, str):  # verl's FunctionCall takes a string only; an empty one is an unknown tool there
        return _dropped('the tool call has no "name" string')
    name = valid_text(name)
    if "arguments" not in call:
        return _dropped(f'the tool call of {name!r} has no "arguments"', name)
    arguments = call["arguments"]
    if isinstance(arguments, str):  # some models write the arguments as a JSON string, as OpenAI's API does
        try:
            arguments = json.loads(arguments)
        except (json.JSONDecodeError, RecursionError) as exc:
            return ToolCall(name=name, error=f"Invalid JSON in arguments for '{name}': {exc}")
    if not isinstance(arguments, dict):
        return ToolCall(
            name=name, error=f"the arguments of '{name}' are a JSON {type(arguments).__name__}, not an object"
        )
    return ToolCall(name=name, arguments=valid_text(json.dumps(arguments, ensure_ascii=False)))


def _dropped(error: str, name: str = "") -> ToolCall:
    return ToolCall(name=name, error=error, verl_drops=True)

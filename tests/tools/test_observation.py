"""Error observations: cut like verl's answers, placed at the user's line, with no host path in them.

The cut is checked against verl's own ``ToolAgentLoop._call_tool`` (its source, run on a verl
tool), which also shows where rlflow differs: verl 0.9.1 returns a raised error whole.
"""

from __future__ import annotations

import ast
import asyncio
import json
import logging
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from rlflow.tools.observation import Where, truncate


@pytest.fixture(scope="module")
def verl_call_tool():
    """verl's ``ToolAgentLoop._call_tool``, compiled from the installed source (its module needs packages that
    the agent loop's server imports and rlflow does not)."""
    import verl
    from verl.tools.function_tool import FunctionTool, normalize_function_tool_return
    from verl.tools.schemas import ToolResponse

    source = Path(verl.__file__).parent / "experimental" / "agent_loop" / "tool_agent_loop.py"
    tree = ast.parse(source.read_text())
    loop = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ToolAgentLoop")
    method = next(n for n in loop.body if isinstance(n, ast.AsyncFunctionDef) and n.name == "_call_tool")
    names = {"json": json, "logger": logging.getLogger("verl-copy"), "FunctionTool": FunctionTool}
    names |= {"normalize_function_tool_return": normalize_function_tool_return, "ToolResponse": ToolResponse}
    names |= {"FunctionCall": object, "AgentData": object, "Any": object}
    exec(compile(ast.Module(body=[method], type_ignores=[]), str(source), "exec"), names)
    return names["_call_tool"]


def _verl_answer(call_tool, text: str | None, limit: int, side: str) -> str:
    from verl.tools.base_tool import BaseTool
    from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

    class Echo(BaseTool):
        async def execute(self, instance_id, parameters, **kwargs):
            if text is None:
                raise RuntimeError("y" * 500)
            return ToolResponse(text=text), 0.0, {}

    schema = {"type": "function", "function": {"name": "echo", "description": "Echo."}}
    tool = Echo({}, OpenAIFunctionToolSchema.model_validate(schema))
    loop = SimpleNamespace(tools={"echo": tool}, max_tool_response_length=limit, tool_response_truncate_side=side)
    response, _, _ = asyncio.run(call_tool(loop, SimpleNamespace(name="echo", arguments="{}"), {}, None))
    return response.text


@pytest.mark.parametrize("side", ["left", "middle", "right"])
def test_the_cut_is_verls(verl_call_tool, side):
    for text in ("short", "x" * 100 + "z" * 101):
        assert truncate(text, 30, side) == _verl_answer(verl_call_tool, text, 30, side)


def test_verl_returns_a_raised_error_whole_which_rlflow_cuts(verl_call_tool):
    whole = _verl_answer(verl_call_tool, None, 30, "middle")
    assert whole == "Error executing tool 'echo': " + "y" * 500  # verl 0.9.1: the except branch returns before the cut
    assert truncate(whole, 30, "middle") == whole[:15] + "...(truncated)..." + whole[-15:]


def _raise_from_json(text: str):
    return json.loads(text)  # the standard library's frame is below this one


def test_the_failure_names_the_users_line_not_the_standard_librarys(tmp_path):
    where = Where(str(Path(__file__).parent), [str(Path(__file__).parent)], str(tmp_path))
    try:
        _raise_from_json("{")
    except ValueError as exc:
        failure = where.failure(exc)
    line = _raise_from_json.__code__.co_firstlineno + 1
    assert failure.startswith(f"test_observation.py:{line} in _raise_from_json: Expecting property name")
    assert "decoder.py" not in failure


def test_no_host_path_reaches_the_model(tmp_path):
    project = tmp_path / "project"
    scratch = tmp_path / "scratch"
    (project / "data").mkdir(parents=True)
    scratch.mkdir()
    where = Where(str(project), [str(project)], str(scratch))
    message = (
        f"cannot open '{project}/data/q.db', '{scratch}/out.txt' or '/home/someone/secret/key.pem'; "
        "SELECT a/b FROM t; see https://example.com/a/b"
    )
    cleaned = where.clean(message)
    assert cleaned == (
        "cannot open 'data/q.db', 'out.txt' or 'key.pem'; SELECT a/b FROM t; see https://example.com/a/b"
    )
    assert str(tmp_path) not in cleaned and "/home" not in cleaned
    assert not where.show(sys.executable).startswith("/")  # shown relative to its Python-path entry, or by name

"""The tool files a multi_turn block names, read by the bounded reader: special files refused at once, sizes worded.

A FIFO nobody writes as the tool config, the function-tool file or the prompt template blocked
validate forever (a plain ``open``); each is now one problem naming the file. A tool config large
without a single alias is told it is large, not called an alias bomb.
"""

from __future__ import annotations

import os

import pytest

from rlflow.tools.config import MultiTurnConfig
from rlflow.tools.files import tool_file_problems

TOOL = """tools:
  - class_name: rlflow.tools.sql.SqlTool
    config: {type: native}
    tool_schema:
      type: function
      function:
        name: run_sql%s
        description: Run one query.
        parameters: {type: object, properties: {sql: {type: string, description: the query}}, required: [sql]}
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("field", ["tool_config_path", "function_tool_path"])
def test_a_fifo_as_a_tool_file_is_one_problem_at_once(tmp_path, field):
    os.mkfifo(tmp_path / "pipe")
    problems = tool_file_problems(MultiTurnConfig(enable=True, **{field: "pipe"}), tmp_path, None)
    assert len(problems) == 1 and problems[0][0] == field
    what = "tool config" if field == "tool_config_path" else "function tool file"
    assert problems[0][1].endswith(f"pipe:1: cannot read the {what}: a FIFO (named pipe), not a regular file")


@pytest.mark.timeout(60)
def test_a_fifo_as_the_prompt_template_does_not_block(tmp_path):
    (tmp_path / "tools.yaml").write_text(TOOL % "")
    os.mkfifo(tmp_path / "template.j2")
    config = MultiTurnConfig(enable=True, tool_config_path="tools.yaml")
    assert tool_file_problems(config, tmp_path, "template.j2") == []  # the template's own reader words it


def test_a_large_tool_config_is_not_called_an_alias_bomb(tmp_path):
    text = "tools:\n" + "".join(TOOL.split("tools:\n")[1] % i for i in range(1300))  # no alias, 22,100 values
    (tmp_path / "tools.yaml").write_text(text)
    problems = tool_file_problems(MultiTurnConfig(enable=True, tool_config_path="tools.yaml"), tmp_path, None)
    assert [(field, message.split(": ", 1)[1], fix) for field, message, fix in problems] == [
        (
            "tool_config_path",
            "document holds more than 20000 values, the most rlflow reads in one file",
            "a tool config holds a few hundred; move the bulk into a data file",
        )
    ]

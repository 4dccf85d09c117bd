"""The shipped SQL tool: a read-only query on the row's own database, answered as a small table.

A verl ``BaseTool`` that runs the model's ``sql`` through the reward's sandboxed executor, so a tool call can
never write to a database. Design notes: docs/design/tools.md.
"""

from __future__ import annotations

from typing import Any

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import ToolResponse

from rlflow.reward.sql_exec import connect_readonly, execute

MAX_RESULT_BYTES = 1 << 20  # what the shown rows may hold before the cut to max_cell_chars


def render(columns: tuple[str, ...], rows: tuple[tuple, ...], more: bool, max_cell_chars: int) -> str:
    """A result as ``a | b`` lines: the header, one line per row, and a line saying how many rows."""

    def cell(value) -> str:
        text = " ".join(str(value).split()) if value is not None else "NULL"
        return text if len(text) <= max_cell_chars else text[: max_cell_chars - 3] + "..."

    lines = [" | ".join(cell(c) for c in columns)] if columns else []
    lines += [" | ".join(cell(v) for v in row) for row in rows]
    lines.append(f"(first {len(rows)} rows)" if more else f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(lines)


class SqlTool(BaseTool):
    """``run_sql(sql)``: one read-only query on the trajectory's database (see the module docstring)."""

    def __init__(self, config: dict, tool_schema) -> None:
        super().__init__(config, tool_schema)
        self.max_rows = int(config.get("max_rows", 5))
        self.timeout_s = float(config.get("timeout_s", 2.0))
        self.max_cell_chars = int(config.get("max_cell_chars", 40))
        self._databases: dict[str, str | None] = {}  # instance -> its database file
        self._connections: dict[str, Any] = {}  # database file -> its read-only connection

    async def create(self, instance_id: str | None = None, create_kwargs: dict | None = None, **kwargs):
        instance_id, response = await super().create(instance_id, **kwargs)
        self._databases[instance_id] = (create_kwargs or {}).get("db_path")
        return instance_id, response

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs):
        path = self._databases.get(instance_id)
        sql = parameters.get("sql")
        if not path:
            return ToolResponse(text="Error: this question names no database (tools_kwargs.db_path)"), 0.0, {}
        if not isinstance(sql, str) or not sql.strip():
            return ToolResponse(text="Error: give the query as the 'sql' argument"), 0.0, {"sql_error": 1.0}
        if path not in self._connections:
            self._connections[path] = connect_readonly(path)
        result = execute(self._connections[path], sql, self.timeout_s, self.max_rows, MAX_RESULT_BYTES, head=True)
        if not result.ok:
            return ToolResponse(text=f"Error: {result.message}"), 0.0, {"sql_error": 1.0}
        text = render(result.columns, result.head, result.more, self.max_cell_chars)
        return ToolResponse(text=text), 0.0, {"sql_error": 0.0}

    async def release(self, instance_id: str, **kwargs) -> None:
        self._databases.pop(instance_id, None)

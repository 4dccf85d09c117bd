"""Prompt text for a text-to-SQL question: the database schema, the evidence, the question.

A sandboxed Jinja2 template with ``StrictUndefined`` gets ``schema``, ``question``, ``evidence`` and ``db_id``.
Design notes: docs/design/data.md.
"""

from __future__ import annotations

from pathlib import Path

import jinja2
from jinja2.sandbox import SandboxedEnvironment

from rlflow.data.text import read_utf8
from rlflow.errors import DataError
from rlflow.reward.sql_exec import connect_readonly

TEMPLATE_VARIABLES = ("schema", "question", "evidence", "db_id")


def schema_text(db_path: Path) -> str:
    """The CREATE TABLE statements of ``db_path``, in creation order, each ending with ';'."""
    conn = connect_readonly(db_path)
    try:
        rows = conn.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND sql IS NOT NULL "
            "AND name NOT LIKE 'sqlite_%' ORDER BY rowid"
        ).fetchall()
    finally:
        conn.close()
    return "\n".join(f"{sql.strip()};" for (sql,) in rows)


class PromptTemplate:
    """A compiled prompt template; ``render`` fills it for one question."""

    def __init__(self, path: Path) -> None:
        env = SandboxedEnvironment(
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
            keep_trailing_newline=True,
            autoescape=False,
        )
        self.path = path
        try:
            source = read_utf8(path)
        except OSError as exc:
            raise DataError(f"data.prompt_template: cannot read {path} ({exc.strerror})") from None
        try:
            self._template = env.from_string(source)
        except jinja2.TemplateSyntaxError as exc:
            raise DataError(f"{path}:{exc.lineno}: template syntax error: {exc.message}") from None

    def render(self, **values: str) -> str:
        try:
            return self._template.render(**values)
        except jinja2.UndefinedError as exc:
            raise DataError(f"{self.path}: {exc.message}; templates may use {', '.join(TEMPLATE_VARIABLES)}") from None
        except jinja2.exceptions.SecurityError as exc:
            raise DataError(f"{self.path}: refused by the template sandbox: {exc}") from None

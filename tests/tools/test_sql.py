"""The shipped SQL tool in its tool process: the row's database named by verl's tools_kwargs, rows as a small
table, SQLite's errors as answers, and no way to write to a database."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from rlflow.assets import BIRD_SAMPLE
from rlflow.tools.config import MultiTurnConfig
from rlflow.tools.hermes import ToolCall
from rlflow.tools.runner import ToolRunner
from rlflow.tools.sql import render

REPO = Path(__file__).resolve().parents[2]
DB = BIRD_SAMPLE / "databases" / "concert_singer" / "concert_singer.sqlite"


@pytest.fixture(scope="module")
def runner():
    config = MultiTurnConfig(enable=True, tool_config_path="pipelines/tools/bird_sql.yaml", tool_timeout_s=5.0)
    runner = ToolRunner(config, REPO)
    yield runner
    runner.close()


def run_sql(runner, sql: str, db: Path | None = DB):
    kwargs = {"run_sql": {"create_kwargs": {"db_path": str(db)}}} if db is not None else {}
    return runner.call([ToolCall("run_sql", json.dumps({"sql": sql}))], [kwargs])[0]


def test_a_query_on_the_rows_database_answers_with_its_first_rows(runner):
    result = run_sql(runner, "SELECT name, country FROM singer ORDER BY name")
    lines = result.text.splitlines()
    assert not result.error and lines[0] == "name | country"
    assert len(lines) == 5 and lines[-1] == "(first 3 rows)"  # max_rows 3 in the shipped tool config
    assert run_sql(runner, "SELECT COUNT(*) FROM singer").text.splitlines()[-1] == "(1 row)"


def test_sqlite_errors_and_a_missing_database_are_answers(runner):
    assert run_sql(runner, "SELECT nope FROM singer").text == "Error: no such column: nope"
    assert run_sql(runner, "SELECT 1", db=None).text.startswith("Error: this question names no database")


@pytest.mark.parametrize(
    "sql",
    [
        "DELETE FROM singer",
        "DROP TABLE singer",
        "INSERT INTO singer (name) VALUES ('x')",
        "ATTACH DATABASE 'other.sqlite' AS other",
        "PRAGMA writable_schema = 1",
        "SELECT 1; DELETE FROM singer",
    ],
)
def test_a_tool_call_never_writes_to_the_database(runner, sql):
    before = hashlib.sha256(DB.read_bytes()).hexdigest()
    result = run_sql(runner, sql)
    assert result.text.startswith("Error: ")
    assert hashlib.sha256(DB.read_bytes()).hexdigest() == before
    assert not list(DB.parent.glob("*-journal")) and not list(DB.parent.glob("*-wal"))


def test_render_cuts_long_values_and_says_how_many_rows():
    text = render(("a", "b"), (("x" * 50, None), (1, "two\nlines")), more=False, max_cell_chars=10)
    assert text.splitlines() == ["a | b", "xxxxxxx... | NULL", "1 | two lines", "(2 rows)"]
    assert render(("a",), (), more=False, max_cell_chars=10).splitlines() == ["a", "(0 rows)"]

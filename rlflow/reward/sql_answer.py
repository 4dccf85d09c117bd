"""A text-to-SQL reward with verl's custom-reward signature: execution accuracy on the question's database.

It scores like the ``text2sql_reward`` stage with its default scores and returns ``{"score", "acc",
"format_ok"}``. Design notes: docs/design/reward.md.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from rlflow.reward.extract import extract_sql
from rlflow.reward.sql_exec import ExecResult, connect_readonly, execute

SQL_TIMEOUT_S = 2.0
MAX_ROWS = 10_000
MAX_RESULT_MB = 32
GOLD_CACHE_SIZE = 1024

_connections: dict[str, Any] = {}
_gold: OrderedDict[tuple[str, str], ExecResult] = OrderedDict()


def _connection(db_path: str):
    conn = _connections.get(db_path)
    if conn is None:
        conn = _connections[db_path] = connect_readonly(db_path)
    return conn


def _run(db_path: str, sql: str) -> ExecResult:
    return execute(_connection(db_path), sql, SQL_TIMEOUT_S, MAX_ROWS, MAX_RESULT_MB * 2**20)


def _gold_result(db_path: str, gold_sql: str) -> ExecResult:
    key = (db_path, gold_sql)
    if key in _gold:
        _gold.move_to_end(key)
        return _gold[key]
    result = _gold[key] = _run(db_path, gold_sql)
    if len(_gold) > GOLD_CACHE_SIZE:
        _gold.popitem(last=False)
    return result


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None) -> dict:
    """verl's custom-reward signature: ``{"score", "acc", "format_ok"}`` for one response."""
    if not isinstance(ground_truth, str) or not isinstance(extra_info, dict) or "db_path" not in extra_info:
        raise ValueError(
            "sql_answer needs the gold SQL as ground_truth and extra_info['db_path'] "
            f"(got ground_truth {type(ground_truth).__name__}, extra_info keys "
            f"{sorted(extra_info) if isinstance(extra_info, dict) else type(extra_info).__name__})"
        )
    sql = extract_sql(solution_str, "auto")
    if sql is None:
        return {"score": 0.0, "acc": 0.0, "format_ok": 0.0}
    db_path = str(extra_info["db_path"])
    gold = _gold_result(db_path, ground_truth)
    pred = _run(db_path, sql)
    correct = float(gold.ok and pred.ok and pred.rows == gold.rows)
    return {"score": correct, "acc": correct, "format_ok": 1.0}

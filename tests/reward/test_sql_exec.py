"""Hostile model SQL: refused or stopped in time, the database untouched, nothing written beside it."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest

from rlflow.reward.sql_exec import compile_error, connect_readonly, execute, is_query

TIMEOUT_S = 0.5
MARGIN_S = 1.5  # a loaded CI machine may be slow to schedule the interrupted thread

CROSS_5 = "SELECT count(*) FROM emp a, emp b, emp c, emp d, emp e"  # 40**5 rows to count
HOSTILE = {
    "drop": ("DROP TABLE emp", "refused"),
    "delete": ("DELETE FROM emp", "refused"),
    "insert": ("INSERT INTO dept VALUES (99, 'Spy', 'Nowhere')", "refused"),
    "update": ("UPDATE emp SET salary = 0", "refused"),
    "create": ("CREATE TABLE t (x)", "refused"),
    "temp_table": ("CREATE TEMP TABLE t (x)", "refused"),
    "alter": ("ALTER TABLE emp ADD COLUMN x", "refused"),
    "attach": ("ATTACH DATABASE '{attach}' AS x", "refused"),
    "detach": ("DETACH DATABASE main", "refused"),
    "writable_schema": ("PRAGMA writable_schema=1", "refused"),
    "journal_mode": ("PRAGMA journal_mode=delete", "refused"),
    "pragma_read": ("PRAGMA table_info(emp)", "refused"),
    "vacuum_into": ("VACUUM INTO '{attach}'", "refused"),
    "reindex": ("REINDEX", "refused"),
    "begin": ("BEGIN IMMEDIATE", "refused"),
    "load_extension": ("SELECT load_extension('x')", "refused"),
    "printf_bomb": ("SELECT printf('%.*c', 2000000000, 'x')", "refused"),
    "two_statements": ("SELECT 1; DROP TABLE t", "refused"),
    "select_then_delete": ("SELECT * FROM emp; DELETE FROM emp", "refused"),
    "recursive_cte": (
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c",
        "timeout",
    ),
    "cross_join_count": (CROSS_5, "timeout"),
    "cross_join_rows": ("SELECT * FROM emp a, emp b, emp c", "too_many_rows"),
    "huge_blob": ("SELECT zeroblob(1000000000)", "error"),
    "wide_row": ("SELECT " + ", ".join(["zeroblob(9000000)"] * 20), "out_of_memory"),  # past SQLite's heap limit
    "large_result": ("SELECT a.name, zeroblob(2000000) FROM emp a, emp b", "too_large"),  # 3.2 GB at 1,600 rows
}


def snapshot(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_sql_is_refused_or_stopped(company_db, tmp_path, name):
    sql, expected = HOSTILE[name]
    attach = tmp_path / "x.db"
    sql = sql.format(attach=attach)
    before = snapshot(company_db.parent)
    conn = connect_readonly(company_db)
    start = time.monotonic()
    result = execute(conn, sql, timeout_s=TIMEOUT_S, max_rows=1000)
    elapsed = time.monotonic() - start
    assert result.status == expected, result
    assert result.rows is None and elapsed < TIMEOUT_S + MARGIN_S
    assert execute(conn, "SELECT COUNT(*) FROM emp", TIMEOUT_S, 10).rows == {(40,)}, "connection still usable"
    conn.close()
    assert snapshot(company_db.parent) == before, "database bytes unchanged and no -journal/-wal/-shm beside it"
    assert not attach.exists()


def test_ordinary_queries_run(company_db):
    conn = connect_readonly(company_db)
    assert execute(conn, "SELECT COUNT(*) FROM emp;", 1, 10).rows == {(40,)}
    result = execute(
        conn, "SELECT T2.name, COUNT(*) FROM emp AS T1 JOIN dept AS T2 ON T1.dept_id = T2.id GROUP BY T2.name", 1, 10
    )
    assert result.ok and sum(n for _, n in result.rows) == 40
    assert execute(
        conn, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < 5) SELECT x FROM c", 1, 10
    ).rows == {(i,) for i in range(1, 6)}
    assert execute(conn, "SELECT nope FROM emp", 1, 10).status == "error"
    assert execute(conn, "SELECT * FROM emp", 1, 40).ok
    assert execute(conn, "SELECT * FROM emp", 1, 39).status == "too_many_rows"
    assert execute(conn, "SELECT * FROM emp", 1, 40, max_result_bytes=40 * 200).status == "too_large"


def test_head_keeps_the_first_rows_in_order_with_the_column_names(company_db):
    conn = connect_readonly(company_db)
    head = execute(conn, "SELECT id, name FROM dept ORDER BY id DESC", 1, 2, head=True)
    assert head.ok and head.columns == ("id", "name") and head.more and len(head.head) == 2
    assert head.head[0][0] > head.head[1][0]  # in the query's order
    whole = execute(conn, "SELECT COUNT(*) AS n FROM emp", 1, 2, head=True)
    assert whole.columns == ("n",) and whole.head == ((40,),) and not whole.more
    assert execute(conn, "DELETE FROM emp", 1, 2, head=True).status == "refused"


def test_deadline_is_per_statement(company_db):
    conn = connect_readonly(company_db)
    for _ in range(2):
        start = time.monotonic()
        assert execute(conn, CROSS_5, timeout_s=0.2, max_rows=10).status == "timeout"
        assert time.monotonic() - start < 0.2 + MARGIN_S
    assert execute(conn, "SELECT 1", 0.2, 10).ok, "the progress handler is removed after each statement"


def test_missing_database_is_not_created(tmp_path):
    with pytest.raises(FileNotFoundError):
        connect_readonly(tmp_path / "nope.sqlite")
    assert list(tmp_path.iterdir()) == []


def test_compile_error_and_is_query(company_db):
    conn = connect_readonly(company_db)
    assert compile_error(conn, "SELECT name FROM emp") is None
    assert compile_error(conn, "SELECT colour FROM emp") == "no such column: colour"
    assert "one statement" in compile_error(conn, "SELECT 1; SELECT 2")
    assert compile_error(conn, "DELETE FROM emp").startswith("not a query")
    assert is_query("-- why\n/* note */ (SELECT 1)") and not is_query("/* SELECT */ DELETE FROM emp")

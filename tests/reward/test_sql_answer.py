"""sql_answer: execution accuracy with verl's signature, hostile SQL refused, per-process caches."""

from __future__ import annotations

import pytest

from rlflow.reward import sql_answer

GOLD = "SELECT name FROM dept WHERE city = 'Boston'"
FENCE = "```"


def score(db, response: str, gold: str = GOLD) -> dict:
    extra = {"db_path": str(db), "db_id": "company", "question_id": 7}
    return sql_answer.compute_score("bird", response, gold, extra)


def fenced(sql: str) -> str:
    return f"Let me think.\n{FENCE}sql\n{sql}\n{FENCE}"


def test_a_correct_query_scores_one_whatever_its_order(company_db):
    assert score(company_db, fenced(GOLD)) == {"score": 1.0, "acc": 1.0, "format_ok": 1.0}
    other = "SELECT d.name FROM dept AS d WHERE d.city IN ('Boston') ORDER BY 1 DESC"
    assert score(company_db, f"<answer>{other}</answer>")["score"] == 1.0


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT name FROM dept",  # runs, wrong
        "SELECT nme FROM dept",  # fails in SQLite
        "DROP TABLE dept",  # refused
        "SELECT 1; DELETE FROM emp",  # a second statement: refused
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c",  # out of time
    ],
)
def test_wrong_failing_and_hostile_sql_score_zero_and_change_nothing(company_db, sql, monkeypatch):
    monkeypatch.setattr(sql_answer, "SQL_TIMEOUT_S", 0.3)
    before = company_db.read_bytes()
    assert score(company_db, fenced(sql)) == {"score": 0.0, "acc": 0.0, "format_ok": 1.0}
    assert company_db.read_bytes() == before and sorted(p.name for p in company_db.parent.iterdir()) == [
        "company.sqlite"
    ]


def test_no_sql_fails_the_format(company_db):
    assert score(company_db, "I do not know.") == {"score": 0.0, "acc": 0.0, "format_ok": 0.0}


def test_a_gold_query_runs_once_per_process(company_db, monkeypatch):
    ran = []
    real = sql_answer._run
    monkeypatch.setattr(sql_answer, "_run", lambda db, sql: ran.append(sql) or real(db, sql))
    monkeypatch.setattr(sql_answer, "_gold", type(sql_answer._gold)())
    for _ in range(3):
        score(company_db, fenced("SELECT name FROM dept"))
    assert ran.count(GOLD) == 1 and len(ran) == 4


def test_rows_without_the_database_or_the_gold_sql_raise(company_db, tmp_path):
    with pytest.raises(ValueError, match=r"extra_info\['db_path'\]"):
        sql_answer.compute_score("bird", fenced(GOLD), GOLD, {"db_id": "company"})
    with pytest.raises(FileNotFoundError):
        score(tmp_path / "missing.sqlite", fenced(GOLD))

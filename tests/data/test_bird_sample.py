"""The shipped BIRD-format sample: reproducible from its script, well formed, and small enough to learn; its
dev split large enough to measure learning on, and its train split the one the warm starts were trained on."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections import Counter
from pathlib import Path

import pytest
from data_helpers import SAMPLE, script_module

from rlflow.reward.sql_exec import connect_readonly, execute


@pytest.fixture(scope="module")
def generator():
    with script_module("make_bird_sample") as module:
        yield module


@pytest.fixture(scope="module")
def splits() -> dict[str, list[dict]]:
    return {name: json.loads((SAMPLE / f"{name}.json").read_text()) for name in ("train", "dev")}


def dump(path: Path) -> list[str]:
    conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


def test_script_regenerates_the_shipped_sample(generator, tmp_path):
    generator.generate(tmp_path / "a", seed=7)
    generator.generate(tmp_path / "b", seed=7)
    for name in ("train.json", "dev.json"):
        assert (tmp_path / "a" / name).read_bytes() == (SAMPLE / name).read_bytes()
    shipped = sorted(p.relative_to(SAMPLE) for p in SAMPLE.rglob("*.sqlite"))
    assert shipped == sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*.sqlite"))
    for rel in shipped:
        # same library, same bytes; across SQLite versions only the header's version field may differ
        assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes()
        assert dump(tmp_path / "a" / rel) == dump(SAMPLE / rel)


def test_every_gold_query_returns_rows(splits):
    connections = {}
    for rows in splits.values():
        for r in rows:
            db = SAMPLE / "databases" / r["db_id"] / f"{r['db_id']}.sqlite"
            conn = connections.setdefault(r["db_id"], connect_readonly(db))
            result = execute(conn, r["SQL"], timeout_s=5, max_rows=1000)
            assert result.ok and result.rows, (r, result)


def test_shape_of_the_sample(splits):
    train, dev = splits["train"], splits["dev"]
    assert 350 <= len(train) <= 450 and len(dev) >= 400, "400 dev questions: a standard error of at most 2.5 points"
    assert {r["db_id"] for r in dev} == {r["db_id"] for r in train}, "split by question: dev databases are trained on"
    assert not {(r["db_id"], r["question"]) for r in dev} & {(r["db_id"], r["question"]) for r in train}
    assert {"question_id", "db_id", "question", "evidence", "SQL", "difficulty"} == set(train[0])
    assert 0.2 < sum(1 for r in train if r["evidence"]) / len(train) < 0.8
    assert {r["difficulty"] for r in train} == {"simple", "moderate", "challenging"}
    sql_lengths = sorted(len(r["SQL"]) for r in train + dev)
    assert sql_lengths[len(sql_lengths) * 9 // 10] < 120


def test_the_train_split_is_the_one_the_warm_starts_were_trained_on(splits, generator, tmp_path):
    shipped = (SAMPLE / "train.json").read_bytes()
    assert hashlib.sha256(shipped).hexdigest() == "e76c18e79c8b43b9b9be7cb1b3ee4e0b29a3dabfbbf0ea2282f2b8044c6f6850"
    small = generator.generate(tmp_path, seed=7, dev=100)  # dev as it was: the sample's fifth alone
    assert (tmp_path / "train.json").read_bytes() == shipped
    assert {r["question"] for r in small["dev"]} < {r["question"] for r in splits["dev"]}


def test_dev_shares_no_question_and_no_gold_query_with_train_and_keeps_its_mix(splits):
    train, dev = splits["train"], splits["dev"]
    assert not {r["question"] for r in dev} & {r["question"] for r in train}
    assert not {(r["db_id"], r["SQL"]) for r in dev} & {(r["db_id"], r["SQL"]) for r in train}
    assert len({r["question"] for r in dev}) == len({(r["db_id"], r["SQL"]) for r in dev}) == len(dev)
    for key in ("difficulty", "db_id"):
        shares = {split: Counter(r[key] for r in rows) for split, rows in splits.items()}
        for value, count in shares["train"].items():
            assert abs(shares["dev"][value] / len(dev) - count / len(train)) < 0.05, (key, value, shares)


def test_databases_are_small(splits):
    databases = sorted((SAMPLE / "databases").iterdir())
    assert 4 <= len(databases) <= 6
    for folder in databases:
        conn = connect_readonly(folder / f"{folder.name}.sqlite")
        tables = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'").fetchall()
        assert 2 <= len(tables) <= 4
        assert len(";\n".join(sql for _, sql in tables)) < 400
        for name, _ in tables:
            assert 5 <= conn.execute(f"SELECT COUNT(*) FROM {name}").fetchone()[0] <= 100
        conn.close()

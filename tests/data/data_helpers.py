"""Helpers for the data tests: small BIRD-layout databases and records, verl rows, and a minimal pipeline."""

from __future__ import annotations

import importlib.util
import sqlite3
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rlflow.assets import BIRD_SAMPLE

REPO = Path(__file__).resolve().parents[2]
SAMPLE = BIRD_SAMPLE


@contextmanager
def script_module(name: str) -> Iterator:
    """``scripts/<name>.py`` imported as a module while the block runs (scripts are no package)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def make_db(path: Path, rows: int = 3) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE pet (id INTEGER PRIMARY KEY, name TEXT, kind TEXT)")
    pets = [(i, f"pet{i}", "cat" if i % 2 else "dog") for i in range(rows)]
    conn.executemany("INSERT INTO pet VALUES (?, ?, ?)", pets)
    conn.commit()
    conn.close()
    return path


def bird_record(db_id: str, question: str, sql: str, **extra) -> dict:
    """A record as real BIRD writes it, extra keys included."""
    return {
        "question_id": extra.pop("question_id", 0),
        "db_id": db_id,
        "question": question,
        "evidence": extra.pop("evidence", ""),
        "SQL": sql,
        "difficulty": "simple",
        **extra,
    }


def pipeline(**data):
    """A minimal valid Pipeline whose data section is ``data``."""
    from rlflow.schemas.pipeline import Pipeline

    return Pipeline.model_validate({"name": "t", "data": data, "stages": []})


def verl_row(source: str, question: str, answer, **extra) -> dict:
    """A row as verl's data preprocessing scripts write it (chat prompt, rule reward, extra_info)."""
    return {
        "data_source": source,
        "prompt": [{"role": "user", "content": question}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": answer},
        "extra_info": {"split": "train", "index": extra.pop("index", 0)},
        **extra,
    }


def write_rows(path: Path, rows: list) -> Path:
    """``rows`` as Parquet, JSON Lines or a JSON list, by ``path``'s suffix."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    elif path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        path.write_text(json.dumps(rows))
    return path

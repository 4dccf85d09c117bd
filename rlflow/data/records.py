"""Read text-to-SQL records from BIRD JSON, JSON Lines or Parquet into plain dicts.

All three formats carry the same fields: ``db_id``, ``question``, ``SQL`` (required),
``evidence`` (optional, empty when absent or null), and optionally ``question_id`` (else the
record's position) and ``data_source`` (else ``"bird"``). Extra keys, such as BIRD's
``difficulty``, are accepted and ignored. Every malformed record is reported at once (up to
a screenful), each naming the file, the record and the field. The JSON Lines and Parquet
readers serve verl's format too (``verl_records``).
"""

from __future__ import annotations

import json
from pathlib import Path

from rlflow.data.text import read_utf8
from rlflow.errors import DataError

REQUIRED = ("db_id", "question", "SQL")
_MAX_REPORTED = 10


def json_document(text: str, path: Path) -> object:
    """The JSON value of ``text`` (read from ``path``); a syntax error or runaway nesting is a ``DataError``."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}:{exc.lineno}:{exc.colno}: not valid JSON ({exc.msg})") from None
    except RecursionError:
        raise DataError(f"{path}: JSON nested too deeply to read; flatten the records") from None


def _read_bird(path: Path) -> list:
    records = json_document(read_utf8(path), path)
    if not isinstance(records, list):
        raise DataError(f"{path}: a BIRD file holds a JSON list of records, found {type(records).__name__}")
    return records


def json_lines(text: str, path: Path) -> list:
    """The values of JSON Lines ``text`` (read from ``path``), blank lines skipped."""
    records = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise DataError(
                    f"{path}:{number}: not valid JSON ({exc.msg}); JSON Lines holds one object a line"
                ) from None
            except RecursionError:
                raise DataError(f"{path}:{number}: JSON nested too deeply to read; flatten the record") from None
    return records


def read_jsonl(path: Path) -> list:
    return json_lines(read_utf8(path), path)


def read_parquet(path: Path) -> list:
    """The rows of a Parquet file as plain Python dicts (no numpy values)."""
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path).to_pylist()
    except Exception as exc:  # pyarrow raises several types for a damaged or foreign file
        raise DataError(f"{path}: cannot read as Parquet ({exc})") from None


_READERS = {"bird": _read_bird, "jsonl": read_jsonl, "parquet": read_parquet}


def _problem(record: object) -> str | None:
    if not isinstance(record, dict):
        return f"is a {type(record).__name__}, not an object"
    missing = [k for k in REQUIRED if k not in record]
    if missing:
        return f"misses {', '.join(map(repr, missing))} (records need db_id, question, SQL; evidence is optional)"
    wrong = [k for k in REQUIRED if not isinstance(record[k], str)]
    if record.get("evidence") is not None and not isinstance(record["evidence"], str):
        wrong.append("evidence")
    return f"has non-text {', '.join(map(repr, wrong))}" if wrong else None


def read_records(path: Path, fmt: str, field: str) -> list[dict]:
    """Records of ``path`` (``field`` names the spec field, for messages), normalised and checked."""
    if not path.is_file():
        raise DataError(f"data.{field}: no file at {path}")
    records = _READERS[fmt](path)
    problems = [(i, p) for i, r in enumerate(records) if (p := _problem(r)) is not None]
    if problems:
        shown = "\n".join(f"{path}: record {i} {p}" for i, p in problems[:_MAX_REPORTED])
        more = f"\n... and {len(problems) - _MAX_REPORTED} more" if len(problems) > _MAX_REPORTED else ""
        raise DataError(shown + more)
    return [
        {
            "db_id": r["db_id"],
            "question": r["question"],
            "SQL": r["SQL"],
            "evidence": r.get("evidence") or "",
            "question_id": r.get("question_id", i),
            "data_source": str(r.get("data_source") or "bird"),
        }
        for i, r in enumerate(records)
    ]

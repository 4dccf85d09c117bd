"""Read text-to-SQL records from BIRD JSON, JSON Lines or Parquet into plain dicts.

Every malformed record is reported at once; memory stays bounded whatever the file holds.
Design notes: docs/design/data.md.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from rlflow.data.text import decode_utf8
from rlflow.errors import DataError
from rlflow.io import env_limit, open_regular, read_bytes

log = logging.getLogger(__name__)

REQUIRED = ("db_id", "question", "SQL")
_MAX_REPORTED = 10
# A prompt of 100k tokens is well under 1 MiB; tokenizing a record costs a few times its size.
MAX_RECORD_BYTES = env_limit("RLFLOW_MAX_RECORD_BYTES", 16 << 20)
MAX_DOCUMENT_BYTES = env_limit("RLFLOW_MAX_DOCUMENT_BYTES", 256 << 20)  # a JSON list is held whole
_SKIP = 1 << 20


@dataclass(frozen=True)
class Oversized:
    """A record too large to hold: its row (from 0), where it is in the file, and the bytes it has at least."""

    row: int
    where: str  # "line 7" or "row group 2"
    size: int


def keep_fitting(rows: list, path: Path, truncation: str, stats: dict[str, int] | None = None) -> list:
    """``rows`` without the ``Oversized`` ones: with ``truncation`` error, a ``DataError`` naming the first;
    otherwise each is left out, counted in ``stats["dropped_too_long"]`` and named in one warning."""
    big = [r for r in rows if isinstance(r, Oversized)]
    if not big:
        return rows
    if truncation == "error":
        first = big[0]
        raise DataError(
            f"{path}: row {first.row} ({first.where}) holds {first.size} bytes or more, over the "
            f"{MAX_RECORD_BYTES} a record may hold"
            + (f" (and {len(big) - 1} more rows)" if len(big) > 1 else "")
            + "; shorten the record, or set data.truncation to 'drop' to leave such rows out "
            "(RLFLOW_MAX_RECORD_BYTES raises the cap)"
        )
    if stats is not None:
        stats["dropped_too_long"] = stats.get("dropped_too_long", 0) + len(big)
    shown = ", ".join(f"{r.row} ({r.where})" for r in big[:5]) + (" ..." if len(big) > 5 else "")
    log.warning(
        "%s: left out %d rows over %d bytes each (data.truncation=%s): %s",
        path,
        len(big),
        MAX_RECORD_BYTES,
        truncation,
        shown,
    )
    return [r for r in rows if not isinstance(r, Oversized)]


def json_document(text: str, path: Path) -> object:
    """The JSON value of ``text`` (read from ``path``); a syntax error or runaway nesting is a ``DataError``."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}:{exc.lineno}:{exc.colno}: not valid JSON ({exc.msg})") from None
    except RecursionError:
        raise DataError(f"{path}: JSON nested too deeply to read; flatten the records") from None


def read_document(path: Path) -> str:
    """The text of a whole-file JSON document, at most ``MAX_DOCUMENT_BYTES``."""
    try:
        raw = read_bytes(path, MAX_DOCUMENT_BYTES, "JSON document")
    except OSError as exc:
        if exc.strerror and "more than" in exc.strerror:
            raise DataError(
                f"{path}: {exc.strerror} in one JSON document; write the records as JSON Lines (.jsonl) "
                "or Parquet, which are read a record at a time (RLFLOW_MAX_DOCUMENT_BYTES raises the cap)"
            ) from None
        raise DataError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return decode_utf8(raw, path)


def _read_bird(path: Path) -> list:
    records = json_document(read_document(path), path)
    if not isinstance(records, list):
        raise DataError(f"{path}: a BIRD file holds a JSON list of records, found {type(records).__name__}")
    return records


def read_jsonl(path: Path) -> list:
    """The values of JSON Lines file ``path``, blank lines skipped; an ``Oversized`` for a line over the cap."""
    records: list = []
    offset = 0
    try:
        with open_regular(path) as handle:
            for number, line, size in _lines(handle):
                if line is None:
                    records.append(Oversized(len(records), f"line {number}", size))
                elif line.strip():
                    records.append(_json_line(decode_utf8(line, path, offset, number), path, number))
                offset += size
    except OSError as exc:
        raise DataError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return records


def _lines(handle):
    """(line number, bytes or None when over the cap, size) of each line, never holding more than the cap."""
    number = 0
    while line := handle.readline(MAX_RECORD_BYTES + 1):
        number += 1
        if len(line) <= MAX_RECORD_BYTES or line.endswith(b"\n"):
            yield number, line, len(line)
            continue
        size = len(line)
        while (rest := handle.readline(_SKIP)) and not rest.endswith(b"\n"):
            size += len(rest)
        yield number, None, size + len(rest)


def _json_line(line: str, path: Path, number: int) -> object:
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}:{number}: not valid JSON ({exc.msg}); JSON Lines holds one object a line") from None
    except RecursionError:
        raise DataError(f"{path}:{number}: JSON nested too deeply to read; flatten the record") from None


def json_lines(text: str, path: Path) -> list:
    """The values of JSON Lines ``text`` (read from ``path``), blank lines skipped."""
    return [_json_line(line, path, n) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]


def read_parquet(path: Path) -> list:
    """The rows of a Parquet file as plain Python dicts (no numpy values), a row group at a time; an
    ``Oversized`` for each row of a group that holds more than ``MAX_RECORD_BYTES`` a row."""
    import pyarrow.parquet as pq

    rows: list = []
    try:
        with open_regular(path) as handle:
            parquet = pq.ParquetFile(handle)
            for group in range(parquet.num_row_groups):
                meta = parquet.metadata.row_group(group)
                if meta.total_byte_size > MAX_RECORD_BYTES * max(meta.num_rows, 1):
                    rows += [
                        Oversized(len(rows) + i, f"row group {group}", meta.total_byte_size)
                        for i in range(meta.num_rows)
                    ]
                    continue
                for row in parquet.read_row_group(group).to_pylist():
                    size = _size(row)
                    rows.append(row if size <= MAX_RECORD_BYTES else Oversized(len(rows), f"row group {group}", size))
    except OSError as exc:
        if isinstance(exc.strerror, str):  # the file itself; pyarrow's own OSErrors carry no strerror
            raise DataError(f"{path}: cannot read: {exc.strerror}") from None
        raise DataError(f"{path}: cannot read as Parquet ({exc})") from None
    except Exception as exc:  # pyarrow raises several types for a damaged or foreign file
        raise DataError(f"{path}: cannot read as Parquet ({exc})") from None
    return rows


def _size(value: object) -> int:
    """About the bytes ``value`` takes as JSON: its texts' lengths, 8 for any other leaf. Its objects are
    Parquet structs, whose keys are texts. Every row of every file passes here: texts are tested first."""
    total, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, dict):
            total += sum(map(len, item))
            stack += item.values()
        elif isinstance(item, list):
            stack += item
        else:
            total += len(item) if isinstance(item, bytes) else 8
    return total


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


def read_records(path: Path, fmt: str, field: str, truncation: str = "error", stats: dict | None = None) -> list[dict]:
    """Records of ``path`` (``field`` names the spec field, for messages), normalised and checked; records too
    large to hold follow ``truncation`` (``keep_fitting``, counted in ``stats``)."""
    if not path.exists():
        raise DataError(f"data.{field}: no file at {path}")
    records = _READERS[fmt](path)
    keep_fitting(records, path, truncation, stats)
    numbered = [(i, r) for i, r in enumerate(records) if not isinstance(r, Oversized)]
    problems = [(i, p) for i, r in numbered if (p := _problem(r)) is not None]
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
        for i, r in numbered
    ]

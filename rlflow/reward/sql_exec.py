"""Run untrusted SQL on a SQLite database without letting it change anything or run away.

Design notes: docs/design/sql_exec.md.
"""

from __future__ import annotations

import re
import sqlite3
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Status = Literal["ok", "error", "refused", "timeout", "too_many_rows", "too_large", "out_of_memory"]

_ALLOWED_ACTIONS = frozenset(
    {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
)
# printf/format: one call such as printf('%.*c', 2000000000, 'x') loops for tens of seconds inside a
# single VM step, out of the progress handler's reach; text-to-SQL answers have no need of them.
_DENIED_FUNCTIONS = frozenset({"load_extension", "fts3_tokenizer", "readfile", "writefile", "edit", "printf", "format"})
_QUERY_KEYWORDS = ("select", "with", "values")
_LEADING_NOISE = re.compile(r"(?:\s+|--[^\n]*(?:\n|$)|/\*.*?(?:\*/|$)|\()*", re.S)
_MAX_VALUE_BYTES = 10_000_000
# SQLite's heap, process-wide. Legitimate queries need little (page caches, sorters that spill to temp files);
# the soft limit makes the page caches of many open databases recycle pages before the hard limit refuses.
_HEAP_HARD_LIMIT = 64 * 2**20
_HEAP_SOFT_LIMIT = 32 * 2**20
DEFAULT_MAX_RESULT_BYTES = 32 * 2**20
_MAX_SQL_BYTES = 100_000
_REFUSALS = ("not authorized", "readonly database")  # the authorizer's and mode=ro's messages
_PROGRESS_EVERY = 1_000  # VM instructions between deadline checks: cheap, and well under a millisecond


@dataclass(frozen=True)
class ExecResult:
    status: Status
    rows: frozenset | None = None
    message: str = ""
    columns: tuple[str, ...] = ()  # with head=True
    head: tuple[tuple, ...] = ()  # with head=True: the first rows, in order
    more: bool = False  # with head=True: rows past the head were left unread

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _authorize(action: int, arg1, arg2, db_name, trigger) -> int:
    if action not in _ALLOWED_ACTIONS:
        return sqlite3.SQLITE_DENY
    if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in _DENIED_FUNCTIONS:
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK


def connect_readonly(path: str | Path) -> sqlite3.Connection:
    """Open ``path`` read-only and locked down (see the module docstring); it must exist."""
    path = Path(path).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"no SQLite database at {path}")
    conn = sqlite3.connect(
        f"{path.as_uri()}?mode=ro&immutable=1", uri=True, isolation_level=None, check_same_thread=False
    )
    if hasattr(conn, "enable_load_extension"):  # absent when Python's sqlite3 is built without it
        conn.enable_load_extension(False)
    conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, _MAX_VALUE_BYTES)
    conn.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, _MAX_SQL_BYTES)
    # Some databases hold text that is not valid UTF-8; decode it leniently, the same way for gold and prediction.
    conn.text_factory = lambda raw: raw.decode("utf-8", "replace")
    conn.execute("PRAGMA query_only = ON")
    conn.execute(f"PRAGMA soft_heap_limit = {_HEAP_SOFT_LIMIT}")
    conn.execute(f"PRAGMA hard_heap_limit = {_HEAP_HARD_LIMIT}")
    conn.set_authorizer(_authorize)
    return conn


def _classify(exc: Exception, timed_out: bool) -> ExecResult:
    message = str(exc)
    if timed_out or message == "interrupted":
        return ExecResult("timeout", message=message)
    if isinstance(exc, (sqlite3.ProgrammingError, sqlite3.Warning)) or any(m in message for m in _REFUSALS):
        return ExecResult("refused", message=message)
    return ExecResult("error", message=message)


def is_query(sql: str) -> bool:
    """True when ``sql`` opens with a query keyword, so REINDEX, VACUUM and the like never start."""
    head = sql[_LEADING_NOISE.match(sql).end() :]
    word = re.match(r"[A-Za-z]+", head)
    return bool(word) and word.group(0).lower() in _QUERY_KEYWORDS


def _row_bytes(row: tuple) -> int:
    return sys.getsizeof(row) + sum(sys.getsizeof(value) for value in row)


def _fetch(cursor: sqlite3.Cursor, deadline: float, max_rows: int, max_bytes: int, head: bool) -> ExecResult:
    """The rows one at a time, so the deadline and both caps hold while Python copies them."""
    rows = []
    size = 0
    for row in cursor:
        if head and len(rows) == max_rows:
            return ExecResult("ok", columns=_columns(cursor), head=tuple(rows), more=True)
        size += _row_bytes(row)
        rows.append(row)
        if size > max_bytes:
            return ExecResult("too_large", message=f"the result passed {max_bytes} bytes")
        if len(rows) > max_rows:
            return ExecResult("too_many_rows", message=f"more than {max_rows} rows")
        if time.monotonic() > deadline:
            return ExecResult("timeout", message="the time limit passed while fetching rows")
    if head:
        return ExecResult("ok", columns=_columns(cursor), head=tuple(rows))
    return ExecResult("ok", rows=frozenset(rows))


def _columns(cursor: sqlite3.Cursor) -> tuple[str, ...]:
    return tuple(str(d[0]) for d in cursor.description or ())


def execute(
    conn: sqlite3.Connection,
    sql: str,
    timeout_s: float,
    max_rows: int,
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
    *,
    head: bool = False,
) -> ExecResult:
    """Run one query under a wall-clock deadline (statement and fetching), a row cap and a size cap
    (``head``: the first ``max_rows`` rows in order, the rest unread; see ``ExecResult``)."""
    if not is_query(sql):
        return ExecResult("refused", message="not a query: only SELECT, WITH or VALUES statements run")
    deadline = time.monotonic() + timeout_s
    timed_out = False

    def past_deadline() -> int:
        nonlocal timed_out
        timed_out = time.monotonic() > deadline
        return int(timed_out)

    conn.set_progress_handler(past_deadline, _PROGRESS_EVERY)
    cursor = None
    try:
        cursor = conn.execute(sql)
        result = _fetch(cursor, deadline, max_rows, max_result_bytes, head)
    except (sqlite3.Error, sqlite3.Warning) as exc:  # Python < 3.11 raises Warning for a second statement
        result = _classify(exc, timed_out)
    except MemoryError:  # SQLite's heap limit (SQLITE_NOMEM) or the process's address-space limit
        result = ExecResult("out_of_memory", message="out of memory")
    except (OverflowError, ValueError) as exc:  # e.g. an embedded NUL character
        result = ExecResult("error", message=str(exc))
    finally:
        if cursor is not None:
            cursor.close()  # ends the statement, releasing its read snapshot
        conn.set_progress_handler(None, 0)
    if result.ok and time.monotonic() > deadline:  # building the set of a large result counts too
        return ExecResult("timeout", message="the time limit passed while collecting the result")
    return result


def compile_error(conn: sqlite3.Connection, sql: str) -> str | None:
    """Why ``sql`` cannot run on ``conn`` (not a query, more than one statement, a missing table
    or column, a syntax error), found by compiling it with EXPLAIN without running it; None if it compiles."""
    if not is_query(sql):
        return "not a query: only SELECT, WITH or VALUES statements run"
    try:
        conn.execute(f"EXPLAIN {sql}").close()
    except (sqlite3.Error, sqlite3.Warning) as exc:
        return str(exc)
    return None

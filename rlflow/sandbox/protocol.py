"""The messages between a sandboxed worker and its parent: JSON lists, checked before they are believed.

The worker sends them (``send``); the parent reads the start's answer (``start_answer``) and each
call's (``answer_of``), field by field, into an ``Outcome``. The message kinds and the reasons for
each check: docs/design/sandbox.md.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from multiprocessing.connection import Connection

MAX_EXTRAS = 64  # extra numbers one answer may carry
# scores are float32 tensors whose squares make the group's std: 1e308 passed as finite and became inf
MAX_SCORE = 1e18
MAX_TEXT = 300  # characters of an exception message or a repr kept in a report
_NOT_A_NAME = re.compile(r"[^A-Za-z0-9_.:-]|\.\.+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class Outcome:
    """One call's result. ``failure``: None, ``"error"`` or ``"timeout"``; ``kind`` and ``detail`` describe a
    failure (``kind`` is what is logged once: ``raised ValueError``, ``bad return``...)."""

    score: float = 0.0
    extras: dict[str, float] = field(default_factory=dict)
    failure: str | None = None
    kind: str = ""
    detail: str = ""
    dropped: int = 0  # extra metrics past MAX_EXTRAS, left out
    text: str = ""  # a served tool's answer (a reward function answers with numbers only)

    @property
    def distrusted(self) -> bool:
        """The child broke the protocol or is dying: it is replaced before the next call."""
        return self.kind in ("bad message", "process died")


def short(text) -> str:
    """``text`` on one line (runs of white space made one space), cut at ``MAX_TEXT`` characters."""
    text = " ".join(str(text).split())
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + "..."


def one_line(text: str) -> str:
    """``text`` as one log line: control characters (newlines, terminal escapes) become spaces."""
    return _CONTROL.sub(" ", text)


def metric_name(key: str) -> str:
    """``key`` as a metric name: no control characters, no path parts (``/``, ``..``), at most 64 characters."""
    return _NOT_A_NAME.sub("_", key).lstrip(".")[:64] or "_"


def send(conn: Connection, message: list) -> None:
    """The worker's side: one message, as JSON (never a pickle: the parent runs nothing to read it)."""
    conn.send_bytes(json.dumps(message, allow_nan=False).encode())


def bad_message(detail: str, process: str) -> Outcome:
    """A message the parent does not believe: that call's error, and the child is replaced."""
    return Outcome(failure="error", kind="bad message", detail=f"{process} sent {detail}")


def _text(value) -> bool:
    return isinstance(value, str) and len(value) <= 2000


def answer_of(raw: bytes, due: int, process: str = "the sandboxed process") -> Outcome:
    """The Outcome of one answer of the child to call ``due``, checked field by field; ``process`` names the
    child in the failures' details."""
    try:
        message = json.loads(raw, parse_constant=lambda c: None)  # NaN and Infinity are not scores
    except (ValueError, RecursionError):
        return bad_message("a message that is not JSON (a function writing to its pipe?)", process)
    if not isinstance(message, list) or not message or not isinstance(message[0], str):
        return bad_message("a message that is not a list starting with its kind", process)
    kind, fields = message[0], message[1:]
    if kind == "fatal" and len(fields) == 1 and _text(fields[0]):
        return Outcome(failure="error", kind="process died", detail=f"{process} failed: {one_line(fields[0])}")
    if not fields or fields[0] != due or isinstance(fields[0], bool):
        return bad_message(
            f"an answer to call {str(fields[0] if fields else None)[:40]!r} while call {due} was due", process
        )
    fields = fields[1:]
    if kind == "ok" and len(fields) in (3, 4):
        score, extras, dropped, *text = fields  # a tool's answer carries its text last
        if (
            _number(score)
            and abs(score) <= MAX_SCORE
            and _numbers(extras)
            and isinstance(dropped, int)
            and dropped >= 0
        ):
            if all(isinstance(t, str) for t in text):
                return _clean(float(score), extras, dropped, "".join(text))
    elif kind == "bad" and len(fields) == 1 and _text(fields[0]):
        return Outcome(failure="error", kind="bad return", detail=one_line(fields[0]))
    elif kind == "raised" and len(fields) == 2 and all(_text(f) for f in fields):
        name = one_line(fields[0][:100])
        return Outcome(failure="error", kind=f"raised {name}", detail=f"{name} at {one_line(fields[1])}")
    return bad_message(f"a malformed {kind[:20]!r} message", process)


def _numbers(extras) -> bool:
    return isinstance(extras, dict) and all(isinstance(k, str) and _number(v) for k, v in extras.items())


def _number(value) -> bool:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


def _clean(score: float, extras: dict, dropped: int, text: str) -> Outcome:
    kept: dict[str, float] = {}
    for key, value in extras.items():
        name = metric_name(key)
        if name in kept:
            continue
        if len(kept) < MAX_EXTRAS:
            kept[name] = float(value)
        else:
            dropped += 1
    return Outcome(score, kept, dropped=dropped, text=text)


def start_answer(raw: bytes, references: int) -> list:
    """The child's first answer: ``["ready"]``, or ``["failed", index or None, text]`` for anything else."""
    try:
        message = json.loads(raw)
    except ValueError:
        message = None
    if message == ["ready"]:
        return message
    if isinstance(message, list) and len(message) == 3 and message[0] == "failed" and _text(message[2]):
        index = message[1] if isinstance(message[1], int) and 0 <= message[1] < references else None
        return ["failed", index, message[2]]
    if isinstance(message, list) and len(message) == 2 and message[0] == "fatal" and _text(message[1]):
        return ["failed", None, message[1]]
    return ["failed", None, "its process answered the start with a malformed message"]

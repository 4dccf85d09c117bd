"""A judge's verdict as a score: the built-in patterns ``yes_no`` and ``score``.

A verdict that matches no pattern is None (the stage scores it 0 and counts it), never an exception:
a judge writes free text. User parse functions run in the reward sandbox instead (``judge_score``).
Design notes: docs/design/reward_models.md.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

YES_NO = "yes_no"
SCORE = "score"
BUILTIN_PARSERS = (YES_NO, SCORE)
SCORE_MAX = 10.0
MAX_VERDICT_CHARS = 1 << 16  # a verdict is a few tokens; a longer one is only searched this far

_FIRST_WORD = re.compile(r"[^\w]*(\w+)")
_SCORE = re.compile(r"Score:\s*([-+]?\d+(?:\.\d+)?)", re.IGNORECASE)


def parse_yes_no(verdict: str) -> float | None:
    """1.0 when the first word is ``yes``, 0.0 when it is ``no`` (any case, punctuation around it); else None."""
    match = _FIRST_WORD.match(verdict[:MAX_VERDICT_CHARS])
    word = match.group(1).casefold() if match else ""
    return {"yes": 1.0, "no": 0.0}.get(word)


def parse_score(verdict: str) -> float | None:
    """The first number after ``Score:``, clipped to [0, 10], divided by 10; None without one."""
    match = _SCORE.search(verdict[:MAX_VERDICT_CHARS])
    if match is None:
        return None
    value = float(match.group(1))
    if not math.isfinite(value):
        return None
    return min(max(value, 0.0), SCORE_MAX) / SCORE_MAX


PARSERS: dict[str, Callable[[str], float | None]] = {YES_NO: parse_yes_no, SCORE: parse_score}


def parse_builtin(name: str, verdicts: list) -> list[float | None]:
    """Each verdict through the built-in pattern ``name``; anything not a string is None."""
    parser = PARSERS[name]
    return [parser(v) if isinstance(v, str) else None for v in verdicts]

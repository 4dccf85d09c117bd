"""A math reward with verl's custom-reward signature: the final answer of a response against the ground truth.

The answer is the number after the last ``####``, else the last ``\\boxed{...}``, compared as a number when it
parses; ``compute_score`` returns ``{"score", "acc", "format_ok"}``. Design notes: docs/design/reward.md.
"""

from __future__ import annotations

import math
import re
from collections import deque
from typing import Any

_HASHES = re.compile(r"####\s*+\$?\s*+([-+]?(?:\d[\d,]*(?:\.\d+)?|\.\d+))")  # possessive: no backtracking
_BOXED = "\\boxed{"
_THOUSANDS = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
_FRACTION = re.compile(r"([-+]?\d{1,18})/(\d{1,18})")
REL_TOL = 1e-6


def _boxed(text: str) -> str | None:
    start = text.rfind(_BOXED)
    if start < 0:
        return None
    depth = 1
    begin = start + len(_BOXED)
    for i in range(begin, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[begin:i]
    return None


def extract_answer(text: str) -> str | None:
    """The final answer in ``text`` (see the module docstring), normalised; None when there is none."""
    last = deque(_HASHES.finditer(text), maxlen=1)
    answer = last[0].group(1) if last else _boxed(text)
    if answer is None:
        return None
    answer = normalise(answer)
    return answer or None


def normalise(answer: str) -> str:
    """No whitespace, ``$`` or trailing ``.``; ``1,234.5`` -> ``1234.5``."""
    answer = re.sub(r"\s+", "", answer).replace("$", "").rstrip(".")
    if _THOUSANDS.fullmatch(answer):
        answer = answer.replace(",", "")
    return answer


def as_number(answer: str) -> float | None:
    """The value of a normalised answer (``42``, ``-3.50``, ``1e3``, ``3/4``), or None."""
    value = None
    if _NUMBER.fullmatch(answer):
        value = float(answer)
    elif match := _FRACTION.fullmatch(answer):
        value = int(match.group(1)) / int(match.group(2)) if int(match.group(2)) else None
    return value if value is not None and math.isfinite(value) else None


def _truth(ground_truth: Any) -> str:
    if isinstance(ground_truth, bool):  # True is not the number 1 here
        return str(ground_truth)
    if isinstance(ground_truth, (int, float)):
        return repr(ground_truth)
    text = str(ground_truth)
    return (extract_answer(text) if "####" in text or _BOXED in text else None) or normalise(text)


def matches(answer: str, ground_truth: Any) -> bool:
    """Whether a normalised answer equals the ground truth, as numbers when both are numbers."""
    truth = _truth(ground_truth)
    a, b = as_number(answer), as_number(truth)
    if a is not None and b is not None:
        return math.isclose(a, b, rel_tol=REL_TOL)
    return answer == truth


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None) -> dict:
    """verl's custom-reward signature: ``{"score", "acc", "format_ok"}`` for one response."""
    answer = extract_answer(solution_str)
    correct = float(answer is not None and matches(answer, ground_truth))
    return {"score": correct, "acc": correct, "format_ok": float(answer is not None)}

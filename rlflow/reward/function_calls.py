"""Reward functions in the sandbox: ``FunctionRunner`` calls them in a supervised child process.

The child's ``main`` loads the functions once (``rlflow.reward.functions``) and answers each call
with the function's return as a protocol message (``normalise``); the sandbox (``rlflow.sandbox``)
does the rest. Design notes: docs/design/sandbox.md.
"""

from __future__ import annotations

import numbers
import traceback
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rlflow.reward.functions import FunctionLoadError, load_function, parse_reference
from rlflow.sandbox.process import Names, Sandbox, SandboxError
from rlflow.sandbox.protocol import MAX_EXTRAS, MAX_SCORE, short
from rlflow.sandbox.worker import Answers, LoadFailure, finite, serve

NOT_A_SCORE = f"not a finite number within +-{MAX_SCORE:g}"


class RewardFunctionError(SandboxError):
    """Reward functions that cannot run at all, or failed on every row of a step (named, with the first failure)."""


class FunctionRunner(Sandbox):
    """Calls ``references`` (``module:callable`` or ``file.py:callable``) in a child process:
    ``run(calls)`` gives ``outcomes[row][function]``."""

    def __init__(
        self,
        references: list[str],
        root: str | Path,
        timeout_s: float,
        max_memory_mb: int | None,
        log_path: str | Path | None = None,
    ) -> None:
        """``log_path``: where the functions' stdout and stderr go (capped); None: this process's stderr."""
        names = Names(
            process="the reward process",
            loader="the reward functions' process",
            loading=", ".join(references),
            references=tuple(f"reward function {r!r}" for r in references),
            unknown="its process",
        )
        super().__init__(__name__, references, root, timeout_s, max_memory_mb, log_path, names, RewardFunctionError)


def normalise(value: Any) -> tuple:
    """A function's return value as an ``ok`` or ``bad`` message (without its call id)."""
    if not isinstance(value, dict):
        score = finite(value, MAX_SCORE)
        if score is None:
            return ("bad", f"returned {type(value).__name__} {short(repr(value))}, {NOT_A_SCORE}")
        # verl's reward managers log a bare score as `acc` too: validation's core figure and DAPO's
        # filter_groups.metric: acc read it
        return ("ok", score, {"acc": score}, 0)
    score = finite(value.get("score"), MAX_SCORE)
    if score is None:
        return ("bad", f"returned a dict whose 'score' is {short(repr(value.get('score')))}, {NOT_A_SCORE}")
    extras: dict[str, float] = {}
    dropped = 0
    for key, item in value.items():
        if key == "score" or not isinstance(item, numbers.Real):
            continue  # other values (a parsed answer, a string) are not metrics
        if not isinstance(key, str):
            return ("bad", f"returned a dict with the key {short(repr(key))}; keys must be strings")
        number = finite(item)
        if number is None:
            return ("bad", f"returned a dict whose {short(repr(key))} is {item!r}, not a finite number")
        if len(extras) < MAX_EXTRAS:
            extras[key] = number
        else:
            dropped += 1
    return ("ok", score, extras, dropped)


def last_frame(exc: BaseException) -> str:
    """``file:line in function: message`` for the innermost frame of ``exc``'s traceback."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f"{frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name}" if frames else "(no traceback)"
    return f"{where}: {short(exc)}"


def call(fn, kwargs: dict) -> tuple:
    """Call ``fn`` by keyword; its outcome as one message."""
    try:
        value = fn(**kwargs)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit too: a function must not end the process that serves the others
        return ("raised", type(exc).__name__, last_frame(exc))
    return normalise(value)


def _load(init: dict) -> Answers:
    functions = []
    for i, text in enumerate(init["references"]):
        try:
            functions.append(load_function(parse_reference(text), init["root"]))
        except FunctionLoadError as exc:
            raise LoadFailure(str(exc), i) from None
        except MemoryError:
            raise LoadFailure("MemoryError while loading it", i) from None

    def answers(calls: list) -> Iterable[tuple]:
        for _, index, kwargs in calls:
            yield call(functions[index], kwargs)

    return answers


def main(fd: int) -> None:
    """The child's side: serve the reward functions' calls on ``fd`` until the pipe closes."""
    serve(fd, _load)

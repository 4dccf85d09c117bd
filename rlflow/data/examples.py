"""Examples: prompts ready to train on, and how rendered prompts become them, whatever the data format.

``fit_examples`` tokenizes ``Candidate``s in chunks and applies ``data.max_prompt_length`` per ``data.truncation``.
Design notes: docs/design/data.md.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import NamedTuple

from rlflow.errors import DataError

log = logging.getLogger(__name__)

FIT_STAT_KEYS = ("dropped_too_long", "truncated")
_CHUNK = 256  # prompts tokenized per call


@dataclass(frozen=True)
class Example:
    prompt: str  # the text the model sees (a chat prompt after its template)
    input_ids: tuple[int, ...]
    data_source: str
    reward_info: dict  # ground_truth, extra_info, and a verl row's other columns (see rlflow.data)


class Candidate(NamedTuple):
    """One row's rendered prompt and fields, before tokenizing; ``where`` names it in messages ("row 3")."""

    where: str
    prompt: str
    data_source: str
    reward_info: dict
    templated: bool = False  # rendered by a chat template: its special tokens are in the text


def fit_examples(
    candidates: Iterable[Candidate], tokenizer, data, file: Path, stats: dict[str, int], limit: int | None
) -> list[Example]:
    """Tokenize ``candidates`` and fit each to ``data.max_prompt_length``, up to ``limit`` examples."""
    examples: list[Example] = []
    pending = iter(candidates)
    while limit is None or len(examples) < limit:
        chunk = list(islice(pending, _CHUNK))
        if not chunk:
            break
        for candidate, ids in zip(chunk, _token_ids(tokenizer, chunk), strict=True):
            fitted = _fit(candidate, list(ids), data, file, stats)
            if fitted is not None:
                examples.append(fitted)
    return examples[:limit] if limit is not None else examples


def _token_ids(tokenizer, chunk: list[Candidate]) -> list[list[int]]:
    """Ids of each prompt of ``chunk``, in order; one tokenizer call per kind of prompt present."""
    out: list[list[int]] = [[] for _ in chunk]
    for templated in (False, True):
        rows = [i for i, c in enumerate(chunk) if c.templated is templated]
        if rows:
            kwargs = {"add_special_tokens": False} if templated else {}
            ids = tokenizer([chunk[i].prompt for i in rows], **kwargs)["input_ids"]
            for i, row_ids in zip(rows, ids, strict=True):
                out[i] = row_ids
    return out


def _fit(candidate: Candidate, ids: list[int], data, file: Path, stats: dict[str, int]) -> Example | None:
    limit = data.max_prompt_length
    if len(ids) > limit:
        if data.truncation == "error":
            raise DataError(
                f"{file}: {candidate.where}: prompt is {len(ids)} tokens, over data.max_prompt_length={limit}; "
                "raise max_prompt_length or set data.truncation to 'drop' or 'left'"
            )
        if data.truncation == "drop":
            stats["dropped_too_long"] += 1
            return None
        stats["truncated"] += 1
        ids = ids[-limit:]
    return Example(candidate.prompt, tuple(ids), candidate.data_source, candidate.reward_info)


def report_fitting(file: Path, stats: dict[str, int], data) -> None:
    """One warning per kind of prompt that did not fit, with its count."""
    if stats["dropped_too_long"]:
        log.warning(
            "%s: dropped %d prompts longer than data.max_prompt_length=%d tokens (data.truncation=drop)",
            file,
            stats["dropped_too_long"],
            data.max_prompt_length,
        )
    if stats["truncated"]:
        log.warning(
            "%s: kept the last %d tokens of %d longer prompts (data.truncation=left)",
            file,
            data.max_prompt_length,
            stats["truncated"],
        )

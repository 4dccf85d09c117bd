"""Load a split in verl's RL data format (``data.format: verl``) into examples.

The rows are read and checked by ``verl_records``. A prompt that is a list of chat messages goes
through the tokenizer's chat template (``apply_chat_template(messages, add_generation_prompt=True,
tokenize=False)``), so the example's prompt (the batch's ``raw_prompt``) is the rendered text; a
prompt that is a text is used as it is (TRL's "standard" format). Prompts too long for
``data.max_prompt_length`` follow ``data.truncation`` (``examples``). Each row's ``reward_info``
is ``verl_records.reward_info_of(row)``.

Design decisions:

- A tokenizer without a chat template, given chat prompts, fails before any row is rendered,
  naming the file and the first such row; a template that refuses a row (many raise on roles
  that do not alternate) fails naming the row.
- Rows are rendered lazily, chunk by chunk, so ``max_*_samples`` caps the work, not only the result.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import jinja2

from rlflow.data.examples import FIT_STAT_KEYS, Candidate, Example, fit_examples, report_fitting
from rlflow.data.verl_records import read_verl_rows, reward_info_of
from rlflow.errors import DataError

STAT_KEYS = ("loaded", *FIT_STAT_KEYS)


def load_verl(data, split_file: Path, split: str, tokenizer, limit: int | None) -> tuple[list[Example], dict[str, int]]:
    """The examples of ``split_file`` (``split`` names the spec field) and the counts of what was left out."""
    stats = dict.fromkeys(STAT_KEYS, 0)
    rows = read_verl_rows(split_file, split, data.truncation, stats)
    first_chat = next((i for i, row in enumerate(rows) if isinstance(row["prompt"], list)), None)
    if first_chat is not None and not getattr(tokenizer, "chat_template", None):
        raise DataError(
            f"{split_file}: row {first_chat} (and any like it) holds chat messages, but the tokenizer has no "
            "chat_template to render them; set model.tokenizer to a tokenizer directory whose "
            "tokenizer_config.json has a chat_template, or write the prompts as plain texts"
        )
    examples = fit_examples(_candidates(rows, tokenizer, split_file), tokenizer, data, split_file, stats, limit)
    report_fitting(split_file, stats, data)
    return examples, stats


def _candidates(rows: list[dict], tokenizer, file: Path) -> Iterator[Candidate]:
    for i, row in enumerate(rows):
        prompt = row["prompt"]
        templated = isinstance(prompt, list)
        text = _render(tokenizer, prompt, file, i) if templated else prompt
        yield Candidate(f"row {i}", text, row["data_source"], reward_info_of(row), templated)


def _render(tokenizer, messages: list[dict], file: Path, index: int) -> str:
    messages = [{key: value for key, value in m.items() if value is not None} for m in messages]
    try:
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    except (jinja2.TemplateError, ValueError, TypeError) as exc:  # the template's own raise_exception included
        raise DataError(
            f"{file}: row {index}: the tokenizer's chat template cannot render the prompt ({exc}); "
            "fix the row's messages (many templates want user and assistant turns to alternate)"
        ) from None

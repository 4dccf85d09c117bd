"""Prompts for training and validation, from text-to-SQL records or verl's RL data format, and per-step sampling.

- ``load_split(spec, split, root, tokenizer) -> PromptDataset | None``: a split's tokenized prompts,
  by ``data.format``: ``bird``, ``jsonl``, ``parquet`` (text-to-SQL records and their databases:
  ``text2sql_loader``) or ``verl`` (verl's rows, chat prompts through the tokenizer's chat
  template: ``verl_format``);
- ``PromptDataset.to_batch(indices, pad_id, step=0) -> Batch``: the step's source fields ``prompts``,
  ``prompt_mask``, ``uid``, ``data_source``, ``raw_prompt`` (the rendered prompt) and ``reward_info``;
- ``StepSampler``: which indices each step takes, resumable exactly.

Every row's ``reward_info``, whatever the format, is a dict holding at least:

- ``ground_truth``: the row's ground truth (verl: ``reward_model["ground_truth"]``, any JSON value;
  text-to-SQL: the gold SQL);
- ``extra_info``: a dict (verl: the row's ``extra_info``, ``{}`` when absent; text-to-SQL:
  ``{"db_path": <absolute path of the sqlite file>, "db_id": ..., "question_id": ...}``);
- for verl rows, every other column but ``prompt`` and ``data_source`` under its own name
  (``ability``, ``reward_model``, ...), as plain JSON values.

Importing this package is cheap; torch is loaded by ``dataset`` only when a split is loaded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["load_split", "PromptDataset", "Example", "StepSampler"]

if TYPE_CHECKING:  # pragma: no cover
    from rlflow.data.dataset import Example, PromptDataset, load_split
    from rlflow.data.sampler import StepSampler


def __getattr__(name: str) -> Any:
    if name in ("load_split", "PromptDataset", "Example"):
        from rlflow.data import dataset

        return getattr(dataset, name)
    if name == "StepSampler":
        from rlflow.data.sampler import StepSampler

        return StepSampler
    raise AttributeError(f"module 'rlflow.data' has no attribute {name!r}")

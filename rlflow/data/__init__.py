"""Prompts for training and validation, from text-to-SQL records or verl's RL data format, and per-step sampling.

``load_split`` (a split's tokenized prompts), ``PromptDataset.to_batch`` (a step's source fields) and
``StepSampler``; every row's ``reward_info`` holds ``ground_truth`` and ``extra_info``. Importing it is cheap.
Design notes: docs/design/data.md.
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

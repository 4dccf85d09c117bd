"""Prompts for training and validation: text-to-SQL records, their databases, and per-step sampling.

- ``load_split(spec, split, root, tokenizer) -> PromptDataset | None``: a split's tokenized prompts;
- ``PromptDataset.to_batch(indices, pad_id, step=0) -> Batch``: the step's source fields;
- ``StepSampler``: which indices each step takes, resumable exactly.

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

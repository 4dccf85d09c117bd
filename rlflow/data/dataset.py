"""Load a split into tokenized prompts, whatever its format, and turn rows of it into a ``Batch``.

Rows that cannot be trained on are left out and counted in ``.stats``, never silently.
Design notes: docs/design/data.md.
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path

from rlflow.batch import Batch
from rlflow.data.examples import Example
from rlflow.data.paths import DataPaths
from rlflow.data.text2sql_loader import load_text2sql
from rlflow.data.verl_format import load_verl

log = logging.getLogger(__name__)

__all__ = ["Example", "PromptDataset", "load_split"]


class PromptDataset:
    """Tokenized prompts of one split, with the counts of what loading left out."""

    def __init__(self, examples: list[Example], stats: dict[str, int], source: Path) -> None:
        self.examples = examples
        self.stats = stats
        self.source = source

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int) -> Example:
        return self.examples[index]

    def to_batch(self, indices: list[int], pad_id: int, step: int = 0) -> Batch:
        """Rows ``indices`` as a Batch: ``prompts``/``prompt_mask`` [B, P] left-padded with ``pad_id``."""
        import torch  # here, not at import: loading a split (and its errors) needs no torch

        rows = [self.examples[i] for i in indices]
        width = max((len(e.input_ids) for e in rows), default=0)
        prompts = torch.full((len(rows), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for r, example in enumerate(rows):
            n = len(example.input_ids)
            prompts[r, width - n :] = torch.tensor(example.input_ids, dtype=torch.long)
            mask[r, width - n :] = 1
        return Batch(
            {"prompts": prompts, "prompt_mask": mask},
            {
                "uid": [f"{step}-{r}-{i}" for r, i in enumerate(indices)],
                "data_source": [e.data_source for e in rows],
                "raw_prompt": [e.prompt for e in rows],
                "reward_info": [copy.deepcopy(e.reward_info) for e in rows],
            },
        )


def load_split(spec, split: str, root: Path, tokenizer) -> PromptDataset | None:
    """Load ``split`` ("train" or "val") of pipeline ``spec``; None when the pipeline has no such split."""
    if split not in ("train", "val"):
        raise ValueError(f"split must be 'train' or 'val', not {split!r}")
    data = spec.data
    paths = DataPaths.from_spec(data, Path(root))
    split_file = paths.split_file(split)
    if split_file is None:
        return None
    limit = data.max_train_samples if split == "train" else data.max_val_samples
    if data.format == "verl":
        examples, stats = load_verl(data, split_file, split, tokenizer, limit)
    else:
        examples, stats = load_text2sql(data, paths, split_file, split, tokenizer, limit)
    stats["loaded"] = len(examples)
    log.info("%s: loaded %d prompts %s", split_file, len(examples), stats)
    return PromptDataset(examples, stats, split_file)

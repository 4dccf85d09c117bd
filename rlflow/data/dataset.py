"""Load a text-to-SQL split into tokenized prompts, and turn rows of it into a ``Batch``.

``load_split(spec, split, root, tokenizer)`` reads the split's records (BIRD JSON, JSON Lines or
Parquet), renders each question's prompt from the template and the database's schema, and
tokenizes it. Records that cannot be trained on are left out and counted in ``.stats``,
never silently:

- a question whose database file is missing: skipped (``skipped_missing_db``); each missing
  database is named once in the log;
- gold SQL that does not compile on its database (checked with EXPLAIN: no query runs at load,
  so a large BIRD split loads in seconds): dropped (``dropped_bad_gold``) with one warning;
- a prompt longer than ``data.max_prompt_length`` tokens: per ``data.truncation``, dropped
  (``dropped_too_long``), cut to its last tokens (``truncated``), or an error.

``PromptDataset.to_batch`` left-pads the chosen prompts to the longest of them, as verl does,
and tags each row with a ``uid`` built from the step and the row, so reruns are reproducible.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

import torch

from rlflow.batch import Batch
from rlflow.data.paths import DataPaths, database_file
from rlflow.data.prompts import PromptTemplate, schema_text
from rlflow.data.records import read_records
from rlflow.errors import DataError
from rlflow.reward.sql_exec import compile_error, connect_readonly

log = logging.getLogger(__name__)

STAT_KEYS = ("loaded", "skipped_missing_db", "dropped_bad_gold", "dropped_too_long", "truncated")
_CHUNK = 256  # prompts tokenized per call: fast-tokenizer batching without holding a whole split twice


@dataclass(frozen=True)
class Example:
    prompt: str
    input_ids: tuple[int, ...]
    data_source: str
    reward_info: dict  # db_path (absolute), gold_sql, question_id, db_id


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
                "reward_info": [dict(e.reward_info) for e in rows],
            },
        )


class _Loader:
    """One split's loading pass: caches per database, counters, and what to log once."""

    def __init__(self, data, paths: DataPaths, split_file: Path, tokenizer) -> None:
        self.data, self.file, self.tokenizer = data, split_file, tokenizer
        self.databases = paths.databases_for(split_file)
        self.template = PromptTemplate(paths.template)
        self.stats = dict.fromkeys(STAT_KEYS, 0)
        self.schemas: dict[str, str | None] = {}  # db_id -> schema text, None when the file is missing
        self.connections: dict[str, object] = {}
        self.bad_gold: list[str] = []

    def _schema(self, db_id: str, where: str) -> str | None:
        if db_id not in self.schemas:
            path = database_file(self.databases, db_id, where)
            if path.is_file():
                self.schemas[db_id] = schema_text(path)
                self.connections[db_id] = connect_readonly(path)
            else:
                self.schemas[db_id] = None
                log.warning("%s: database %r not found at %s; its questions are skipped", self.file, db_id, path)
        return self.schemas[db_id]

    def candidates(self, records: list[dict]) -> Iterator[tuple[int, str, Example]]:
        """(record index, prompt, example without ids) for each record whose database and gold are usable."""
        for i, record in enumerate(records):
            db_id, where = record["db_id"], f"{self.file}: record {i}"
            schema = self._schema(db_id, where)
            if schema is None:
                self.stats["skipped_missing_db"] += 1
                continue
            problem = compile_error(self.connections[db_id], record["SQL"])
            if problem is not None:
                self.stats["dropped_bad_gold"] += 1
                self.bad_gold.append(f"record {i} ({db_id}): {problem}")
                continue
            prompt = self.template.render(
                schema=schema, question=record["question"], evidence=record["evidence"], db_id=db_id
            )
            info = {
                "db_path": str(database_file(self.databases, db_id, where)),
                "gold_sql": record["SQL"],
                "question_id": record["question_id"],
                "db_id": db_id,
            }
            yield i, prompt, Example(prompt, (), record["data_source"], info)

    def fit(self, index: int, ids: list[int], example: Example) -> Example | None:
        """Apply data.truncation to one tokenized prompt."""
        limit = self.data.max_prompt_length
        if len(ids) > limit:
            if self.data.truncation == "error":
                raise DataError(
                    f"{self.file}: record {index}: prompt is {len(ids)} tokens, over data.max_prompt_length={limit}; "
                    "raise max_prompt_length or set data.truncation to 'drop' or 'left'"
                )
            if self.data.truncation == "drop":
                self.stats["dropped_too_long"] += 1
                return None
            self.stats["truncated"] += 1
            ids = ids[-limit:]
        return Example(example.prompt, tuple(ids), example.data_source, example.reward_info)

    def load(self, records: list[dict], limit: int | None) -> list[Example]:
        examples: list[Example] = []
        pending = self.candidates(records)
        while limit is None or len(examples) < limit:
            chunk = list(islice(pending, _CHUNK))
            if not chunk:
                break
            ids = self.tokenizer([prompt for _, prompt, _ in chunk])["input_ids"]
            for (index, _, example), token_ids in zip(chunk, ids, strict=True):
                fitted = self.fit(index, list(token_ids), example)
                if fitted is not None:
                    examples.append(fitted)
        return examples[:limit] if limit is not None else examples

    def close(self) -> None:
        for conn in self.connections.values():
            conn.close()

    def report(self) -> None:
        if self.bad_gold:
            shown = "; ".join(self.bad_gold[:5]) + (" ..." if len(self.bad_gold) > 5 else "")
            log.warning(
                "%s: dropped %d questions whose gold SQL fails on its database: %s",
                self.file,
                len(self.bad_gold),
                shown,
            )
        if self.stats["skipped_missing_db"]:
            log.warning(
                "%s: skipped %d questions whose database is missing", self.file, self.stats["skipped_missing_db"]
            )
        if self.stats["dropped_too_long"]:
            log.warning(
                "%s: dropped %d prompts longer than data.max_prompt_length=%d tokens (data.truncation=drop)",
                self.file,
                self.stats["dropped_too_long"],
                self.data.max_prompt_length,
            )
        if self.stats["truncated"]:
            log.warning(
                "%s: kept the last %d tokens of %d longer prompts (data.truncation=left)",
                self.file,
                self.data.max_prompt_length,
                self.stats["truncated"],
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
    records = read_records(split_file, data.format, split)
    loader = _Loader(data, paths, split_file, tokenizer)
    try:
        examples = loader.load(records, data.max_train_samples if split == "train" else data.max_val_samples)
    finally:
        loader.close()
    loader.stats["loaded"] = len(examples)
    loader.report()
    log.info("%s: loaded %d prompts %s", split_file, len(examples), loader.stats)
    return PromptDataset(examples, loader.stats, split_file)

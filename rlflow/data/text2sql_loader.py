"""Load a text-to-SQL split (``data.format: bird | jsonl | parquet``) into examples.

Prompts are rendered from the template and the database's schema; records that cannot be trained on are left
out and counted, never silently. Design notes: docs/design/data.md.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

from rlflow.data.examples import FIT_STAT_KEYS, Candidate, Example, fit_examples, report_fitting
from rlflow.data.paths import DataPaths, database_file
from rlflow.data.prompts import PromptTemplate, schema_text
from rlflow.data.records import read_records
from rlflow.reward.sql_exec import compile_error, connect_readonly

log = logging.getLogger(__name__)

SQL_TOOL = "run_sql"  # the shipped SQL tool's name (pipelines/tools/bird_sql.yaml)
STAT_KEYS = ("loaded", "skipped_missing_db", "dropped_bad_gold", *FIT_STAT_KEYS)


class _Questions:
    """One split's questions as candidates: caches per database, counters, and what to log once."""

    def __init__(self, paths: DataPaths, split_file: Path, stats: dict[str, int]) -> None:
        self.file, self.stats = split_file, stats
        self.databases = paths.databases_for(split_file)
        self.template = PromptTemplate(paths.template)
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

    def candidates(self, records: list[dict]) -> Iterator[Candidate]:
        """A candidate for each record whose database and gold SQL are usable."""
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
            db_path = str(database_file(self.databases, db_id, where))
            info = {
                "ground_truth": record["SQL"],
                "extra_info": {
                    "db_path": db_path,
                    "db_id": db_id,
                    "question_id": record["question_id"],
                    "tools_kwargs": {SQL_TOOL: {"create_kwargs": {"db_path": db_path}}},
                },
            }
            yield Candidate(f"record {i}", prompt, record["data_source"], info)

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


def load_text2sql(
    data, paths: DataPaths, split_file: Path, split: str, tokenizer, limit: int | None
) -> tuple[list[Example], dict[str, int]]:
    """The examples of ``split_file`` (``split`` names the spec field) and the counts of what was left out."""
    stats = dict.fromkeys(STAT_KEYS, 0)
    records = read_records(split_file, data.format, split, data.truncation, stats)
    questions = _Questions(paths, split_file, stats)
    try:
        examples = fit_examples(questions.candidates(records), tokenizer, data, split_file, stats, limit)
    finally:
        questions.close()
    questions.report()
    report_fitting(split_file, stats, data)
    return examples, stats

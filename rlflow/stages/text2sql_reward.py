"""Stage ``text2sql_reward``: execution-accuracy reward for text-to-SQL (BIRD).

Per row: extract the SQL, run it and the gold SQL read-only on the question's database, compare the result
sets as BIRD does and score; refused, slow or oversized SQL scores 0. Design notes: docs/design/text2sql_reward.md.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from rlflow.reward.extract import extract_sql
from rlflow.reward.sql_exec import ExecResult, connect_readonly, execute
from rlflow.schemas.pipeline import TEXT2SQL_FORMATS
from rlflow.stages.base import StageConfig, StageContext, StageKind
from rlflow.stages.model_scores import combined, rule_reward_reads
from rlflow.stages.registry import builtin_stage
from rlflow.stages.token_scores import place_on_last_token

if TYPE_CHECKING:  # pragma: no cover
    from rlflow.batch import Batch
    from rlflow.schemas.pipeline import Pipeline, StageSpec

log = logging.getLogger(__name__)

EXTRA_KEYS = ("acc", "format_ok", "timeout", "error")
METRIC_OF_EXTRA = {"acc": "acc", "format_ok": "format_ok", "timeout": "timeout_rate", "error": "error_rate"}
_LIMIT_HITS = ("refused", "timeout", "too_many_rows", "too_large", "out_of_memory")


@dataclass
class _Caches:
    connections: dict
    gold: dict
    warned: set


def _caches(state: dict) -> _Caches:
    return _Caches(
        state.setdefault("sql_connections", {}),
        state.setdefault("sql_gold_results", {}),
        state.setdefault("sql_warned", set()),
    )


def _connection(caches: _Caches, db_path: str):
    conn = caches.connections.get(db_path)
    if conn is None:
        conn = caches.connections[db_path] = connect_readonly(db_path)
    return conn


def _gold(caches: _Caches, db_path: str, gold_sql: str, config) -> ExecResult:
    key = (db_path, gold_sql)
    result = caches.gold.get(key)
    if result is None:
        result = caches.gold[key] = execute(
            _connection(caches, db_path), gold_sql, config.timeout_s, config.max_rows, _max_bytes(config)
        )
        if not result.ok:
            log.warning(
                "gold SQL for %s gives %s (%s); its rows cannot score as correct: %s",
                db_path,
                result.status,
                result.message,
                gold_sql,
            )
    return result


def _max_bytes(config) -> int:
    return int(config.max_result_mb * 2**20)


def score_row(response: str, info: dict, config, caches: _Caches) -> tuple[float, dict]:
    """The score of one response and its ``reward_extra`` record."""
    extra = dict.fromkeys(EXTRA_KEYS, 0)
    sql = extract_sql(response, config.extract)
    if sql is None:
        return 0.0, extra
    extra["format_ok"] = 1
    db_path = info["extra_info"]["db_path"]
    try:
        conn = _connection(caches, db_path)
    except (OSError, sqlite3.Error) as exc:  # a database deleted or unreadable since loading
        if db_path not in caches.warned:
            caches.warned.add(db_path)
            log.warning("cannot open %s (%s); its rows score 0", db_path, exc)
        extra["error"] = 1
        return 0.0, extra
    started = time.monotonic()
    pred = execute(conn, sql, config.timeout_s, config.max_rows, _max_bytes(config))
    spent = time.monotonic() - started
    if not pred.ok:
        extra["timeout" if pred.status == "timeout" else "error"] = 1
        return (0.0 if pred.status in _LIMIT_HITS else config.format_score), extra
    gold = _gold(caches, db_path, info["ground_truth"], config)
    started = time.monotonic()
    same = gold.ok and pred.rows == gold.rows
    if spent + time.monotonic() - started > config.timeout_s:  # the gold query's own time is not the answer's
        extra["timeout"] = 1
        return 0.0, extra
    if same:
        extra["acc"] = 1
        return config.correct_score, extra
    return config.partial_score, extra


def _score_safely(response: str, info: dict, config, caches: _Caches) -> tuple[float, dict]:
    try:
        return score_row(response, info, config, caches)
    except Exception as exc:  # MemoryError included: one answer's failure is its own 0, not the run's end
        kind = type(exc).__name__
        if kind not in caches.warned:
            caches.warned.add(kind)
            log.warning("scoring a response failed (%s: %s); such rows score 0", kind, exc)
        extra = dict.fromkeys(EXTRA_KEYS, 0)
        extra["error"] = 1
        return 0.0, extra


class Text2SqlRewardConfig(StageConfig):
    extract: Literal["auto", "fenced", "answer_tag", "bare"] = "auto"
    timeout_s: float = Field(5.0, gt=0, description="Per-query time limit.")
    max_rows: int = Field(10000, gt=0, description="Row cap per query result.")
    max_result_mb: float = Field(32.0, gt=0, description="Cap on one query result's total size in memory (MB).")
    correct_score: float = 1.0
    partial_score: float = Field(0.0, description="Score for SQL that runs but gives a wrong result.")
    format_score: float = Field(0.0, description="Score for a well-formed answer whose SQL fails.")


@builtin_stage
class Text2SqlReward(StageKind):
    name = "text2sql_reward"
    role = "reward"
    config_model = Text2SqlRewardConfig
    verl_timer = "reward"
    reads_fields = ("response_text", "response_mask", "reward_info")
    writes_fields = ("token_level_scores", "scores")

    @classmethod
    def reads(cls, pipeline: Pipeline, stage: StageSpec) -> tuple[str, ...]:
        return rule_reward_reads(pipeline, cls.reads_fields)

    allowed_on = frozenset({"cpu", "driver", "local"})
    uses_torch = False
    description = "Execution-accuracy reward: run predicted and gold SQL read-only, compare result sets."

    @classmethod
    def check(cls, pipeline, stage) -> list[tuple[str, str]]:
        """The rows must be text-to-SQL records: only they carry a database and gold SQL."""
        fmt = pipeline.data.format
        if fmt in TEXT2SQL_FORMATS:
            return []
        return [
            (
                "uses",
                f"{cls.name} scores SQL on the databases of text-to-SQL records, but data.format is {fmt}, "
                f"whose rows have none; use a reward for that data, or a text-to-SQL format "
                f"({', '.join(TEXT2SQL_FORMATS)})",
            )
        ]

    def run(self, batch: Batch, ctx: StageContext) -> Batch:
        """Score ``batch``'s rows; adds ``token_level_scores``, ``scores``, ``reward_extra`` and reward metrics."""
        import numpy as np

        config = ctx.config
        caches = _caches(ctx.state)
        results = [
            _score_safely(text, info, config, caches)
            for text, info in zip(batch["response_text"], batch["reward_info"], strict=True)
        ]
        scores = combined([score for score, _ in results], batch, ctx.pipeline)
        extras = [extra for _, extra in results]
        batch["token_level_scores"] = place_on_last_token(scores, batch["response_mask"])
        batch["scores"] = np.asarray(scores, dtype=np.float32)
        batch["reward_extra"] = extras
        if extras:
            for key, metric in METRIC_OF_EXTRA.items():
                batch.metrics[f"reward/{metric}"] = sum(e[key] for e in extras) / len(extras)
        return batch

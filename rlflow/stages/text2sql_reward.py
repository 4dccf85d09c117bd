"""Stage ``text2sql_reward``: execution-accuracy reward for text-to-SQL (BIRD).

Extracts the SQL from each response, runs prediction and gold read-only on the question's
SQLite database under a time limit, a row cap and a size cap, and scores 1.0 when the result sets match
(as sets of rows, as BIRD does). The score sits on the last response token.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rlflow.stages.base import StageConfig, StageContext, StageKind
from rlflow.stages.registry import register_stage


class Text2SqlRewardConfig(StageConfig):
    extract: Literal["auto", "fenced", "answer_tag", "bare"] = "auto"
    timeout_s: float = Field(5.0, gt=0, description="Per-query time limit.")
    max_rows: int = Field(10000, gt=0, description="Row cap per query result.")
    max_result_mb: float = Field(32.0, gt=0, description="Cap on one query result's total size in memory (MB).")
    correct_score: float = 1.0
    partial_score: float = Field(0.0, description="Score for SQL that runs but gives a wrong result.")
    format_score: float = Field(0.0, description="Score for a well-formed answer whose SQL fails.")


@register_stage
class Text2SqlReward(StageKind):
    name = "text2sql_reward"
    config_model = Text2SqlRewardConfig
    verl_timer = "reward"
    reads_fields = ("response_text", "response_mask", "reward_info")
    writes_fields = ("token_level_scores", "scores")
    allowed_on = frozenset({"cpu", "driver", "local"})
    description = "Execution-accuracy reward: run predicted and gold SQL read-only, compare result sets."

    def run(self, batch, ctx: StageContext):
        from rlflow.reward.stage import run_text2sql_reward

        return run_text2sql_reward(batch, ctx)

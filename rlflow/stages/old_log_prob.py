"""Stage ``old_log_prob``: log-probs (and entropy) of the responses under the current actor.

verl step 4 ([old_log_prob]); the entropy becomes ``actor/entropy``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rlflow.stages.base import StageConfig, StageContext, StageKind
from rlflow.stages.registry import register_stage

LOG_PROB_READS = ("prompts", "prompt_mask", "responses", "response_mask")


class LogProbConfig(StageConfig):
    micro_batch_size: int | None = Field(None, gt=0, description="Samples per forward; defaults to trainer.log_prob_micro_batch_size.")
    engine: Literal["torch", "deepspeed"] = "torch"


@register_stage
class OldLogProb(StageKind):
    name = "old_log_prob"
    config_model = LogProbConfig
    verl_timer = "old_log_prob"
    reads_fields = LOG_PROB_READS
    writes_fields = ("old_log_probs", "entropys")
    description = "Log-probs and entropy of the responses under the current actor."

    def run(self, batch, ctx: StageContext):
        from rlflow.stages.impl.log_prob import run_old_log_prob

        return run_old_log_prob(batch, ctx)

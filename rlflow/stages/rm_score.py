"""Stage ``rm_score``: a sequence-classification reward model scores each (prompt, response) row (verl's disrm).

The model is the ``reward_model:`` block's; it runs without gradient on the stage's pool, its own or the
actor's. Its score meets the rule rewards as ``rlflow.stages.model_scores`` says.
Design notes: docs/design/reward_models.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlflow.stages.base import StageContext, StageKind
from rlflow.stages.model_scores import model_reward_writes, model_scores_batch
from rlflow.stages.registry import builtin_stage

if TYPE_CHECKING:  # pragma: no cover
    from rlflow.batch import Batch
    from rlflow.schemas.pipeline import Pipeline, StageSpec


@builtin_stage
class RewardModelScore(StageKind):
    name = "rm_score"
    role = "reward_model"
    engine_roles = frozenset({"reward_model"})
    allowed_on = frozenset({"local"})
    uses_torch = False  # its fields are numpy (scores, masks, text); the reward model's torch stays in the engine
    reads_fields = ("raw_prompt", "response_text", "response_mask")
    description = "A reward model's score of each response (a sequence classifier, verl's reward_model)."

    @classmethod
    def writes(cls, pipeline: Pipeline, stage: StageSpec) -> tuple[str, ...]:
        return model_reward_writes(pipeline)

    def run(self, batch: Batch, ctx: StageContext) -> Batch:
        rm = ctx.pipeline.reward_model
        params = {
            "micro_batch_size": rm.micro_batch_size_per_gpu or ctx.pipeline.trainer.log_prob_micro_batch_size_per_gpu,
            "max_length": rm.max_length,
        }
        raw = ctx.engine.compute_rm_score(ctx.inputs(batch), params)["rm_scores"]
        return model_scores_batch(raw.float().cpu().numpy(), batch, ctx.pipeline, {})

"""Stage ``teacher_log_prob``: the teachers' log-probs of the student's response tokens (on-policy distillation).

Each row goes to its teacher by ``distillation.teacher_key`` (verl routes by data_source); the teacher gives
the log-prob of each sampled token, or its top-k log-probs and their ids for ``forward_kl_topk``. verl
computes them beside the rollout; here they are a stage on the teachers' pool. Design notes:
docs/design/distillation.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlflow.stages.base import StageContext, StageKind
from rlflow.stages.registry import builtin_stage

if TYPE_CHECKING:  # pragma: no cover
    from rlflow.batch import Batch
    from rlflow.schemas.pipeline import Pipeline, StageSpec


@builtin_stage
class TeacherLogProb(StageKind):
    name = "teacher_log_prob"
    role = "teacher"
    engine_roles = frozenset({"teacher"})
    allowed_on = frozenset({"local"})
    reads_fields = ("prompts", "prompt_mask", "responses", "response_mask", "data_source")
    description = "The teachers' log-probs of the response tokens (top-k for forward_kl_topk)."

    @classmethod
    def writes(cls, pipeline: Pipeline, stage: StageSpec) -> tuple[str, ...]:
        topk = pipeline.distillation.distillation_loss.use_topk
        return ("teacher_logprobs", "teacher_ids") if topk else ("teacher_logprobs",)

    def run(self, batch: Batch, ctx: StageContext) -> Batch:
        d, trainer = ctx.pipeline.distillation, ctx.pipeline.trainer
        keys = batch["data_source"]  # distillation.teacher_key: validate holds it to data_source
        params = {
            "teachers": [d.teacher_for(str(k)) for k in keys],
            "topk": d.distillation_loss.topk if d.distillation_loss.use_topk else 0,
            "micro_batch_size": d.micro_batch_size_per_gpu or trainer.log_prob_micro_batch_size_per_gpu,
        }
        return ctx.engine.compute_teacher_log_probs(ctx.inputs(batch), params)

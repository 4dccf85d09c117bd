"""Stage ``old_log_prob``: log-probs (and entropy) of the responses under the current actor.

verl step 4 ([old_log_prob]). Design notes: docs/design/stages.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from rlflow.stages.base import StageConfig, StageContext, StageKind, logprob_temperature
from rlflow.stages.registry import builtin_stage

if TYPE_CHECKING:  # pragma: no cover
    from rlflow.batch import Batch


class LogProbConfig(StageConfig):
    micro_batch_size: int | None = Field(
        None, gt=0, description="Samples per forward; defaults to trainer.log_prob_micro_batch_size_per_gpu."
    )
    use_dynamic_bsz: bool | None = Field(
        None, description="Token-budget micro-batches; defaults to trainer.log_prob_use_dynamic_bsz."
    )
    max_token_len: int | None = Field(
        None, gt=0, description="Tokens per micro-batch; defaults to trainer.log_prob_max_token_len_per_gpu."
    )
    engine: Literal["torch", "deepspeed"] = "torch"


def log_prob_params(ctx: StageContext) -> dict:
    """Micro-batch: the stage's, else trainer.log_prob_micro_batch_size_per_gpu, else the update's micro-batch.

    With token-budget micro-batches (the stage's ``use_dynamic_bsz``, else the trainer's
    ``log_prob_use_dynamic_bsz``, else ``use_dynamic_bsz``, as verl interpolates them)
    ``max_token_len`` is the budget (the stage's, else ``log_prob_max_token_len_per_gpu``, else
    ``ppo_max_token_len_per_gpu``) and the sample count is unused; otherwise it is None.
    """
    trainer, config = ctx.pipeline.trainer, ctx.config
    size = config.micro_batch_size or trainer.log_prob_micro_batch_size_per_gpu or trainer.ppo_micro_batch_size_per_gpu
    dynamic = next(
        v for v in (config.use_dynamic_bsz, trainer.log_prob_use_dynamic_bsz, trainer.use_dynamic_bsz) if v is not None
    )
    budget = config.max_token_len or trainer.log_prob_max_token_len_per_gpu or trainer.ppo_max_token_len_per_gpu
    return {
        "micro_batch_size": size,
        "max_token_len": budget if dynamic else None,
        "temperature": logprob_temperature(ctx.sampling),
    }


@builtin_stage
class OldLogProb(StageKind):
    name = "old_log_prob"
    role = "log_prob"
    needs_sampling = True
    engine_roles = frozenset({"actor"})
    config_model = LogProbConfig
    verl_timer = "old_log_prob"
    reads_fields = ("prompts", "prompt_mask", "responses", "response_mask")
    writes_fields = ("old_log_probs", "entropys")
    description = "Log-probs and entropy of the responses under the current actor."

    def run(self, batch: Batch, ctx: StageContext) -> Batch:
        from verl.trainer.ppo.core_algos import agg_loss

        out = ctx.engine.compute_log_prob(ctx.inputs(batch), log_prob_params(ctx))
        if len(batch):
            entropy = agg_loss(out["entropys"], batch["response_mask"].bool(), ctx.pipeline.algorithm.loss_agg_mode)
            out.metrics["actor/entropy"] = float(entropy)
        return out

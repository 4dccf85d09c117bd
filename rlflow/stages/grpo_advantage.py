"""Stage ``grpo_advantage``: token-level rewards and GRPO advantages grouped by ``uid``.

verl step 7 ([adv]). The math is verl's own (``verl.trainer.ppo.core_algos``); rewards are
the scores, minus ``kl_coef`` x KL when ``use_kl_in_reward``.
"""

from __future__ import annotations

from rlflow.stages.base import StageContext, StageKind
from rlflow.stages.registry import register_stage


@register_stage
class GrpoAdvantage(StageKind):
    name = "grpo_advantage"
    verl_timer = "adv"
    reads_fields = ("token_level_scores", "response_mask", "uid")
    writes_fields = ("token_level_rewards", "advantages", "returns")
    allowed_on = frozenset({"driver", "cpu", "local"})
    dispatch = "driver"
    description = "GRPO outcome advantages (verl core_algos), grouped by uid."

    @classmethod
    def reads(cls, pipeline, stage):
        extra = ("old_log_probs", "ref_log_prob") if pipeline.algorithm.use_kl_in_reward else ()
        return cls.reads_fields + extra

    def run(self, batch, ctx: StageContext):
        from rlflow.stages.impl.advantage import run_grpo_advantage

        return run_grpo_advantage(batch, ctx)

"""Stage ``ref_log_prob``: log-probs of the responses under the frozen reference policy.

verl step 5 ([ref]); present exactly when ``use_kl_loss`` or ``use_kl_in_reward``.
"""

from __future__ import annotations

from rlflow.stages.base import StageContext, StageKind
from rlflow.stages.old_log_prob import LOG_PROB_READS, LogProbConfig
from rlflow.stages.registry import register_stage


@register_stage
class RefLogProb(StageKind):
    name = "ref_log_prob"
    config_model = LogProbConfig
    verl_timer = "ref"
    reads_fields = LOG_PROB_READS
    writes_fields = ("ref_log_prob",)
    description = "Log-probs of the responses under the frozen initial policy."

    def run(self, batch, ctx: StageContext):
        from rlflow.stages.impl.log_prob import run_ref_log_prob

        return run_ref_log_prob(batch, ctx)

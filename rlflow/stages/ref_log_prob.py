"""Stage ``ref_log_prob``: log-probs of the responses under the frozen reference policy.

verl step 5 ([ref]); present exactly when ``use_kl_loss`` or ``use_kl_in_reward``. It reads
what ``old_log_prob`` reads and takes the same settings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlflow.stages.base import StageContext, StageKind
from rlflow.stages.old_log_prob import LogProbConfig, OldLogProb, log_prob_params
from rlflow.stages.registry import builtin_stage

if TYPE_CHECKING:  # pragma: no cover
    from rlflow.batch import Batch


@builtin_stage
class RefLogProb(StageKind):
    name = "ref_log_prob"
    role = "reference"
    engine_roles = frozenset({"ref"})
    config_model = LogProbConfig
    verl_timer = "ref"
    reads_fields = OldLogProb.reads_fields
    writes_fields = ("ref_log_prob",)
    description = "Log-probs of the responses under the frozen initial policy."

    def run(self, batch: Batch, ctx: StageContext) -> Batch:
        return ctx.engine.compute_ref_log_prob(ctx.inputs(batch), log_prob_params(ctx))

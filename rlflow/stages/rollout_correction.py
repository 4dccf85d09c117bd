"""verl's rollout correction (``algorithm.rollout_correction``) as the stages see it: fields and math.

Which policy the loss treats as the old one, as verl names it:
- default (nothing corrected): ``old_log_prob`` recomputes the log-probs under the actor's current
  weights, the proximal policy; the rollout's own log-probs only feed the ``rollout_corr/*`` metrics.
- decoupled (``rollout_is`` and/or ``rollout_rs``): as above, and the advantage stage computes
  verl's truncated importance weights pi_old / pi_rollout (``rollout_is_weights``, multiplied into
  the policy loss) and its rejection mask (``rollout_rs_mask``: the response mask without the
  rejected tokens or sequences) from the rollout's log-probs, as verl's V1 trainer does in its
  advantage step (``compute_rollout_correction_and_add_to_batch``).
- ``bypass_mode``: the rollout's log-probs *are* the old policy (the behaviour policy that sampled
  the batch, whatever version it was); the plan drops the ``old_log_prob`` pass, as verl skips its
  forward, and the update trains ``loss_mode`` against them, correcting nothing, as verl's V1
  trainer does (``loss_mode: bypass_mode`` is the legacy trainer's loss that corrects inside).

verl overwrites ``response_mask`` with the rejection mask; here it is a field of its own, because
the model's forward still needs every response token and a field has one producer in a plan.
Metadata functions are pure (the planner and validator call them); ``correct`` imports verl.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from rlflow.batch import Batch
    from rlflow.schemas.pipeline import Pipeline, RolloutCorrectionSpec

ROLLOUT_LOG_PROBS = "rollout_log_probs"
IS_WEIGHTS = "rollout_is_weights"
RS_MASK = "rollout_rs_mask"


def keeps_rollout_log_probs(pipeline: Pipeline) -> bool:
    """Whether the rollout must return its log-probs: some correction reads them."""
    return pipeline.algorithm.rollout_correction.active


def old_log_probs_field(pipeline: Pipeline) -> str:
    """The field holding the old policy's log-probs: the rollout's own in bypass mode, else the actor's."""
    return ROLLOUT_LOG_PROBS if pipeline.algorithm.rollout_correction.bypass_mode else "old_log_probs"


def decoupled(pipeline: Pipeline) -> bool:
    """Whether the advantage step computes weights or a rejection mask (verl's decoupled mode)."""
    rc = pipeline.algorithm.rollout_correction
    return rc.active and not rc.bypass_mode


def advantage_reads(pipeline: Pipeline) -> tuple[str, ...]:
    return ("old_log_probs", ROLLOUT_LOG_PROBS) if decoupled(pipeline) else ()


def advantage_writes(pipeline: Pipeline) -> tuple[str, ...]:
    """What the decoupled correction adds to the batch: weights for rollout_is, a mask for rollout_rs."""
    if not decoupled(pipeline):
        return ()
    rc = pipeline.algorithm.rollout_correction
    return ((IS_WEIGHTS,) if rc.rollout_is else ()) + ((RS_MASK,) if rc.rollout_rs else ())


def verl_config(spec: RolloutCorrectionSpec):
    """verl's ``RolloutCorrectionConfig`` for the pipeline's section (the same keys)."""
    from verl.trainer.config.algorithm import RolloutCorrectionConfig

    return RolloutCorrectionConfig(**spec.model_dump())


def correct(batch: Batch, spec: RolloutCorrectionSpec) -> tuple[dict[str, Any], dict[str, float]]:
    """verl's decoupled correction of ``batch``: ({rollout_is_weights?, rollout_rs_mask?}, rollout_corr/* metrics).

    The whole step's batch goes through ``compute_rollout_correction_and_add_to_batch`` at once
    (batch normalisation and the metrics are over the step). The off-policy gap metrics among them
    are over the unchanged response mask, the same the step's metrics take again at its end
    (``rlflow.metrics.compute_rollout_metrics``).
    """
    from verl import DataProto
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_add_to_batch

    mask = batch["response_mask"]
    if len(batch) == 0 or not mask.any():  # nothing to weigh (verl refuses a mask without tokens)
        out = {IS_WEIGHTS: mask.float() * 0} if spec.rollout_is is not None else {}
        return out | ({RS_MASK: mask.clone()} if spec.rollout_rs is not None else {}), {}
    data = DataProto.from_dict(tensors={k: batch[k] for k in ("old_log_probs", ROLLOUT_LOG_PROBS, "response_mask")})
    data, corr = compute_rollout_correction_and_add_to_batch(data, verl_config(spec))
    out = {}
    if spec.rollout_is is not None:
        out[IS_WEIGHTS] = data.batch[IS_WEIGHTS]
    if spec.rollout_rs is not None:
        out[RS_MASK] = data.batch["response_mask"]
    return out, corr

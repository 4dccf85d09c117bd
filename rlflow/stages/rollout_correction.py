"""verl's rollout correction (``algorithm.rollout_correction``) as the stages see it: fields and math.

Metadata functions are pure; ``correct`` imports verl. Design notes: docs/design/stages.md.
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

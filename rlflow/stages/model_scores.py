"""How a reward model's score meets the rule rewards: the ``rm_scores`` field between the stages.

A model reward stage (role ``reward_model``) writes ``rm_scores``; with a rule reward stage in the step,
the rule stage reads them and combines (``reward_model.combine``: replace, verl's manner, or add), so the
step has one ``token_level_scores``; without one, the model stage writes the step's scores itself.
Validation runs the rule stages only. Design notes: docs/design/reward_models.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlflow.stages.registry import STAGE_KINDS
from rlflow.stages.token_scores import place_on_last_token

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from rlflow.batch import Batch
    from rlflow.schemas.pipeline import Pipeline

SCORES = ("token_level_scores", "scores")


def _has_role(pipeline: Pipeline, role: str) -> bool:
    return any(s.uses in STAGE_KINDS and STAGE_KINDS.get(s.uses).role == role for s in pipeline.stages)


def model_reward_writes(pipeline: Pipeline) -> tuple[str, ...]:
    """A model reward stage's fields: ``rm_scores``, and the step's scores when no rule reward stage combines them."""
    return ("rm_scores",) if _has_role(pipeline, "reward") else ("rm_scores", *SCORES)


def rule_reward_reads(pipeline: Pipeline, reads: tuple[str, ...]) -> tuple[str, ...]:
    """A rule reward stage's reads, with ``rm_scores`` when a model reward stage scores the same step."""
    return (*reads, "rm_scores") if _has_role(pipeline, "reward_model") else reads


def combined(scores: list[float], batch: Batch, pipeline: Pipeline) -> list[float]:
    """A rule stage's row scores with the model's (``rm_scores``, when the batch has them: never in validation)."""
    if "rm_scores" not in batch:
        return scores
    model = [float(v) for v in batch["rm_scores"].sum(-1).tolist()]
    if pipeline.reward_model.combine == "replace":
        return model
    return [rule + m for rule, m in zip(scores, model, strict=True)]


def model_scores_batch(raw: np.ndarray, batch: Batch, pipeline: Pipeline, metrics: dict[str, float]) -> Batch:
    """The model stage's output from its raw row scores: ``rm_scores`` (x ``reward_model.weight``) on each row's
    last token, the step's scores when it is the only reward, and ``reward_model/score/*`` metrics."""
    import numpy as np

    from rlflow.batch import Batch

    weighted = np.asarray(raw, dtype=np.float32) * np.float32(pipeline.reward_model.weight)
    out = Batch({"rm_scores": place_on_last_token(weighted.tolist(), batch["response_mask"])})
    if "token_level_scores" in model_reward_writes(pipeline):
        out["token_level_scores"] = out["rm_scores"].copy()
        out["scores"] = weighted
    raw = np.asarray(raw, dtype=np.float64)
    if raw.size:
        metrics = {
            **metrics,
            "reward_model/score/mean": float(raw.mean()),
            "reward_model/score/max": float(raw.max()),
            "reward_model/score/min": float(raw.min()),
        }
    out.metrics.update(metrics)
    return out

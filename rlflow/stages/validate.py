"""Stage ``validate``: decode the validation set and score it (verl [testing]).

Runs before training when ``trainer.val_before_train``, when ``trainer.test_freq`` hits and
at the last step. Metrics use verl's names: ``val-core/<data_source>/<metric>/mean@N``.
"""

from __future__ import annotations

from pydantic import Field

from rlflow.stages.base import StageConfig, StageContext, StageKind
from rlflow.stages.registry import register_stage


class ValidateConfig(StageConfig):
    do_sample: bool = False
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    n: int = Field(1, ge=1, description="Samples per validation prompt (mean@n).")


@register_stage
class Validate(StageKind):
    name = "validate"
    config_model = ValidateConfig
    verl_timer = "testing"
    reads_fields = ("rollout_weights",)
    writes_fields = ("val_metrics",)
    allowed_on = frozenset({"local", "remote"})
    dispatch = "driver"
    cadence = "test_freq"
    description = "Greedy (or sampled) decoding of the validation set, scored by the reward."

    def run(self, batch, ctx: StageContext):
        from rlflow.stages.impl.validate import run_validate

        return run_validate(batch, ctx)

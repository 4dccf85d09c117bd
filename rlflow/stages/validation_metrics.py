"""Stage ``validate``: verl's validation metrics for a generated and scored validation set ([testing]).

Statistics and names come from verl's ``process_validation_metrics`` (``val-core/...``, ``val-aux/...``).
Design notes: docs/design/stages.md.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from pydantic import Field

from rlflow.stages.base import StageConfig, StageContext, StageKind
from rlflow.stages.registry import builtin_stage

if TYPE_CHECKING:  # pragma: no cover
    from rlflow.batch import Batch


class ValidateConfig(StageConfig):
    """Sampling for the validation rollout, with the defaults of verl's ``rollout.val_kwargs``: greedy."""

    do_sample: bool = False
    temperature: float = Field(0.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(-1, ge=-1)
    n: int = Field(1, ge=1, description="Samples per validation prompt (mean@n).")


def _variables(batch: Batch) -> dict[str, list[Any]]:
    infos: dict[str, list[Any]] = {"reward": [float(v) for v in batch["scores"].tolist()]}
    extras = [row or {} for row in batch.non_tensors.get("reward_extra") or []]
    keys = sorted({k for row in extras for k, v in row.items() if _is_number(v)})
    for key in keys:
        infos[key] = [float(row[key]) if _is_number(row.get(key)) else None for row in extras]
    if any("pred" in row for row in extras):  # majority voting's answers (maj@k)
        infos["pred"] = [row.get("pred") for row in extras]
    return infos


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float))


def _section(var: str, metric: str, core_var: str, n_max: int) -> str:
    if var == core_var and metric.startswith(("mean", "maj", "best")) and f"@{n_max}" in metric:
        return "val-core"
    return "val-aux"


def val_metrics(batch: Batch, n: int, data_source_key: str = "data_source") -> dict[str, float]:
    """``val-core/<data_source>/<var>/mean@N`` (and verl's auxiliary statistics) for a scored batch.

    ``n`` is the number of samples per prompt; every ``uid`` must appear exactly ``n`` times.
    """
    import numpy as np
    from verl.trainer.ppo.metric_utils import process_validation_metrics

    if len(batch) == 0:
        return {}
    uids = [str(u) for u in batch["uid"]]
    wrong = {u: c for u, c in Counter(uids).items() if c != n}
    if wrong:
        uid, count = next(iter(wrong.items()))
        raise ValueError(
            f"validation batch: uid {uid!r} has {count} samples, expected n={n} ({len(wrong)} uid(s) differ)"
        )
    sources = [str(s) for s in batch.non_tensors.get(data_source_key) or ["unknown"] * len(batch)]
    expected = {(source, uid): n for source, uid in zip(sources, uids)}  # samples per prompt
    state = np.random.get_state()
    try:
        stats = process_validation_metrics(sources, uids, _variables(batch), expected_acc_counts=expected)
    finally:
        np.random.set_state(state)
    out: dict[str, float] = {}
    for source, var2metric in stats.items():
        core_var = "acc" if "acc" in var2metric else "reward"
        for var, metric2val in var2metric.items():
            n_max = max(int(name.split("@")[-1].split("/")[0]) for name in metric2val)
            for metric, value in metric2val.items():
                out[f"{_section(var, metric, core_var, n_max)}/{source}/{var}/{metric}"] = float(value)
    return out


@builtin_stage
class Validate(StageKind):
    name = "validate"
    role = "validation"
    engine_roles = frozenset({"rollout"})
    config_model = ValidateConfig
    verl_timer = "testing"
    reads_fields = ("rollout_weights",)
    writes_fields = ("val_metrics",)
    allowed_on = frozenset({"local", "remote"})
    dispatch = "driver"
    cadence = "test_freq"
    description = "Greedy (or sampled) decoding of the validation set, scored by the reward."

    def run(self, batch: Batch, ctx: StageContext) -> Batch:
        """``batch`` is the scored validation set; the output holds only the validation metrics."""
        from rlflow.batch import Batch

        return Batch(metrics=val_metrics(batch, ctx.config.n))

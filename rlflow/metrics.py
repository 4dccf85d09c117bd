"""Step metrics computed on the driver from the step's batch, with verl's names and formulas.

Mirrors ``verl.trainer.ppo.metric_utils`` (``compute_data_metrics`` without a critic,
``compute_timing_metrics``, ``compute_throughout_metrics``) on rlflow's ``Batch``:
``critic/score|rewards|advantages|returns/{mean,max,min}``,
``response_length/{mean,max,min,clip_ratio}``, ``prompt_length/...``, the non-aborted
response statistics and ``response/aborted_ratio`` (a response of length 0),
``timing_s/*``, ``timing_per_token_ms/*`` and ``perf/{total_num_tokens,time_per_step,throughput}``.

Design decisions:
- Lengths come from ``prompt_mask`` / ``response_mask``; the clip ratios compare them with the
  configured ``max_prompt_length`` / ``max_response_length`` (verl reads the padded widths,
  which equal the limits in verl's batches but not in rlflow's, whose prompt width is the
  step's longest prompt).
- Sections whose fields a pipeline does not produce are left out instead of failing, so a
  pipeline without an advantage stage still logs its lengths.
- Every value is a Python float (or int for token counts), ready for JSON sinks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlflow.batch import Batch

if TYPE_CHECKING:  # pragma: no cover
    import torch

NAN = float("nan")
PER_TOKEN_SECTIONS = ("ref", "values", "adv", "update_critic", "update_actor")


def _stats(prefix: str, values: torch.Tensor) -> dict[str, float]:
    if values.numel() == 0:
        return {f"{prefix}/mean": NAN, f"{prefix}/max": NAN, f"{prefix}/min": NAN}
    values = values.float()
    return {
        f"{prefix}/mean": values.mean().item(),
        f"{prefix}/max": values.max().item(),
        f"{prefix}/min": values.min().item(),
    }


def _lengths(batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    return batch["prompt_mask"].sum(-1).float(), batch["response_mask"].sum(-1).float()


def _length_stats(prefix: str, lengths: torch.Tensor, limit: int) -> dict[str, float]:
    out = _stats(prefix, lengths)
    out[f"{prefix}/clip_ratio"] = (lengths == limit).float().mean().item() if lengths.numel() else NAN
    return out


def compute_data_metrics(batch: Batch, max_response_length: int, max_prompt_length: int) -> dict[str, float]:
    """verl's data metrics (no critic) for the step's batch."""
    if len(batch) == 0 or "response_mask" not in batch:
        return {}
    prompt_length, response_length = _lengths(batch)
    aborted = response_length == 0
    metrics: dict[str, float] = {}
    if "token_level_scores" in batch:
        metrics.update(_stats("critic/score", batch["token_level_scores"].sum(-1)[~aborted]))
    if "token_level_rewards" in batch:
        metrics.update(_stats("critic/rewards", batch["token_level_rewards"].sum(-1)[~aborted]))
    mask = batch["response_mask"].bool()
    for name, field in (("advantages", "advantages"), ("returns", "returns")):
        if field in batch:
            metrics.update(_stats(f"critic/{name}", batch[field][mask]))
    metrics.update(_length_stats("response_length", response_length, max_response_length))
    metrics.update(_length_stats("response_length_non_aborted", response_length[~aborted], max_response_length))
    metrics["response/aborted_ratio"] = aborted.float().mean().item()
    metrics.update(_length_stats("prompt_length", prompt_length, max_prompt_length))
    return metrics


def compute_timing_metrics(timing: dict[str, float], batch: Batch, n_gpus: int = 1) -> dict[str, float]:
    """``timing_s/*``, ``timing_per_token_ms/*`` and, when ``timing`` has ``step``, ``perf/*``.

    ``gen`` is per response token; ``ref``/``adv``/``update_actor`` per prompt+response token;
    throughput is tokens per second per device (``n_gpus`` workers), as verl reports it.
    """
    out: dict[str, Any] = {f"timing_s/{name}": float(value) for name, value in timing.items()}
    if len(batch) == 0 or "response_mask" not in batch or "prompt_mask" not in batch:
        return out
    prompt_length, response_length = _lengths(batch)
    num_response = response_length.sum().item()
    num_overall = prompt_length.sum().item() + num_response
    tokens = {"gen": num_response, **{name: num_overall for name in PER_TOKEN_SECTIONS}}
    for name in sorted(set(tokens) & set(timing)):
        out[f"timing_per_token_ms/{name}"] = timing[name] * 1000 / tokens[name] if tokens[name] > 0 else 0.0
    if "step" in timing:
        out["perf/total_num_tokens"] = int(num_overall)
        out["perf/time_per_step"] = float(timing["step"])
        out["perf/throughput"] = num_overall / (timing["step"] * n_gpus) if timing["step"] > 0 else 0.0
    return out

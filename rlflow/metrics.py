"""Step metrics computed on the driver from the step's batch, by verl's own functions.

``verl_view`` builds the ``DataProto`` verl's V1 trainer hands ``verl.trainer.ppo.metric_utils`` from
rlflow's ``Batch``; the functions here call verl's on it. Which names each gives, and design notes:
docs/design/metrics.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from rlflow.batch import Batch, response_span

if TYPE_CHECKING:  # pragma: no cover
    from verl import DataProto

SEQLEN_PREFIX = "global_seqlen"  # verl's _balance_batch logging_prefix
SINGLE_TURN = 2  # verl's num_turns of a single-turn rollout (SingleTurnAgentLoop)
PER_TOKEN = ("response_mask", "token_level_scores", "token_level_rewards", "advantages", "returns")


def verl_view(batch: Batch, fields: tuple[str, ...] = PER_TOKEN) -> DataProto:
    """The step's batch as verl's V1 trainer gives it to ``metric_utils`` (rows cut to the longest one)."""
    from verl import DataProto

    prompt_length = batch["prompt_mask"].sum(-1)
    response_length = response_span(batch["response_mask"]).sum(-1)  # verl's attention mask: tool answers count
    width, length = int(prompt_length.max()), int(response_length.max())
    prompts = batch["prompts"]
    tensors = {
        "prompts": prompts[:, prompts.shape[-1] - width :],  # left-padded: the last columns hold every prompt
        "responses": batch["responses"][:, :length],
        "prompt_length": prompt_length.float(),
        "response_length": response_length.float(),
        **{name: batch[name][:, :length] for name in fields if name in batch},
    }
    view = DataProto.from_dict(
        tensors=tensors, meta_info={"global_token_num": (prompt_length + response_length).tolist()}
    )
    # per-row counts: verl's compute_data_metrics reports num_turns/* and a multi-turn rollout's tool_call_counts/*
    view.non_tensor_batch["__num_turns__"] = num_turns(batch)
    if "tool_call_counts" in batch:
        view.non_tensor_batch["tool_call_counts"] = batch["tool_call_counts"].cpu().numpy()
    return view


def num_turns(batch: Batch) -> np.ndarray:
    """Each row's verl ``num_turns``: a multi-turn rollout's own, else 2 (a prompt and one answer), as verl's
    ``SingleTurnAgentLoop`` counts every single-turn rollout."""
    if "num_turns" in batch:
        return batch["num_turns"].cpu().numpy()
    return np.full(len(batch), SINGLE_TURN, dtype=np.int32)


def compute_data_metrics(batch: Batch) -> dict[str, Any]:
    """verl's ``compute_data_metrics`` for the step's batch ({} without its fields); with the critic's
    ``critic/values/*`` and ``critic/vf_explained_var`` when the batch has ``values``."""
    from verl.trainer.ppo.metric_utils import compute_data_metrics as verl_data_metrics

    if len(batch) == 0 or any(name not in batch for name in ("prompt_mask", *PER_TOKEN)):
        return {}
    use_critic = "values" in batch
    view = verl_view(batch, PER_TOKEN + ("values",) * use_critic)
    if "rollout_rs_mask" in batch:
        # verl's advantage step writes the rejection mask over response_mask, so its
        # critic/advantages|returns/* are over the kept tokens (the lengths stay the responses')
        view.batch["response_mask"] = batch["rollout_rs_mask"][:, : view.batch["responses"].shape[-1]]
    metrics = verl_data_metrics(view, use_critic=use_critic)
    # verl's V1 trainer logs the step's turns twice: compute_data_metrics' and its own training/num_turns/*
    metrics.update({f"training/{key}": value for key, value in metrics.items() if key.startswith("num_turns/")})
    # num_turns/* come out as numpy integers; the step's metrics are JSON
    return {key: value.item() if hasattr(value, "item") else value for key, value in metrics.items()}


def compute_seqlen_metrics(batch: Batch, dp: int = 1) -> dict[str, Any]:
    """verl's ``log_seqlen_unbalance`` over the ``dp`` contiguous shards the executor hands out ({} when a
    ``balance_batch`` stage already logged them, or the batch has no rows)."""
    from verl.utils.seqlen_balancing import log_seqlen_unbalance

    if any(name.startswith(f"{SEQLEN_PREFIX}/") for name in batch.metrics) or len(batch) == 0:
        return {}
    if "prompt_mask" not in batch or "response_mask" not in batch:
        return {}
    # verl sums its attention mask: a transcript's tool answers count (balance_batch's lengths too)
    seqlens = (batch["prompt_mask"].sum(-1) + response_span(batch["response_mask"]).sum(-1)).tolist()
    rows = len(seqlens)
    shards = [list(range(r * rows // dp, (r + 1) * rows // dp)) for r in range(dp)]
    # verl's sums before balancing take dp chunks of equal size: placeholder rows of no tokens make them so
    padded = seqlens + [0] * (-rows % dp)
    return log_seqlen_unbalance(seqlen_list=padded, partitions=shards, prefix=SEQLEN_PREFIX)


def compute_timing_metrics(timing: dict[str, float], batch: Batch, n_gpus: int = 1) -> dict[str, Any]:
    """``timing_s/*``, ``timing_per_token_ms/*`` and, when ``timing`` has ``step``, ``perf/*`` (verl's).

    ``n_gpus``: the data-parallel workers of the update; verl's throughput is per device.
    """
    from verl.trainer.ppo.metric_utils import compute_throughout_metrics
    from verl.trainer.ppo.metric_utils import compute_timing_metrics as verl_timing_metrics

    if len(batch) == 0 or "response_mask" not in batch or "prompt_mask" not in batch:
        return {f"timing_s/{name}": value for name, value in timing.items()}
    view = verl_view(batch, ())
    out = verl_timing_metrics(view, timing)
    if "step" in timing:
        out.update(compute_throughout_metrics(view, timing, n_gpus=n_gpus))
    return out


def compute_rollout_metrics(batch: Batch) -> dict[str, Any]:
    """verl's rollout-vs-actor metrics, when the rollout kept ``rollout_log_probs``.

    ``training/rollout_probs_diff_*`` compare the probabilities of the sampled tokens under the
    rollout and under the actor's ``old_log_probs``; ``rollout_corr/*`` are the off-policy gap
    (KL, perplexities, chi-squared) between them.
    """
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_rejection_mask
    from verl.utils.debug.metrics import calculate_debug_metrics

    needed = ("rollout_log_probs", "old_log_probs", "response_mask")
    if len(batch) == 0 or any(name not in batch for name in needed) or not batch["response_mask"].any():
        return {}
    view = verl_view(batch, needed)
    metrics = calculate_debug_metrics(view)
    _, _, corr = compute_rollout_correction_and_rejection_mask(
        old_log_prob=view.batch["old_log_probs"],
        rollout_log_prob=view.batch["rollout_log_probs"],
        response_mask=view.batch["response_mask"],
    )
    return {**metrics, **corr}


Versions = Sequence[int | tuple[int, int]]


def off_policy_metrics(step: int, versions: Versions, evicted_spans: Sequence[int] = ()) -> dict[str, float]:
    """verl's ``training/off_policy/*`` for the trajectories step ``step`` trains on ({} for none).

    ``versions``: per trajectory, the policy version it was sampled with (the number of actor
    updates its weights had seen), or (first, last) versions for one sampled across weight updates
    (rlflow's rollout never changes weights mid-trajectory). As verl's V1 trainer:
    ``trajectory_spans`` = last - first + 1 (versions one trajectory was generated with);
    ``trajectory_staleness`` = (step - 1) - last (updates the freshest weights it used are behind
    those step ``step`` trains: 0 for a synchronous step); ``trajectory_staleness_worst`` =
    (step - 1) - first. Means are floats, maxima and minima integers, as verl's numpy gives them.

    ``evicted_spans``: per prompt group dropped as too stale before this step, its span (step -
    version: verl's ``global_steps - prompt_global_steps + 1``, its prompt tagged with the step it
    was sent in, version + 1). verl's replay buffer counts the groups as ``evicted_samples`` and,
    despite the name, reports their spans as ``evicted_samples_staleness/*``.
    """
    metrics: dict[str, float] = {}
    if versions:
        pairs = [(v, v) if isinstance(v, int) else (int(v[0]), int(v[1])) for v in versions]
        families = {
            "trajectory_spans": [last - first + 1 for first, last in pairs],
            "trajectory_staleness": [(step - 1) - last for _, last in pairs],
            "trajectory_staleness_worst": [(step - 1) - first for first, _ in pairs],
        }
        metrics.update(
            (f"training/off_policy/{name}/{stat}", value)
            for name, values in families.items()
            for stat, value in _mean_max_min(values)
        )
    if evicted_spans:
        metrics["training/off_policy/evicted_samples"] = len(evicted_spans)
        spans = [float(s) for s in evicted_spans]
        metrics.update((f"training/off_policy/evicted_samples_staleness/{stat}", v) for stat, v in _mean_max_min(spans))
    return metrics


def _mean_max_min(values: list) -> tuple[tuple[str, float], ...]:
    return ("mean", sum(values) / len(values)), ("max", max(values)), ("min", min(values))

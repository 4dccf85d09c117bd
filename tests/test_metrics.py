"""Driver-side step metrics: verl's names, and values EQUAL to verl's metric_utils on the same tensors."""

from __future__ import annotations

import math

import pytest
import torch

from rlflow.batch import Batch
from rlflow.metrics import compute_data_metrics, compute_timing_metrics

P, R = 6, 5


def step_batch(seed: int = 0) -> Batch:
    gen = torch.Generator().manual_seed(seed)
    rows = 8
    prompt_lengths = torch.tensor([6, 3, 6, 2, 4, 6, 1, 5])
    response_lengths = torch.tensor([5, 0, 2, 5, 1, 3, 5, 4])  # one aborted (empty) response, some clipped
    prompt_mask = (torch.arange(P)[None] >= P - prompt_lengths[:, None]).long()  # left-padded
    response_mask = (torch.arange(R)[None] < response_lengths[:, None]).long()
    scores = torch.randint(0, 2, (rows,), generator=gen).float()
    token_scores = torch.zeros(rows, R)
    token_scores[torch.arange(rows), (response_lengths - 1).clamp(min=0)] = scores
    advantages = torch.randn(rows, 1, generator=gen) * response_mask
    return Batch(
        {
            "prompts": torch.randint(2, 50, (rows, P), generator=gen),
            "prompt_mask": prompt_mask,
            "responses": torch.randint(2, 50, (rows, R), generator=gen),
            "response_mask": response_mask,
            "token_level_scores": token_scores,
            "token_level_rewards": token_scores - 0.01 * response_mask,
            "advantages": advantages,
            "returns": advantages,
        }
    )


def as_data_proto(batch: Batch):
    from verl import DataProto

    tensors = {
        k: batch[k]
        for k in (
            "prompts",
            "responses",
            "response_mask",
            "token_level_scores",
            "token_level_rewards",
            "advantages",
            "returns",
        )
    }
    tensors["attention_mask"] = torch.cat([batch["prompt_mask"], batch["response_mask"]], dim=1)
    return DataProto.from_dict(tensors=tensors)


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-6, abs=1e-9)


def test_data_metrics_equal_verls():
    from verl.trainer.ppo.metric_utils import compute_data_metrics as verl_data_metrics

    batch = step_batch()
    ours = compute_data_metrics(batch, max_response_length=R, max_prompt_length=P)
    theirs = verl_data_metrics(as_data_proto(batch), use_critic=False)
    assert set(ours) == set(theirs)
    for name, value in theirs.items():
        assert same(ours[name], float(value)), name
    assert ours["response/aborted_ratio"] == 1 / 8
    assert ours["response_length/clip_ratio"] == 3 / 8 and ours["prompt_length/clip_ratio"] == 3 / 8


def test_clip_ratios_use_the_configured_limits_not_the_padded_widths():
    metrics = compute_data_metrics(step_batch(), max_response_length=64, max_prompt_length=512)
    assert metrics["response_length/clip_ratio"] == 0.0 and metrics["prompt_length/clip_ratio"] == 0.0


def test_missing_sections_are_left_out():
    batch = step_batch().select(("prompts", "prompt_mask", "responses", "response_mask"))
    metrics = compute_data_metrics(batch, R, P)
    assert "response_length/mean" in metrics and not any(k.startswith("critic/") for k in metrics)
    assert compute_data_metrics(Batch(), R, P) == {}


def test_timing_metrics_equal_verls():
    from verl.trainer.ppo.metric_utils import compute_throughout_metrics
    from verl.trainer.ppo.metric_utils import compute_timing_metrics as verl_timing

    batch = step_batch()
    timing = {"gen": 1.5, "old_log_prob": 0.2, "ref": 0.3, "adv": 0.01, "update_actor": 2.0, "step": 4.5}
    data = as_data_proto(batch)
    data.meta_info["global_token_num"] = data.batch["attention_mask"].sum(-1).tolist()
    expected = {**verl_timing(data, timing), **compute_throughout_metrics(data, timing, n_gpus=2)}
    ours = compute_timing_metrics(timing, batch, n_gpus=2)
    assert set(ours) == set(expected)
    for name, value in expected.items():
        assert same(float(ours[name]), float(value)), name


def test_timing_without_a_step_has_no_perf_metrics():
    out = compute_timing_metrics({"gen": 1.0}, step_batch())
    assert "timing_per_token_ms/gen" in out and not any(k.startswith("perf/") for k in out)

"""Validation metrics: verl's ``val-core/<data_source>/<var>/mean@N`` names and values."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlflow.batch import Batch
from rlflow.stages.base import StageContext
from rlflow.stages.validation_metrics import Validate, val_metrics


def scored(scores: list[float], uids: list[str], sources: list[str], extra: list[dict] | None = None) -> Batch:
    non_tensors = {"uid": uids, "data_source": sources}
    if extra is not None:
        non_tensors["reward_extra"] = extra
    return Batch({"scores": torch.tensor(scores)}, non_tensors)


def test_mean_at_n_per_data_source_for_reward_and_extras():
    batch = scored(
        [1.0, 0.0, 1.0, 1.0, 0.0, 0.0],
        ["a", "a", "b", "b", "c", "c"],
        ["bird", "bird", "bird", "bird", "spider", "spider"],
        [
            {"acc": 1.0, "format_ok": 1.0},
            {"acc": 0.0, "format_ok": 1.0},
            {"acc": 1.0, "format_ok": 0.0},
            {"acc": 1.0, "format_ok": 1.0},
            {"acc": 0.0, "format_ok": 0.0},
            {"acc": 0.0, "format_ok": 1.0},
        ],
    )
    metrics = val_metrics(batch, n=2)
    # verl's rule: acc is the core variable when the reward returns it; the rest is auxiliary
    assert metrics["val-core/bird/acc/mean@2"] == pytest.approx(0.75)
    assert metrics["val-aux/bird/reward/mean@2"] == pytest.approx(0.75)
    assert metrics["val-aux/bird/format_ok/mean@2"] == pytest.approx(0.75)
    assert metrics["val-core/spider/acc/mean@2"] == 0.0
    assert metrics["val-aux/bird/reward/std@2"] == pytest.approx(0.25)  # prompt a: 0.5, prompt b: 0
    assert all(k.startswith(("val-core/", "val-aux/")) for k in metrics)


def test_validation_leaves_numpys_global_rng_alone():
    np.random.seed(5)
    expected = np.random.rand(3)
    np.random.seed(5)
    val_metrics(scored([1.0, 0.0, 1.0, 1.0], ["a", "a", "b", "b"], ["bird"] * 4), n=2)  # bootstraps
    assert (np.random.rand(3) == expected).all()


def test_single_sample_greedy_validation():
    metrics = val_metrics(scored([1.0, 0.0, 1.0], ["a", "b", "c"], ["bird"] * 3), n=1)
    assert metrics == {"val-core/bird/reward/mean@1": pytest.approx(2 / 3)}


def test_group_sizes_must_match_n():
    with pytest.raises(ValueError, match="uid 'a' has 1 samples, expected n=2"):
        val_metrics(scored([1.0, 0.0, 1.0], ["a", "b", "b"], ["bird"] * 3), n=2)


def test_the_stage_turns_a_scored_validation_batch_into_its_metrics():
    batch = scored([1.0, 0.0, 1.0, 1.0], ["a", "a", "b", "b"], ["bird"] * 4)
    ctx = StageContext(pipeline=None, config=Validate.parse_config({"n": 2}), stage_name="validate")
    out = Validate().run(batch, ctx)
    assert out.metrics == val_metrics(batch, n=2)
    assert out.metrics["val-core/bird/reward/mean@2"] == pytest.approx(0.75)


def test_a_row_without_an_extra_number_is_missing_there_and_a_missing_acc_counts_zero():
    batch = scored(
        [1.0, 0.0, 1.0],
        ["a", "b", "c"],
        ["bird"] * 3,
        [{"acc": 1.0, "format_ok": 1.0}, {"answer": "x"}, {"acc": 0.0, "format_ok": 0.0}],
    )
    metrics = val_metrics(batch, n=1)
    # verl's V1 validation: acc is padded with 0 up to the expected samples per prompt, and
    # acc_success_only averages the rows that have one; any other variable skips the row
    assert metrics["val-core/bird/acc/mean@1"] == pytest.approx(1 / 3)
    assert metrics["val-aux/bird/acc_success_only/mean@1"] == pytest.approx(0.5)
    assert metrics["val-aux/bird/format_ok/mean@1"] == pytest.approx(0.5)
    assert metrics["val-aux/bird/reward/mean@1"] == pytest.approx(2 / 3)


def test_majority_voting_when_the_reward_returns_a_prediction():
    extra = [{"acc": a, "pred": p} for a, p in [(1.0, "4"), (1.0, "4"), (0.0, "5"), (0.0, "7")]]
    metrics = val_metrics(scored([1.0, 1.0, 0.0, 0.0], ["a"] * 4, ["math"] * 4, extra), n=4)
    # bootstrapped votes over 4 of the 4 answers: "4" (right) wins most of them
    assert 0.5 < metrics["val-core/math/acc/maj@4/mean"] < 1.0
    assert "val-core/math/acc/mean@4" in metrics and not any("/pred/" in k for k in metrics)

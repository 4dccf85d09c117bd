"""The shipped GRPO-family recipes train: ranking_dr_grpo.yaml for two steps over the in-process executor.

(ranking_dapo.yaml trains, and resumes, in test_dynamic_sampling.py.) Each recipe states only what
differs from ranking_grpo.yaml; the merged pipeline must carry those differences into the step.
"""

from __future__ import annotations

import pytest
import torch
from runtime_helpers import REPO, train_in_process

from rlflow.check import load_pipeline
from rlflow.plan.compile import compile_plan

SETS = [
    "trainer.train_batch_size=4",
    "trainer.ppo_mini_batch_size=2",
    "trainer.ppo_micro_batch_size_per_gpu=8",
    "algorithm.n=4",
    "trainer.total_steps=2",
    "trainer.save_freq=-1",
    "trainer.test_freq=-1",
    "trainer.val_before_train=false",
]


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # the runs here are bit-compared


def test_the_recipes_state_only_what_differs():
    grpo = load_pipeline(REPO / "pipelines" / "ranking_grpo.yaml", check_paths=False).spec
    for name, differs in {
        "ranking_dr_grpo.yaml": {"norm_adv_by_std_in_grpo", "loss_agg_mode", "use_kl_loss"},
        "ranking_dapo.yaml": {"clip_ratio_high", "clip_ratio_c", "use_kl_loss", "filter_groups"},
        "ranking_gspo.yaml": {"loss_mode", "clip_ratio_low", "clip_ratio_high", "loss_agg_mode"},
        "ranking_rloo.yaml": {"adv_estimator"},
    }.items():
        spec = load_pipeline(REPO / "pipelines" / name, check_paths=False).spec
        changed = {
            k for k in type(grpo.algorithm).model_fields if getattr(spec.algorithm, k) != getattr(grpo.algorithm, k)
        }
        assert changed == differs, name
        assert spec.trainer == grpo.trainer and spec.data == grpo.data, name


def test_dr_grpo_trains_two_steps(tmp_path):
    assert (
        "ref_log_prob"
        not in compile_plan(load_pipeline(REPO / "pipelines" / "ranking_dr_grpo.yaml", SETS).spec).stage_names()
    )  # no KL term, no reference
    metrics = train_in_process(REPO / "pipelines" / "ranking_dr_grpo.yaml", SETS, tmp_path / "run")
    assert [m["step"] for m in metrics] == [1, 2]
    assert all(torch.isfinite(torch.tensor(m["actor/pg_loss"])) for m in metrics)
    assert "actor/kl_loss" not in metrics[0]

"""verl's rollout correction in the stages: the fields each stage reads and writes under
``algorithm.rollout_correction``, and the advantage stage's weights, rejection mask, metrics and
advantages EQUAL to verl's own functions on the same random batches."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from stage_helpers import make_pipeline

from rlflow.batch import Batch
from rlflow.check import load_pipeline
from rlflow.plan.compile import compile_plan
from rlflow.stages import rollout_correction
from rlflow.stages.base import StageContext
from rlflow.stages.grpo_advantage import GrpoAdvantage

REPO = Path(__file__).resolve().parents[2]
RC = "algorithm.rollout_correction"
CORRECTIONS = [  # (rollout_correction section) as verl's presets and variants set it
    {"rollout_is": "token", "rollout_is_threshold": 2.0},
    {"rollout_is": "sequence", "rollout_is_threshold": 1.5, "rollout_is_batch_normalize": True},
    {"rollout_is": "token", "rollout_is_threshold": "0.8_1.25"},  # IcePop: weights outside are zeroed
    {"rollout_rs": "token_k1", "rollout_rs_threshold": "0.8_1.25"},
    {"rollout_is": "sequence", "rollout_rs": "seq_mean_k3,seq_max_k2", "rollout_rs_threshold": "0.01,0.05"},
    {"rollout_is": "token", "rollout_is_batch_normalize": True, "rollout_rs": "seq_sum_k1", "rollout_rs_threshold": 3},
]


def off_policy_batch(seed: int = 0) -> Batch:
    """Scored rows whose rollout log-probs differ from the actor's by noise of a few tenths."""
    gen = torch.Generator().manual_seed(seed)
    rows, width = 12, 7
    lengths = torch.tensor([7, 3, 1, 6, 4, 0, 2, 5, 7, 7, 2, 6])  # one empty response
    mask = (torch.arange(width)[None] < lengths[:, None]).long()
    scores = torch.randint(0, 2, (rows,), generator=gen).float()
    token_scores = torch.zeros(rows, width)
    token_scores[torch.arange(rows), (lengths - 1).clamp(min=0)] = scores
    old = -torch.rand(rows, width, generator=gen) * 2 * mask
    rollout = (old + 0.3 * torch.randn(rows, width, generator=gen)).clamp(max=0) * mask
    uids = [u for u in "aaabbbcccddd"]
    return Batch(
        {
            "token_level_scores": token_scores,
            "response_mask": mask,
            "old_log_probs": old,
            "rollout_log_probs": rollout,
            "scores": scores,
        },
        {"uid": uids},
    )


def run_advantage(batch: Batch, correction: dict) -> Batch:
    pipeline = make_pipeline(algorithm={"rollout_correction": correction})
    ctx = StageContext(pipeline=pipeline, config=GrpoAdvantage.parse_config({}), stage_name="advantage", step=1)
    return GrpoAdvantage().run(batch, ctx)


@pytest.mark.parametrize("correction", CORRECTIONS)
def test_advantage_stage_corrects_as_verls_trainer(correction):
    from verl import DataProto
    from verl.trainer.config.algorithm import RolloutCorrectionConfig
    from verl.trainer.ppo import core_algos
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_add_to_batch

    batch = off_policy_batch()
    out = run_advantage(batch, correction)

    data = DataProto.from_dict(
        tensors={k: batch[k].clone() for k in ("old_log_probs", "rollout_log_probs", "response_mask")}
    )
    data, metrics = compute_rollout_correction_and_add_to_batch(
        data, RolloutCorrectionConfig(**{"rollout_is": None, **correction})
    )
    advantages, _ = core_algos.compute_grpo_outcome_advantage(
        batch["token_level_scores"], data.batch["response_mask"], np.array(batch["uid"], dtype=object)
    )
    assert torch.equal(out["advantages"], advantages)
    assert out.metrics == metrics and metrics["rollout_corr/kl"] != 0
    if correction.get("rollout_is"):
        assert torch.equal(out["rollout_is_weights"], data.batch["rollout_is_weights"])
    else:
        assert "rollout_is_weights" not in out
    if correction.get("rollout_rs"):
        assert torch.equal(out["rollout_rs_mask"], data.batch["response_mask"])
        assert out["rollout_rs_mask"].sum() < batch["response_mask"].sum(), "the thresholds reject something"
    else:
        assert "rollout_rs_mask" not in out
    assert torch.equal(batch["response_mask"], data.batch["response_mask"]) == (not correction.get("rollout_rs"))


def test_without_correction_the_advantage_stage_is_unchanged():
    from verl.trainer.ppo import core_algos

    batch = off_policy_batch()
    for section in ({}, {"bypass_mode": True}):  # bypass mode corrects nothing here, as verl V1 skips it
        out = run_advantage(batch, section)
        advantages, _ = core_algos.compute_grpo_outcome_advantage(
            batch["token_level_scores"], batch["response_mask"], np.array(batch["uid"], dtype=object)
        )
        assert torch.equal(out["advantages"], advantages)
        assert set(out.keys()) == {"token_level_rewards", "advantages", "returns"} and out.metrics == {}


def test_a_batch_without_response_tokens_gets_neutral_fields():
    batch = off_policy_batch().index([5])  # the empty response
    out = run_advantage(batch, CORRECTIONS[4])
    assert out["rollout_is_weights"].shape == (1, 7) and not out["rollout_is_weights"].any()
    assert torch.equal(out["rollout_rs_mask"], batch["response_mask"])


def steps(*sets: str) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    """Each step stage's (reads, writes) in the shipped ranking pipeline's plan under ``--set`` overrides."""
    loaded = load_pipeline(REPO / "pipelines" / "ranking_grpo.yaml", list(sets))
    return {s.name: (s.reads, s.writes) for s in compile_plan(loaded.spec).step}


def test_the_plan_shows_where_the_old_policy_comes_from():
    default = steps()
    assert "rollout_log_probs" not in default["generate"][1] and "old_log_prob" in default

    rc = RC
    decoupled = steps(f"{rc}.rollout_is=sequence", f"{rc}.rollout_rs=seq_mean_k3", f"{rc}.rollout_rs_threshold=0.01")
    assert "rollout_log_probs" in decoupled["generate"][1]
    assert {"old_log_probs", "rollout_log_probs"} <= set(decoupled["advantage"][0])
    assert {"rollout_is_weights", "rollout_rs_mask"} <= set(decoupled["advantage"][1])
    assert {"old_log_probs", "rollout_is_weights", "rollout_rs_mask"} <= set(decoupled["update_actor"][0])

    bypass = steps(f"{rc}.bypass_mode=true", "algorithm.use_kl_in_reward=true")
    assert "old_log_prob" not in bypass, "bypass mode drops the old_log_prob pass, as verl skips its forward"
    assert "rollout_log_probs" in bypass["update_actor"][0] and "old_log_probs" not in bypass["update_actor"][0]
    assert "rollout_log_probs" in bypass["advantage"][0]  # the in-reward KL takes the old policy from the rollout


def test_kl_in_reward_under_bypass_reads_the_rollouts_log_probs():
    from verl.trainer.ppo import core_algos

    batch = off_policy_batch()
    batch["ref_log_prob"] = batch["rollout_log_probs"] - 0.1
    pipeline = make_pipeline(
        algorithm={"rollout_correction": {"bypass_mode": True}, "use_kl_in_reward": True}, with_ref=True
    )
    ctx = StageContext(pipeline=pipeline, config=GrpoAdvantage.parse_config({}), stage_name="advantage", step=1)
    out = GrpoAdvantage().run(batch.select(GrpoAdvantage.reads(pipeline, None)), ctx)
    kld = core_algos.kl_penalty(batch["rollout_log_probs"], batch["ref_log_prob"], "kl") * batch["response_mask"]
    assert torch.allclose(out["token_level_rewards"], batch["token_level_scores"] - 0.001 * kld)


def test_only_a_correction_needs_the_rollouts_log_probs():
    assert not rollout_correction.keeps_rollout_log_probs(make_pipeline())
    for section in (
        {"bypass_mode": True},
        {"rollout_is": "token"},
        {"rollout_rs": "token_k2", "rollout_rs_threshold": 1},
    ):
        assert rollout_correction.keeps_rollout_log_probs(make_pipeline(algorithm={"rollout_correction": section}))


@pytest.mark.parametrize(
    "sets, timers",
    [
        (  # verl's legacy bypass loss: the rejection is applied inside the update
            [
                f"{RC}.bypass_mode=true",
                "algorithm.loss_mode=bypass_mode",
                f"{RC}.rollout_rs=seq_mean_k3",
                f"{RC}.rollout_rs_threshold=0.01",
            ],
            False,
        ),
        ([f"{RC}.rollout_is=token", f"{RC}.rollout_rs=token_k1", f"{RC}.rollout_rs_threshold=0.999_1.001"], True),
    ],
)
def test_two_steps_in_process_train_under_the_correction(tmp_path, sets, timers):
    """The real stages, engine and step loop: the rollout's log-probs reach the update, and verl's metrics come out."""
    import json

    from rlflow.runtime.inprocess import InProcessExecutor
    from rlflow.runtime.run_dir import RunDir
    from rlflow.runtime.step_loop import StepLoop, load_data

    small = [
        "trainer.train_batch_size=2",
        "algorithm.n=2",
        "trainer.ppo_mini_batch_size=1",
        "trainer.ppo_micro_batch_size_per_gpu=2",
        "data.max_response_length=8",
    ]
    once = ["trainer.total_steps=2", "trainer.save_freq=-1", "trainer.test_freq=-1", "trainer.val_before_train=false"]
    loaded = load_pipeline(REPO / "pipelines" / "ranking_grpo.yaml", [*small, *once, *sets])
    plan = compile_plan(loaded.spec)
    run_dir = RunDir(tmp_path / "run")
    executor = InProcessExecutor(plan, loaded.spec, str(REPO), run_dir.append_trace, str(run_dir.path))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        loop = StepLoop(loaded.spec, plan, executor, run_dir, load_data(loaded.spec, REPO), loaded.resolved_yaml(), [])
        loop.train(loop.init(None))
    finally:
        executor.close()
        torch.set_num_threads(threads)
    last = json.loads((run_dir.path / "metrics.jsonl").read_text().splitlines()[-1])
    assert ("timing_s/old_log_prob" in last) == timers, "bypass mode runs no old_log_prob pass"
    assert last["rollout_corr/rollout_rs_masked_fraction"] >= 0 and "rollout_corr/kl" in last
    assert ("rollout_corr/rollout_is_mean" in last) == timers and all(
        v == v for k, v in last.items() if k.startswith(("actor/", "rollout_corr/"))
    ), "no NaN"

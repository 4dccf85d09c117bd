"""Step metrics: verl's functions on verl's view of the batch, and a run's names against verl's source.

The unit tests pin what the view changes (the clip ratios count rows as long as the step's
longest one, as verl's V1 trainer pads) and that everything else equals verl's functions on the
full-width batch. The last test trains two steps of the shipped ranking pipeline in-process
and compares the names it logs with the names read from the installed verl's source
(``verl_metric_names``): every verl name must be there, except the named differences below.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from verl_metric_names import verl_step_metric_names

from rlflow.batch import Batch
from rlflow.metrics import (
    compute_data_metrics,
    compute_rollout_metrics,
    compute_seqlen_metrics,
    compute_timing_metrics,
)

REPO = Path(__file__).resolve().parents[1]
P, R = 8, 7  # padded widths, wider than the longest prompt (6) and response (5) below

# verl names rlflow does not log, each with its reason (docs/metrics.md says the same)
DIFFERENCES = {
    "critic/values/": "a critic's value estimates; GRPO has no critic",
    "critic/vf_explained_var": "a critic's explained variance; GRPO has no critic",
    "timing_s/values": "the critic's forward; GRPO has no critic",
    "timing_s/update_critic": "the critic's update; GRPO has no critic",
    "timing_per_token_ms/values": "the critic's forward; GRPO has no critic",
    "timing_per_token_ms/update_critic": "the critic's update; GRPO has no critic",
    "tool_call_counts/": "logged after a multi-turn rollout only (verl 0.9.1's agent loop never fills the field)",
    "timing_s/dump_rollout_generations": "verl's trainer.rollout_data_dir dump; rlflow has no such option",
}
# names only rlflow logs (docs/metrics.md describes each)
RLFLOW_ONLY = (
    "reward/",
    "rollout/empty_response_ratio",
    "rollout/policy_version",
    "sync/bytes",
    "sync/seconds",
    "val-aux/policy_version",
)
# verl's validation names depend on the data sources and the reward's variables (tests/stages/test_validation_metrics.py)
VALIDATION = ("val-core/", "val-aux/")


def step_batch(seed: int = 0) -> Batch:
    gen = torch.Generator().manual_seed(seed)
    rows = 8
    prompt_lengths = torch.tensor([6, 3, 6, 2, 4, 6, 1, 5])
    response_lengths = torch.tensor([5, 0, 2, 5, 1, 3, 5, 4])  # one aborted (empty) response
    prompt_mask = (torch.arange(P)[None] >= P - prompt_lengths[:, None]).long()  # left-padded
    response_mask = (torch.arange(R)[None] < response_lengths[:, None]).long()
    scores = torch.randint(0, 2, (rows,), generator=gen).float()
    token_scores = torch.zeros(rows, R)
    token_scores[torch.arange(rows), (response_lengths - 1).clamp(min=0)] = scores
    advantages = torch.randn(rows, 1, generator=gen) * response_mask
    old = -torch.rand(rows, R, generator=gen) * 3 * response_mask
    return Batch(
        {
            "prompts": torch.randint(2, 50, (rows, P), generator=gen) * prompt_mask,
            "prompt_mask": prompt_mask,
            "responses": torch.randint(2, 50, (rows, R), generator=gen) * response_mask,
            "response_mask": response_mask,
            "token_level_scores": token_scores,
            "token_level_rewards": token_scores - 0.01 * response_mask,
            "advantages": advantages,
            "returns": advantages,
            "old_log_probs": old,
            "rollout_log_probs": (old + 0.05 * torch.randn(rows, R, generator=gen)) * response_mask,
        }
    )


def full_width_proto(batch: Batch):
    """The batch at its padded widths, as verl's V0 trainer held it."""
    from verl import DataProto

    names = ("prompts", "responses", "response_mask", "token_level_scores", "token_level_rewards", "advantages")
    tensors = {k: batch[k] for k in (*names, "returns", "old_log_probs", "rollout_log_probs")}
    tensors["attention_mask"] = torch.cat([batch["prompt_mask"], batch["response_mask"]], dim=1)
    return DataProto.from_dict(tensors=tensors)


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-6, abs=1e-9)


def single_turn_proto(batch: Batch):
    """``full_width_proto`` with the turns verl's ``SingleTurnAgentLoop`` gives every row (``num_turns=2``)."""
    import numpy as np

    data = full_width_proto(batch)
    data.non_tensor_batch["__num_turns__"] = np.full(len(batch), 2, dtype=np.int32)
    return data


def with_v1_turns(metrics: dict) -> dict:
    """verl's V1 trainer's step metrics add its ``training/num_turns/*``: the same turns again."""
    return {**metrics, **{f"training/{k}": v for k, v in metrics.items() if k.startswith("num_turns/")}}


def test_data_metrics_are_verls_with_clip_ratios_against_the_longest_row():
    from verl.trainer.ppo.metric_utils import compute_data_metrics as verl_data_metrics

    batch = step_batch()
    ours = compute_data_metrics(batch)
    theirs = with_v1_turns(verl_data_metrics(single_turn_proto(batch), use_critic=False))
    assert set(ours) == set(theirs)
    for name, value in theirs.items():
        if not name.endswith("clip_ratio"):
            assert same(ours[name], float(value)), name
    # verl's V1 pads to the step's longest row: 3 of 8 responses have 5 tokens, 3 prompts have 6
    assert ours["response_length/clip_ratio"] == 3 / 8 and ours["prompt_length/clip_ratio"] == 3 / 8
    assert ours["response_length_non_aborted/clip_ratio"] == pytest.approx(3 / 7)
    assert theirs["response_length/clip_ratio"] == 0.0  # at the padded width no row would count
    assert ours["response/aborted_ratio"] == 1 / 8


def test_multi_turn_data_metrics_are_verls():
    """A transcript's mask has 0 on tool answers: lengths count them (verl's attention mask), num_turns/* too."""
    from verl.trainer.ppo.metric_utils import compute_data_metrics as verl_data_metrics
    from verl.utils.seqlen_balancing import log_seqlen_unbalance

    batch = step_batch()
    holes = batch["response_mask"].clone()
    holes[0, 1:3] = 0  # row 0: a model token, two tool tokens, two model tokens
    holes[3, 2] = 0
    batch["response_mask"] = holes
    batch["num_turns"] = torch.tensor([4, 2, 2, 4, 2, 2, 2, 2])
    batch["tool_call_counts"] = torch.tensor([1, 0, 0, 1, 0, 0, 0, 0])
    data = full_width_proto(batch)
    data.batch["attention_mask"][:, P:] = step_batch()["response_mask"]
    data.non_tensor_batch["__num_turns__"] = batch["num_turns"].numpy()
    data.non_tensor_batch["tool_call_counts"] = batch["tool_call_counts"].numpy()
    ours, theirs = compute_data_metrics(batch), with_v1_turns(verl_data_metrics(data, use_critic=False))
    assert set(ours) == set(theirs) and ours["num_turns/mean"] == 2.5 and ours["tool_call_counts/max"] == 1
    assert ours["training/num_turns/min"] == 2 and ours["training/num_turns/max"] == 4
    for name, value in theirs.items():
        if not name.endswith("clip_ratio"):
            assert same(ours[name], float(value)), name
    assert ours["response_length/max"] == 5  # the tool tokens count: verl's attention mask, not the loss mask
    seqlens = data.batch["attention_mask"].sum(-1).tolist()
    assert compute_seqlen_metrics(batch) == log_seqlen_unbalance(seqlens, [list(range(8))], "global_seqlen")


def test_a_single_turn_step_logs_verls_two_turns_every_step():
    """verl's SingleTurnAgentLoop gives every row num_turns=2; its V1 trainer logs num_turns/* and
    training/num_turns/* from them each step."""
    from verl.trainer.ppo.metric_utils import compute_data_metrics as verl_data_metrics

    batch = step_batch()
    assert "num_turns" not in batch
    ours = compute_data_metrics(batch)
    theirs = with_v1_turns(verl_data_metrics(single_turn_proto(batch), use_critic=False))
    names = [f"{p}num_turns/{s}" for p in ("", "training/") for s in ("mean", "max", "min")]
    assert {name: ours[name] for name in names} == {name: theirs[name] for name in names} == dict.fromkeys(names, 2)


def test_advantages_and_returns_are_over_the_tokens_the_rejection_kept():
    """verl's V1 advantage step writes ``rollout_rs``'s mask over ``response_mask`` before its step metrics."""
    import numpy as np
    from verl.trainer.config.algorithm import RolloutCorrectionConfig
    from verl.trainer.ppo import core_algos
    from verl.trainer.ppo.metric_utils import compute_data_metrics as verl_data_metrics
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_add_to_batch

    batch = step_batch()
    data = full_width_proto(batch)
    data, _ = compute_rollout_correction_and_add_to_batch(
        data, RolloutCorrectionConfig(rollout_is=None, rollout_rs="seq_mean_k1", rollout_rs_threshold="0.99_1.01")
    )
    kept = data.batch["response_mask"]
    assert 0 < kept.sum() < batch["response_mask"].sum(), "the threshold rejects some rows, not all"
    uids = np.array(list("aabbccdd"), dtype=object)
    advantages, returns = core_algos.compute_grpo_outcome_advantage(batch["token_level_rewards"], kept, uids)
    data.batch["advantages"], data.batch["returns"] = advantages, returns
    batch["advantages"], batch["returns"], batch["rollout_rs_mask"] = advantages, returns, kept.clone()

    ours, theirs = compute_data_metrics(batch), verl_data_metrics(data, use_critic=False)
    for family in ("critic/advantages/", "critic/returns/"):
        for stat in ("mean", "max", "min"):
            assert same(ours[family + stat], float(theirs[family + stat])), family + stat
    assert ours["response_length/mean"] == float(batch["response_mask"].sum(-1).float().mean())  # every token
    plain = batch.select([k for k in batch.keys() if k != "rollout_rs_mask"])
    assert compute_data_metrics(plain)["critic/advantages/mean"] != pytest.approx(ours["critic/advantages/mean"])


def test_data_metrics_need_the_reward_and_advantage_fields():
    batch = step_batch().select(("prompts", "prompt_mask", "responses", "response_mask", "token_level_scores"))
    assert compute_data_metrics(batch) == {}
    assert compute_data_metrics(Batch()) == {}


def test_timing_metrics_equal_verls():
    from verl.trainer.ppo.metric_utils import compute_throughout_metrics
    from verl.trainer.ppo.metric_utils import compute_timing_metrics as verl_timing

    batch = step_batch()
    timing = {"gen": 1.5, "old_log_prob": 0.2, "ref": 0.3, "adv": 0.01, "update_actor": 2.0, "step": 4.5}
    data = full_width_proto(batch)
    data.meta_info["global_token_num"] = data.batch["attention_mask"].sum(-1).tolist()
    expected = {**verl_timing(data, timing), **compute_throughout_metrics(data, timing, n_gpus=2)}
    ours = compute_timing_metrics(timing, batch, n_gpus=2)
    assert set(ours) == set(expected)
    for name, value in expected.items():
        assert same(float(ours[name]), float(value)), name


def test_timing_without_a_step_has_no_perf_metrics():
    out = compute_timing_metrics({"gen": 1.0}, step_batch())
    assert "timing_per_token_ms/gen" in out and not any(k.startswith("perf/") for k in out)
    assert compute_timing_metrics({"gen": 1.0}, Batch()) == {"timing_s/gen": 1.0}


def test_rollout_metrics_equal_verls():
    from verl.trainer.ppo.rollout_corr_helper import compute_offpolicy_metrics
    from verl.utils.debug.metrics import calculate_debug_metrics

    batch = step_batch()
    data = full_width_proto(batch)
    expected = calculate_debug_metrics(data)
    mask = data.batch["response_mask"]
    offpolicy = compute_offpolicy_metrics(data.batch["old_log_probs"], data.batch["rollout_log_probs"], mask)
    expected.update({f"rollout_corr/{k}": v for k, v in offpolicy.items()})
    ours = compute_rollout_metrics(batch)
    assert set(ours) == set(expected) and len(ours) == 18
    for name, value in expected.items():
        assert same(float(ours[name]), float(value)), name
    assert ours["training/rollout_probs_diff_max"] > 0 and ours["training/rollout_probs_diff_valid"] == 1


def test_rollout_metrics_need_the_rollouts_log_probs():
    batch = step_batch()
    assert compute_rollout_metrics(batch.select([k for k in batch.keys() if k != "rollout_log_probs"])) == {}
    batch["rollout_log_probs"] = batch["old_log_probs"].clone()  # the same policy on both sides
    same_policy = compute_rollout_metrics(batch)
    assert same_policy["training/rollout_probs_diff_max"] == 0 and same_policy["rollout_corr/kl"] == 0
    assert same_policy["training/rollout_actor_probs_pearson_corr"] == pytest.approx(1.0)


def test_seqlen_metrics_are_verls_over_the_executors_shards():
    from verl.utils.seqlen_balancing import log_seqlen_unbalance

    batch = step_batch()
    tokens = (batch["prompt_mask"].sum(-1) + batch["response_mask"].sum(-1)).tolist()
    one = compute_seqlen_metrics(batch)
    assert one == log_seqlen_unbalance(tokens, [list(range(8))], "global_seqlen")
    assert one["global_seqlen/min"] == one["global_seqlen/balanced_max"] == sum(tokens)  # one worker: every token
    three = compute_seqlen_metrics(batch, 3)  # shards of 2, 3 and 3 rows, as the executor cuts 8 rows
    sums = [sum(tokens[0:2]), sum(tokens[2:5]), sum(tokens[5:8])]
    assert (three["global_seqlen/balanced_min"], three["global_seqlen/balanced_max"]) == (min(sums), max(sums))
    batch.metrics["global_seqlen/min"] = 1.0  # a balance_batch stage ran and logged them
    assert compute_seqlen_metrics(batch) == {} and compute_seqlen_metrics(Batch()) == {}


@pytest.fixture
def two_steps(tmp_path) -> list[dict]:
    """Two steps of the shipped ranking pipeline (GRPO with the KL loss) in-process, small sizes."""
    from rlflow.check import load_pipeline
    from rlflow.plan.compile import compile_plan
    from rlflow.runtime.inprocess import InProcessExecutor
    from rlflow.runtime.run_dir import RunDir
    from rlflow.runtime.step_loop import StepLoop, load_data

    sets = [
        "trainer.train_batch_size=2",
        "algorithm.n=2",
        "trainer.ppo_mini_batch_size=1",
        "trainer.ppo_micro_batch_size_per_gpu=2",
        "data.max_response_length=8",
        "data.max_val_samples=2",
        "trainer.total_steps=2",
        "trainer.save_freq=2",
        "trainer.test_freq=2",
        "algorithm.entropy_coeff=0.001",  # verl logs actor/entropy_loss only when the update computes entropy
    ]
    loaded = load_pipeline(REPO / "pipelines" / "ranking_grpo.yaml", sets)
    spec, plan = loaded.spec, compile_plan(loaded.spec)
    run_dir = RunDir(tmp_path / "run")
    executor = InProcessExecutor(plan, spec, str(REPO), run_dir.append_trace, str(run_dir.path))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        loop = StepLoop(spec, plan, executor, run_dir, load_data(spec, REPO), loaded.resolved_yaml(), [])
        loop.train(loop.init(None))
    finally:
        executor.close()
        torch.set_num_threads(threads)
    return [json.loads(line) for line in (run_dir.path / "metrics.jsonl").read_text().splitlines()]


def test_a_run_logs_every_verl_metric_name_but_the_named_differences(two_steps):
    verl = verl_step_metric_names()
    stale = [d for d in DIFFERENCES if not any(name.startswith(d) for name in verl)]
    assert not stale, f"these differences no longer match any name in verl's source: {stale}"
    expected = {name for name in verl if not name.startswith(tuple(DIFFERENCES))}
    last = two_steps[-1]  # the last step saves a checkpoint and validates: every timer ran
    logged = set(last) - {"step"}
    assert sorted(expected - logged) == []
    assert not logged & (verl - expected), "a name listed as a difference is logged after all"
    extra = logged - verl
    assert sorted(k for k in extra if not k.startswith(RLFLOW_ONLY + VALIDATION)) == []
    assert any(k.startswith("val-core/") for k in extra)
    assert len(expected) == 98 and len(verl) == 110  # counts quoted in docs/metrics.md
    assert last["num_turns/mean"] == last["training/num_turns/max"] == 2  # single-turn, as verl counts it
    assert last["training/rollout_probs_diff_max"] < 1e-3  # the torch rollout samples from the actor itself
    assert 0 < last["perf/mfu/actor"] and last["response_length/clip_ratio"] > 0

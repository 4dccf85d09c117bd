"""``rlflow run`` with two data-parallel CPU workers: the batch is balanced on the driver, as verl balances it.

Real parts only: the CLI in a subprocess, Ray, two actor worker processes that update together.
"""

from __future__ import annotations

from runtime_helpers import REPO, read_jsonl, rlflow, small_sets

GLOBAL_SEQLEN = ("min", "max", "minmax_diff", "balanced_min", "balanced_max", "mean")


def test_two_workers_train_on_a_balanced_batch(tmp_path):
    run_dir = tmp_path / "run"
    result = rlflow(
        "run",
        str(REPO / "pipelines" / "bird_grpo.yaml"),
        "--run-dir",
        str(run_dir),
        *small_sets(
            "trainer.total_steps=1",
            "trainer.save_freq=-1",
            "trainer.test_freq=-1",
            "trainer.val_before_train=false",
            "resources.actor_pool.device=cpu",
            "resources.actor_pool.gpus_per_node=2",
            "resources.actor_pool.cpus_per_worker=1",
            "resources.reward_pool.workers=1",
        ),
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (metrics,) = read_jsonl(run_dir / "metrics.jsonl")
    seqlen = {name: metrics[f"global_seqlen/{name}"] for name in GLOBAL_SEQLEN}
    assert seqlen["balanced_max"] - seqlen["balanced_min"] <= seqlen["minmax_diff"]
    assert seqlen["balanced_min"] <= seqlen["mean"] <= seqlen["balanced_max"]
    # 4 prompts x 4 samples: each worker's tokens are what the metrics say it got
    assert 2 * seqlen["mean"] == metrics["prompt_length/mean"] * 16 + metrics["response_length/mean"] * 16
    trace = [r for r in read_jsonl(run_dir / "trace.jsonl") if r["step"] == 1]
    stages = list(dict.fromkeys(r["stage"] for r in trace))
    assert stages.index("reward") < stages.index("balance_batch") < stages.index("old_log_prob")
    assert {r["resource"] for r in trace if r["stage"] == "balance_batch"} == {"driver"}
    assert len({r["pid"] for r in trace if r["stage"] == "update_actor"}) == 2, "both ranks updated"

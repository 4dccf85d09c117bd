"""Generate on the reference remote backend, the actor on a local pool (pipelines/bird_grpo_remote_async.yaml).

Real Ray, the real CLI and the out-of-process server: after each update the actor's weights cross
the wire to the server with their policy version (``load_rollout_weights``), so the server's rollout
reports the version it used and ``sync/bytes`` counts the weights (the backend does not own both sides).
In ``separate_async`` (the shipped mode) the server samples the next step while the local actor trains.
"""

from __future__ import annotations

from runtime_helpers import REPO, read_jsonl, rlflow, small_sets

PIPELINE = str(REPO / "pipelines" / "bird_grpo_remote_async.yaml")
TINY = (
    "trainer.train_batch_size=2",
    "trainer.ppo_mini_batch_size=2",
    "trainer.ppo_micro_batch_size_per_gpu=2",
    "algorithm.n=2",
    "data.max_response_length=16",
    "trainer.val_before_train=false",
    "trainer.test_freq=-1",
    "trainer.save_freq=-1",
    "trainer.total_steps=2",
    "resources.arctic.config.device=cpu",
)


def test_sync_mode_pushes_the_actor_weights_to_the_remote_rollout_with_their_version(tmp_path):
    run_dir = tmp_path / "run"
    done = rlflow("run", PIPELINE, "--run-dir", str(run_dir), *small_sets(*TINY, "trainer.trainer_mode=sync"))
    assert done.returncode == 0, done.stdout + done.stderr
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2]
    assert [m["rollout/policy_version"] for m in metrics] == [0.0, 1.0]  # step N samples with version N - 1
    assert all(m["sync/bytes"] > 1e6 for m in metrics)  # the tiny model's weights crossed the wire, every step
    trace = read_jsonl(run_dir / "trace.jsonl")
    where = {(r["stage"], r["resource"]) for r in trace if r["step"] == 2}
    assert {("generate", "arctic"), ("update_actor", "actor_pool"), ("sync_weights", "arctic")} <= where
    pushes = [r for r in trace if r["stage"] == "sync_weights" and r["resource"] == "arctic"]
    assert [r["step"] for r in pushes] == [0, 1, 2]  # the init sync, then after each update


def test_separate_async_overlaps_the_remote_rollout_with_the_local_update(tmp_path):
    run_dir = tmp_path / "run"
    done = rlflow("run", PIPELINE, "--run-dir", str(run_dir), *small_sets(*TINY, "trainer.total_steps=3"))
    assert done.returncode == 0, done.stdout + done.stderr
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2, 3]
    # one batch ahead: step 2's batch is sampled during step 1, by version 0; the backend reports the
    # version of the weights it used, which the weights pushed after step 1 carried
    assert [m["rollout/policy_version"] for m in metrics] == [0.0, 0.0, 1.0]
    assert all(m["training/off_policy/trajectory_staleness/max"] + 1 <= 2 for m in metrics)  # threshold 2
    trace = read_jsonl(run_dir / "trace.jsonl")
    pushes = [r for r in trace if r["stage"] == "sync_weights" and r["resource"] == "arctic"]
    assert sorted(r["step"] for r in pushes) == [0, 1, 2, 3]  # the init sync, then after each update
    assert metrics[-1]["sync/bytes"] > 1e6  # a push's metrics join the batch it preceded: the weights crossed
    span = {(r["step"], r["stage"], r["resource"]): (r["start"], r["end"]) for r in trace}
    for step in (1, 2):  # the backend samples step + 1 while the local actor works on step
        generate = span[(step + 1, "generate", "arctic")]
        actor = span[(step, "old_log_prob", "actor_pool")][0], span[(step, "update_actor", "actor_pool")][1]
        assert generate[0] < actor[1] and actor[0] < generate[1], (step, generate, actor)


def test_ppo_with_a_remote_rollout_trains_the_local_critic_beside_the_local_actor(tmp_path):
    """verl's PPO step with generate on the remote backend: the critic (colocated with the local actor) computes
    values and learns the returns; the actor's weights still cross the wire after each update."""
    (tmp_path / "ppo.yaml").write_text(
        f"base: {PIPELINE}\n"
        "name: bird-ppo-remote\n"
        "algorithm: {adv_estimator: gae}\n"
        "trainer: {trainer_mode: sync}\n"
        "stages:\n"
        "  - {name: generate,      uses: generate,        on: arctic, with: {temperature: 1.0}}\n"
        "  - {name: reward,        uses: text2sql_reward, on: driver}\n"
        "  - {name: old_log_prob,  uses: old_log_prob,    on: actor_pool}\n"
        "  - {name: ref_log_prob,  uses: ref_log_prob,    on: actor_pool}\n"
        "  - {name: values,        uses: compute_values,  on: actor_pool}\n"
        "  - {name: advantage,     uses: grpo_advantage,  on: driver}\n"
        "  - {name: update_critic, uses: update_critic,   on: actor_pool}\n"
        "  - {name: update_actor,  uses: update_actor,    on: actor_pool}\n"
        "  - {name: sync_weights,  uses: sync_weights,    on: actor_pool}\n"
    )
    run_dir = tmp_path / "run"
    done = rlflow("run", str(tmp_path / "ppo.yaml"), "--run-dir", str(run_dir), *small_sets(*TINY), cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert [m["rollout/policy_version"] for m in metrics] == [0.0, 1.0]
    assert all(m["sync/bytes"] > 1e6 and "critic/vf_loss" in m and "critic/values/mean" in m for m in metrics)
    where = {(r["stage"], r["resource"]) for r in read_jsonl(run_dir / "trace.jsonl") if r["step"] == 2}
    assert {("generate", "arctic"), ("values", "actor_pool"), ("update_critic", "actor_pool")} <= where

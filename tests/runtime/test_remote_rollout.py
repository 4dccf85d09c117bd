"""Generate on the reference remote backend, the actor on a local pool (pipelines/bird_grpo_remote_async.yaml).

Real Ray, the real CLI and the out-of-process server: after each update the actor's weights cross
the wire to the server with their policy version (``load_rollout_weights``), so the server's rollout
reports the version it used and ``sync/bytes`` counts the weights (the backend does not own both sides).
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

"""The same pipeline on a multi-node Ray cluster (simulated with ray.cluster_utils.Cluster).

A local pool with ``nnodes: 2`` gets one bundle per node, its two workers form a
data-parallel group across the nodes, and rlflow joins the cluster named in rlflow.yaml.
"""

from __future__ import annotations

import json

import pytest
from runtime_helpers import REPO, read_jsonl, rlflow, small_sets

from rlflow.assets import BIRD_SAMPLE


@pytest.fixture
def two_node_cluster():
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    cluster.add_node(num_cpus=2)
    cluster.wait_for_nodes()
    yield cluster
    cluster.shutdown()


def test_two_node_pool_gets_one_bundle_per_node_and_trains(two_node_cluster, tmp_path):
    (tmp_path / "rlflow.yaml").write_text(
        f"vars: {{model_path: 'builtin:tiny-qwen2', bird_root: '{BIRD_SAMPLE}'}}\n"
        f"ray: {{address: '{two_node_cluster.address}'}}\n"
    )
    run_dir = tmp_path / "run"
    result = rlflow(
        "run",
        str(REPO / "pipelines" / "bird_grpo.yaml"),
        "--run-dir",
        str(run_dir),
        *small_sets(
            "trainer.total_steps=1",
            "trainer.val_before_train=false",
            "trainer.test_freq=-1",
            "resources.actor_pool.nnodes=2",
            "resources.actor_pool.cpus_per_worker=1",
            "resources.reward_pool.workers=1",
        ),
        cwd=tmp_path,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    workers = json.loads((run_dir / "workers.json").read_text())
    actor = workers["actor_pool"]["workers"]
    assert [w["rank"] for w in actor] == [0, 1]
    assert len({w["node_id"] for w in actor}) == 2, "each node holds one worker of the pool"
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1] and "actor/pg_loss" in metrics[0]
    update_pids = {r["pid"] for r in read_jsonl(run_dir / "trace.jsonl") if r["stage"] == "update_actor"}
    assert update_pids == {w["pid"] for w in actor}, "both data-parallel ranks took part in the update"

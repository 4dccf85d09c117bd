"""The same pipeline on a multi-node Ray cluster (simulated with ray.cluster_utils.Cluster).

A local pool with ``nnodes: 2`` gets one bundle per node, its two workers form a
data-parallel group across the nodes, and rlflow joins the cluster named in rlflow.yaml.
"""

from __future__ import annotations

import json
import time

import pytest
from runtime_helpers import REPO, cluster_project, kill_tree, read_jsonl, rlflow, small_sets, start_rlflow

from rlflow.assets import BIRD_SAMPLE


@pytest.fixture
def two_node_cluster():
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    cluster.add_node(num_cpus=2)
    cluster.wait_for_nodes()
    yield cluster
    cluster.shutdown()


@pytest.fixture
def three_one_cpu_nodes():
    """Three 1-CPU nodes: the head (where the driver joins) offers `trainer_slot`, the other two are labelled
    role=reward; yields the cluster and those two."""
    from ray.cluster_utils import Cluster

    head = {"num_cpus": 1, "resources": {"trainer_slot": 1}, "include_dashboard": False}
    cluster = Cluster(initialize_head=True, head_node_args=head)
    reward_nodes = [cluster.add_node(num_cpus=1, labels={"role": "reward"}) for _ in range(2)]
    cluster.wait_for_nodes()
    yield cluster, reward_nodes
    cluster.shutdown()


def joining(folder, address: str, **ray_settings) -> None:
    """An rlflow.yaml in ``folder`` that joins the cluster at ``address``."""
    settings = ", ".join(f"{key}: {value}" for key, value in {"address": f"'{address}'", **ray_settings}.items())
    (folder / "rlflow.yaml").write_text(
        f"vars: {{model_path: 'builtin:tiny-qwen2', bird_root: '{BIRD_SAMPLE}'}}\nray: {{{settings}}}\n"
    )


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


def test_a_dead_data_parallel_peer_restarts_the_run_and_is_named(two_node_cluster, tmp_path):
    """Rank 1 dies while rank 0 waits in an all-reduce with it: rank 0's gloo error is a consequence; the run
    restarts (``max_restarts``) and the message names worker 1 as the one that died."""
    marker = tmp_path / "died.marker"
    stage = f"{{name: crash, uses: test_die_in_collective, on: actor_pool, with: {{marker: '{marker}'}}}}"
    cluster_project(tmp_path, two_node_cluster.address, stage)
    run_dir = tmp_path / "run"
    result = rlflow(
        "run",
        "crash.yaml",
        "--run-dir",
        str(run_dir),
        *small_sets(
            "trainer.total_steps=2",
            "trainer.save_freq=1",
            "trainer.max_restarts=1",
            "trainer.val_before_train=false",
            "trainer.test_freq=-1",
            "resources.actor_pool.nnodes=2",
            "resources.actor_pool.cpus_per_worker=1",
            "resources.reward_pool.workers=1",
        ),
        cwd=tmp_path,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert marker.exists(), "rank 1 died once"
    assert "worker 1 " in result.stderr and "died" in result.stderr, result.stderr[-3000:]
    assert "worker worker" not in result.stderr
    assert [m["step"] for m in read_jsonl(run_dir / "metrics.jsonl")] == [1, 2]


def test_a_cpu_pool_wider_than_every_node_is_refused_at_once_naming_it(three_one_cpu_nodes, tmp_path):
    """1.5 CPUs per reward worker on 1-CPU nodes (3 CPUs in all, 2.5 wanted): the worker waited 10 minutes."""
    cluster, _ = three_one_cpu_nodes
    joining(tmp_path, cluster.address)
    start = time.monotonic()
    result = rlflow(
        "run",
        str(REPO / "pipelines" / "bird_grpo.yaml"),
        "--run-dir",
        str(tmp_path / "run"),
        *small_sets("trainer.total_steps=1", "resources.reward_pool.cpus_per_worker=1.5"),
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 1, result.stderr[-3000:]
    assert "pool reward_pool wants 1.5 CPUs for each of its 1 worker(s); 0 node(s) have that many" in result.stderr
    assert "Traceback" not in result.stderr and time.monotonic() - start < 120


def test_pinned_pools_land_on_their_nodes_and_a_lost_node_refuses_the_restart(three_one_cpu_nodes, tmp_path):
    """The actor pinned by a custom resource, the reward pool by a label; a reward node is lost mid-run: the
    restart is checked again, and refused at once naming the pool and what is missing, not left to wait."""
    cluster, reward_nodes = three_one_cpu_nodes
    joining(tmp_path, cluster.address)
    run_dir = tmp_path / "run"
    sets = small_sets(
        "trainer.total_steps=50",
        "trainer.save_freq=1",
        "trainer.max_restarts=1",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "resources.actor_pool.resources={trainer_slot: 1}",
        "resources.reward_pool.workers=2",
        "resources.reward_pool.label_selector={role: reward}",
    )
    proc = start_rlflow(
        "run", str(REPO / "pipelines" / "bird_grpo.yaml"), "--run-dir", str(run_dir), *sets, cwd=tmp_path
    )
    try:
        deadline = time.monotonic() + 600
        while proc.poll() is None and time.monotonic() < deadline:
            if (run_dir / "metrics.jsonl").exists() and (run_dir / "metrics.jsonl").read_text().strip():
                break
            time.sleep(1)
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        workers = json.loads((run_dir / "workers.json").read_text())
        assert [w["node_id"] for w in workers["actor_pool"]["workers"]] == [cluster.head_node.node_id]
        assert {w["node_id"] for w in workers["reward_pool"]["workers"]} == {n.node_id for n in reward_nodes}
        lost = time.monotonic()
        cluster.remove_node(reward_nodes[1])
        _, stderr = proc.communicate(timeout=300)
    finally:
        kill_tree(proc)
    assert proc.returncode == 1, stderr[-3000:]
    assert "restart 1 of 1: the cluster cannot hold this pipeline: " in stderr, stderr[-3000:]
    assert "pool reward_pool wants 1 CPUs for each of its 2 worker(s) on nodes labelled role=reward; only 1" in stderr
    assert "Traceback" not in stderr and time.monotonic() - lost < 120


def test_room_another_job_holds_is_waited_for_saying_so_then_refused(two_node_cluster, tmp_path):
    """Every CPU is held by another driver's placement group: the run says what it waits for and gives up after
    ray.placement_timeout_s, naming the shortfall."""
    import ray
    from ray.util.placement_group import placement_group

    ray.init(address=two_node_cluster.address, log_to_driver=False)
    try:
        held = placement_group([{"CPU": 2}, {"CPU": 2}], strategy="STRICT_SPREAD")
        ray.get(held.ready(), timeout=60)
        joining(tmp_path, two_node_cluster.address, placement_timeout_s=5)
        start = time.monotonic()
        result = rlflow(
            "run",
            str(REPO / "pipelines" / "bird_grpo.yaml"),
            "--run-dir",
            str(tmp_path / "run"),
            *small_sets("trainer.total_steps=1"),
            cwd=tmp_path,
            timeout=300,
        )
    finally:
        ray.shutdown()
    assert result.returncode == 1, result.stderr[-3000:]
    assert "waiting for room on the cluster" in result.stderr and "pool actor_pool wants 1 CPUs" in result.stderr
    assert "error: the cluster has room for this pipeline, but not free: " in result.stderr, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and time.monotonic() - start < 120

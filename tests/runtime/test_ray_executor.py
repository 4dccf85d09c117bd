"""What the Ray executor says when a worker dies, on a real three-node cluster (ray.cluster_utils.Cluster).

A node's raylet is killed under a reward worker: the run says, in one line, which worker of which
resource died, on which Ray node (not the host name all of a host's nodes share), and that the node
died with Ray's reason; Ray's own raylet-death dump is not printed; the header names the cluster
``address: auto`` joined; the restart recovers every step once.
"""

from __future__ import annotations

import pytest
from runtime_helpers import cluster_project, read_jsonl, rlflow, small_sets

from rlflow.runtime.ray_executor import why_died


@pytest.fixture
def three_nodes():
    """A head that holds no worker (no CPUs: the driver's node stays up) and two 1-CPU nodes for the pools."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    for _ in range(2):
        cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    yield cluster
    cluster.shutdown()


def test_a_lost_node_is_named_once_as_the_nodes_death_and_the_run_recovers(three_nodes, tmp_path):
    marker = tmp_path / "killed.marker"
    cluster_project(
        tmp_path, "auto", f"{{name: crash, uses: test_kill_raylet, on: reward_pool, with: {{marker: '{marker}'}}}}"
    )
    run_dir = tmp_path / "run"
    result = rlflow(
        "run",
        "crash.yaml",
        "--run-dir",
        str(run_dir),
        *small_sets(
            "trainer.total_steps=2",
            "trainer.max_restarts=1",
            "trainer.val_before_train=false",
            "trainer.test_freq=-1",
            # half a CPU each: after the restart both pools fit on the node that is left
            "resources.actor_pool.cpus_per_worker=0.5",
            "resources.reward_pool.cpus_per_worker=0.5",
        ),
        cwd=tmp_path,
        timeout=600,
        env={"RAY_ADDRESS": three_nodes.address},  # what `auto` finds
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    node = marker.read_text()
    said = [line for line in out.splitlines() if "of resource 'reward_pool' died" in line]
    assert len(said) == 1, out[-3000:]
    assert "stage 'crash': worker 0 (pid " in said[0] and f"on Ray node {node[:8]} at " in said[0], said[0]
    assert "died: its Ray node died (health check failed" in said[0] and "restart 1 of 1 from the start" in said[0]
    assert "worker worker" not in out
    assert "Raylet is terminated" not in out and "Last 20 lines" not in out and "(raylet)" not in out
    assert "start Ray: " in out and f"joined auto: {three_nodes.address}, 3 nodes" in out, out[:2000]
    assert "check nodes: " in out and "3 nodes see the" in out
    assert [m["step"] for m in read_jsonl(run_dir / "metrics.jsonl")] == [1, 2]


def test_the_cause_of_a_death_is_read_from_ray_s_words_after_its_fields():
    from ray.exceptions import RayActorError

    process = RayActorError(
        error_msg="The actor died unexpectedly before finishing this task.\n\tclass_name: StageWorker\n\tpid: 42\n"
        "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: "
        "Worker unexpectedly exits with a connection error code 2. End of file. Some common causes include: (1) ..."
    )
    assert why_died(process, None) == (
        "its process died (SYSTEM_ERROR: Worker unexpectedly exits with a connection error code 2.)"
    )
    other = RayActorError(
        error_msg="The actor died unexpectedly before finishing this task.\n\tpid: 42\nIt was killed."
    )
    assert why_died(other, None) == "It was killed."
    node = RayActorError(
        error_msg="The actor died unexpectedly before finishing this task.\n\tip: 10.0.0.7\n"
        "The actor died because its node has died. Node Id: 3a98\n"
        "\tthe actor's node was terminated unexpectedly: health check failed due to missing too many heartbeats"
    )
    assert why_died(node, None) == "its Ray node died (health check failed due to missing too many heartbeats)"

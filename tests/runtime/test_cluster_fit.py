"""The fit check names every shortfall before anything starts."""

import pytest

from rlflow.errors import ResourceError
from rlflow.runtime.cluster import machine_cores, oversubscription
from rlflow.runtime.fit import ClusterNode, Demand, check_fit


def node(name: str, cpus: float, gpus: float = 0, **extra) -> ClusterNode:
    """A node with nothing reserved on it."""
    total = {"CPU": cpus, "GPU": gpus}
    return ClusterNode(name, total, dict(total), **extra)


NODES = [node("node0", 16, 4), node("node1", 16, 4)]


def test_fits():
    check_fit([Demand("actor_pool", 4, 1, 1), Demand("reward_pool", 2, 1, 0)], NODES)
    check_fit([Demand("actor_pool", 8, 1, 1, nnodes=2)], NODES)


def test_gpu_shortfall_names_pool_and_node():
    with pytest.raises(ResourceError, match="pool actor_pool wants 8 GPUs on each of 1 node.*node0 with 4"):
        check_fit([Demand("actor_pool", 8, 1, 1)], NODES)


def test_total_gpu_shortfall():
    with pytest.raises(ResourceError, match="want 12 GPUs in all; the cluster has 8"):
        check_fit([Demand("a", 4, 1, 1), Demand("b", 4, 1, 1), Demand("c", 4, 1, 1)], NODES)


def test_cpu_shortfall():
    with pytest.raises(ResourceError, match="want 40 CPUs in all; the cluster has 32"):
        check_fit([Demand("reward_pool", 40, 1, 0)], NODES)


def test_gpu_pool_on_cpu_cluster():
    with pytest.raises(ResourceError, match="actor_pool wants 1 GPUs"):
        check_fit([Demand("actor_pool", 1, 1, 1)], [node("laptop", 2)])


def test_oversubscription_names_each_pool_and_the_fix():
    warning = oversubscription([Demand("actor_pool", 1, 2, 0), Demand("reward_pool", 2, 1, 0)], cores=2)
    assert "reserve 4 CPUs (actor_pool 2, reward_pool 2)" in warning and "has 2 cores" in warning
    assert "so they sum to 2 or less" in warning


def test_reservations_within_the_cores_are_not_warned_about():
    assert oversubscription([Demand("actor_pool", 1, 1, 0), Demand("reward_pool", 2, 0.5, 0)], cores=2) is None
    assert machine_cores() >= 1

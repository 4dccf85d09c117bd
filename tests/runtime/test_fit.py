"""The cluster fit check node by node: what each node has in all and free now, pinned pools, and the bounded wait
for room that is held."""

from __future__ import annotations

import logging
import time

import pytest

from rlflow.errors import ResourceError
from rlflow.runtime import fit
from rlflow.runtime.fit import ClusterNode, Demand, await_fit, check_fit, fit_problems


def node(name: str, cpus: float, free: float | None = None, gpus: float = 0, **extra) -> ClusterNode:
    total = {"CPU": cpus, "GPU": gpus}
    return ClusterNode(name, total, {**total, "CPU": cpus if free is None else free}, **extra)


ONE_CPU_NODES = [node("n0", 1), node("n1", 1), node("n2", 1)]


def test_a_cpu_pool_wider_than_every_node_is_refused_though_the_cpus_add_up():
    """The issue's example: 1.5 CPUs per worker on 1-CPU nodes (3 CPUs in all, 2.5 wanted) waited 10 minutes."""
    pools = [Demand("actor_pool", 1, 1, 0), Demand("reward_pool", 1, 1.5, 0, per_worker=True)]
    with pytest.raises(ResourceError) as err:
        check_fit(pools, ONE_CPU_NODES)
    assert str(err.value).startswith(
        "the cluster cannot hold this pipeline: pool reward_pool wants 1.5 CPUs for each of its 1 worker(s); "
        "0 node(s) have that many (largest: n"
    ), err.value
    assert "in all" not in str(err.value), "the totals fit; the nodes do not"


def test_a_local_pool_keeps_a_node_s_workers_on_that_node_and_cpu_workers_go_where_each_fits():
    assert fit_problems([Demand("reward_pool", 3, 1, 0, per_worker=True)], ONE_CPU_NODES) == []
    assert fit_problems([Demand("actor_pool", 3, 1, 0, nnodes=3)], ONE_CPU_NODES) == []
    (problem,) = fit_problems([Demand("actor_pool", 2, 1, 0)], ONE_CPU_NODES)
    assert problem.startswith("pool actor_pool wants 2 CPUs on each of 1 node(s); 0 node(s) have that many")


def test_what_other_jobs_hold_is_not_free():
    """Totals were compared only: a node whose CPUs another job holds was counted as room."""
    nodes = [node("busy", 4, free=1), node("idle", 4, free=2.5)]
    pools = [Demand("actor_pool", 1, 3, 0)]
    check_fit(pools, nodes)  # the nodes could hold it
    assert fit_problems(pools, nodes, free=True) == [
        "pool actor_pool wants 3 CPUs on each of 1 node(s); 0 node(s) have that many (largest: idle with 2.5 free of 4)"
    ]


def test_a_pinned_pool_counts_only_the_nodes_it_selects():
    nodes = [node("head", 4), node("r0", 1, labels={"role": "reward"})]
    pools = [Demand("reward_pool", 2, 1, 0, per_worker=True, label_selector={"role": "reward"})]
    with pytest.raises(
        ResourceError,
        match=r"wants 1 CPUs for each of its 2 worker\(s\) on nodes labelled role=reward; only 1 worker\(s\) fit",
    ):
        check_fit(pools, nodes)
    with pytest.raises(ResourceError, match="loosen their resources: or label_selector:"):
        check_fit([Demand("judge", 1, 1, 0, label_selector={"role": "judge"})], nodes)
    slot = [ClusterNode("head", {"CPU": 4, "trainer_slot": 1}, {"CPU": 4, "trainer_slot": 1}), node("r0", 4)]
    assert fit_problems([Demand("actor_pool", 1, 1, 0, resources={"trainer_slot": 1})], slot) == []
    (problem,) = fit_problems([Demand("actor_pool", 2, 1, 0, nnodes=2, resources={"trainer_slot": 1})], slot)
    assert problem.startswith("pool actor_pool wants 1 of resource 'trainer_slot' on each of 2 node(s)")


@pytest.fixture
def quick(monkeypatch):
    monkeypatch.setattr(fit, "POLL_S", 0.05)
    monkeypatch.setattr(fit, "NOTICE_AFTER_S", 0.1)


def test_a_wait_for_held_room_says_what_it_waits_for_and_ends_when_the_room_is_freed(quick, caplog):
    """A restart's pools are released a moment after they stop (and a node may join late): waited for, said."""
    views = iter([[node("n0", 2, free=0)]] * 5)
    read = lambda: next(views, [node("n0", 2)])  # noqa: E731
    with caplog.at_level(logging.WARNING, logger="rlflow.runtime"):
        nodes = await_fit([Demand("actor_pool", 1, 2, 0)], 30, "restart 1 of 1: ", read)
    assert nodes == [node("n0", 2)]
    assert "restart 1 of 1: waiting for room on the cluster" in caplog.text
    assert "pool actor_pool wants 2 CPUs on each of 1 node(s)" in caplog.text


def test_room_that_stays_held_is_refused_after_the_bound_naming_the_shortfall(quick):
    start = time.monotonic()
    with pytest.raises(ResourceError) as err:
        await_fit([Demand("actor_pool", 1, 2, 0)], 0.3, read=lambda: [node("n0", 2, free=1)])
    assert time.monotonic() - start < 5
    assert str(err.value).startswith("the cluster has room for this pipeline, but not free: the pools want 2 CPUs")
    assert "ray.placement_timeout_s" in str(err.value)


def test_a_restart_the_nodes_can_no_longer_hold_is_refused_at_once():
    """A lost node: the fit is checked again before the restart, and nothing is waited for."""
    start = time.monotonic()
    with pytest.raises(
        ResourceError, match=r"^restart 1 of 1: the cluster cannot hold this pipeline: the pools want 3"
    ):
        await_fit(
            [Demand("a", 1, 1, 0), Demand("b", 2, 1, 0, per_worker=True)],
            60,
            "restart 1 of 1: ",
            lambda: ONE_CPU_NODES[:2],
        )
    assert time.monotonic() - start < 1


@pytest.fixture
def local_ray():
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_free_room_is_read_per_node_as_verl_reads_it(local_ray):
    """What verl's ResourcePoolManager reads (``available_resources_per_node``) is what each node has free here;
    a GPU pool on this CPU machine is refused by verl's own check and by this one."""
    from ray.util.placement_group import placement_group
    from verl.single_controller.ray.base import ResourcePoolManager

    held = placement_group([{"CPU": 2}])
    local_ray.get(held.ready(), timeout=30)
    try:
        (here,) = fit.cluster_nodes()
        assert here.total["CPU"] == 2 and here.free.get("CPU", 0.0) == 0, "Ray leaves out what is all held"
        verl_free = local_ray._private.state.available_resources_per_node()
        assert [free.get("CPU", 0.0) for free in verl_free.values()] == [here.free.get("CPU", 0.0)]
        problems = fit_problems([Demand("reward_pool", 1, 1, 0, per_worker=True)], [here], free=True)
        assert problems[0] == "the pools want 1 CPUs in all; the cluster has 0 free (of 2)"
        assert problems[1].startswith("pool reward_pool wants 1 CPUs for each of its 1 worker(s); 0 node(s)")
    finally:
        local_ray.util.remove_placement_group(held)
    with pytest.raises(ValueError, match="Total available GPUs 0 is less than total desired GPUs 1"):
        ResourcePoolManager({"actor_pool": [1]}, {})._check_resource_available()
    with pytest.raises(ResourceError, match="the pools want 1 GPUs in all; the cluster has 0"):
        check_fit([Demand("actor_pool", 1, 1, 1)], fit.cluster_nodes())

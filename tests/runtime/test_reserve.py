"""A pool's placement group on a real Ray: the wait for room is bounded and says what it waits for."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from rlflow.errors import ResourceError
from rlflow.plan.model import Placement
from rlflow.runtime import reserve as reserving
from rlflow.runtime.pools import demand_of

REWARD = Placement(
    name="reward_pool", type="cpu", device="cpu", workers=1, nnodes=1, bundles=({"CPU": 1.0},), strategy="PACK",
    cpus_per_worker=1.0, gpus_per_worker=0.0,
)  # fmt: skip


@pytest.fixture(scope="module")
def ray_2_cpus():
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture
def held(ray_2_cpus):
    """Both CPUs held by another job's placement group."""
    from ray.util.placement_group import placement_group

    group = placement_group([{"CPU": 2}])
    ray_2_cpus.get(group.ready(), timeout=30)
    yield group
    ray_2_cpus.util.remove_placement_group(group)


def test_room_held_by_another_job_is_waited_for_saying_so_then_refused_naming_the_pool(held, caplog):
    start = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="rlflow.runtime"), pytest.raises(ResourceError) as err:
        reserving.reserve(REWARD, demand_of(REWARD), timeout_s=3)
    assert time.monotonic() - start < 15
    assert str(err.value).startswith(
        "pool reward_pool: its placement group (1 x {'CPU': 1.0}) was not placed within 3 s"
    )
    assert "pool reward_pool wants 1 CPUs for each of its 1 worker(s); 0 node(s) have that many" in str(err.value)
    assert "pool reward_pool is waiting for 1 x {'CPU': 1.0}" in caplog.text, "said while it waited"


def test_room_freed_while_a_pool_waits_is_taken(held, ray_2_cpus, caplog):
    """A node that joins late, or another job ending: the pool was placed after a silent wait; now it says so."""
    threading.Timer(3, ray_2_cpus.util.remove_placement_group, [held]).start()
    with caplog.at_level(logging.WARNING, logger="rlflow.runtime"):
        group = reserving.reserve(REWARD, demand_of(REWARD), timeout_s=60)
    ray_2_cpus.util.remove_placement_group(group)
    assert "pool reward_pool is waiting for" in caplog.text


def test_a_pool_the_nodes_can_no_longer_hold_is_refused_without_waiting_out_the_bound(ray_2_cpus):
    wide = Placement(**{**REWARD.__dict__, "bundles": ({"CPU": 3.0},), "cpus_per_worker": 3.0})
    start = time.monotonic()
    with pytest.raises(ResourceError, match="pool reward_pool: the cluster can no longer hold it: .*wants 3 CPUs"):
        reserving.reserve(wide, demand_of(wide), timeout_s=60)
    assert time.monotonic() - start < 15

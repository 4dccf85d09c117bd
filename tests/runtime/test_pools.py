"""Ray pools: placement groups and workers started for a plan, on a real Ray instance."""

from __future__ import annotations

import time

import pytest
from runtime_helpers import REPO, SMALL


@pytest.fixture
def ray_in_namespace():
    import ray

    ray.init(address="local", num_cpus=2, namespace="team", include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_two_runs_in_one_namespace_start_the_same_pools_side_by_side(ray_in_namespace, tmp_path):
    """Placement groups were named after the pool only, so a second run in the namespace died with Ray's
    'name already exists'; each run's are now its own."""
    import ray

    from rlflow.check import load_pipeline
    from rlflow.plan.compile import compile_plan
    from rlflow.runtime.pools import start_pools, stop_pools

    sets = [*SMALL, "resources.actor_pool.cpus_per_worker=0.5", "resources.reward_pool.cpus_per_worker=0.25"]
    spec = load_pipeline(REPO / "pipelines" / "bird_grpo.yaml", sets).spec
    plan = compile_plan(spec)
    pipeline = spec.model_dump(by_alias=True, mode="json")
    runs = []
    try:
        for i in range(2):
            runs.append(start_pools(plan, pipeline, str(REPO), 0, lambda p: None, run_dir=str(tmp_path / f"r{i}")))
        placed = [g["name"] for g in ray.util.placement_group_table().values() if g["state"] == "CREATED"]
        assert len([n for n in placed if n.startswith("rlflow-actor_pool-")]) == 2, placed
    finally:
        for pools in runs:
            stop_pools(pools)


@pytest.mark.parametrize("pipeline", sorted((REPO / "pipelines").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_pipeline_reserves_at_most_the_two_cores_it_is_sized_for(pipeline):
    """The shipped pipelines run on a 2-core laptop as they stand: more reserved CPUs oversubscribe it."""
    from rlflow.check import load_pipeline
    from rlflow.plan.compile import compile_plan
    from rlflow.runtime.cluster import oversubscription
    from rlflow.runtime.pools import demands

    spec = load_pipeline(pipeline, [], check_paths=False).spec
    assert oversubscription(demands(compile_plan(spec), 0), cores=2) is None


def test_workers_that_miss_their_set_up_time_are_one_line_naming_the_pool(ray_in_namespace, monkeypatch):
    """The set-up wait raised Ray's GetTimeoutError as a traceback after 10 minutes."""
    import ray

    from rlflow.errors import ResourceError
    from rlflow.runtime import pools

    @ray.remote(num_cpus=0)
    def answer(seconds: float) -> dict:
        time.sleep(seconds)
        return {}

    monkeypatch.setattr(pools, "SETUP_TIMEOUT_S", 1.0)
    refs = [answer.remote(0), answer.remote(60)]
    with pytest.raises(ResourceError) as err:
        pools._answers(refs, pools.Pool("reward_pool", "cpu"), "start")
    ray.cancel(refs[1], force=True)
    assert str(err.value).startswith("pool reward_pool: worker(s) 1 did not start within 1 s (")

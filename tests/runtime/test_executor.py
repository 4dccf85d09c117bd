"""The executor contract: one set of tests that InProcessExecutor and RayExecutor both pass.

The shipped ranking pipeline at its smallest, its rollout on a pool of its own (so weights travel), driven
stage by stage: submit and wait with the trace, a weight transfer, a failing stage, a worker killed mid-stage.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field

import pytest
from runtime_helpers import PLUGINS, REPO, python_path

from rlflow.batch import Batch
from rlflow.errors import StageError
from rlflow.runtime.executor import Executor, Handle, TransferHandle
from rlflow.stages import get_stage_kind

SETS = [
    "trainer.train_batch_size=2",
    "trainer.ppo_mini_batch_size=2",
    "trainer.ppo_micro_batch_size_per_gpu=4",
    "algorithm.n=2",
    "data.max_response_length=8",
    "data.max_val_samples=4",
    # about one CPU in all, so Ray fits the pools on this 2-core machine
    "resources.actor_pool.cpus_per_worker=0.5",
    "resources.rollout_pool={type: local, device: cpu, cpus_per_worker: 0.5}",
    "resources.reward_pool.cpus_per_worker=0.01",
    "resources.doomed_pool={type: cpu, workers: 1, cpus_per_worker: 0.01}",
    "stages.generate.on=rollout_pool",
]
# the worker the dying-worker test kills sleeps in this stage; the watchdog bounds the wait should the death go unseen
STUCK = "  - {name: stuck, uses: test_hang, on: doomed_pool, timeout_s: 20}\n"
TRACE_KEYS = {"step", "stage", "resource", "pid", "start", "end", "attempt"}


@dataclass
class Rig:
    """A ready executor over the pipeline, with what the tests feed it and the trace it writes."""

    kind: str
    executor: Executor
    stages: dict
    data: object
    records: list[dict] = field(default_factory=list)

    def prompts(self, step: int) -> Batch:
        return self.data.train.to_batch([0, 1], self.data.tokenizer.pad_token_id, step=step)

    def traced(self, stage: str, step: int) -> list[dict]:
        return [r for r in self.records if r["stage"] == stage and r["step"] == step]


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    """The spec and plan, with the fault plugin importable here (the driver) and in Ray's workers (PYTHONPATH)."""
    from rlflow.check import load_pipeline
    from rlflow.plan.compile import compile_plan
    from rlflow.schemas.project import load_project_config

    folder = tmp_path_factory.mktemp("pipeline")
    (folder / "p.yaml").write_text((REPO / "pipelines" / "ranking_grpo.yaml").read_text() + STUCK)
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(PLUGINS))
        mp.setenv("PYTHONPATH", python_path())
        import rlflow_test_faults  # noqa: F401  (registers test_hang)

        spec = load_pipeline(folder / "p.yaml", SETS, load_project_config(REPO)).spec
        yield spec, compile_plan(spec)


@pytest.fixture(scope="module")
def ray_started(pipeline):
    """One local Ray for the module (started after PYTHONPATH names the plugin, which its workers inherit)."""
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module", params=["inprocess", "ray"])
def rig(request, pipeline, tmp_path_factory):
    import torch

    from rlflow.runtime.step_loop import load_data

    spec, plan = pipeline
    run_dir = tmp_path_factory.mktemp(f"run-{request.param}")
    records: list[dict] = []
    threads = torch.get_num_threads()  # the in-process workers set this process's torch threads
    if request.param == "inprocess":
        from rlflow.runtime.inprocess import InProcessExecutor

        pools = None
        executor = InProcessExecutor(plan, spec, str(REPO), records.extend, str(run_dir))
    else:
        from rlflow.runtime.pools import start_pools, stop_pools
        from rlflow.runtime.ray_executor import RayExecutor

        request.getfixturevalue("ray_started")
        pipeline_dict = spec.model_dump(by_alias=True, mode="json")
        pools = start_pools(plan, pipeline_dict, str(REPO), 0, lambda p: None, ("rlflow_test_faults",), str(run_dir))
        executor = RayExecutor(pools, spec, records.extend, str(run_dir), 0, str(REPO))
    try:
        stages = {s.name: s for s in plan.step}
        yield Rig(request.param, executor, stages, load_data(spec, REPO), records)
    finally:
        executor.close()
        if pools is not None:
            stop_pools(pools)
        torch.set_num_threads(threads)


def test_a_submitted_stage_returns_the_fields_its_kind_writes_and_is_traced(rig):
    generate, reward = rig.stages["generate"], rig.stages["reward"]
    prompts = rig.prompts(step=1)
    handle = rig.executor.submit(generate, prompts, 1)
    assert isinstance(handle, Handle)
    rolled = rig.executor.wait(handle)
    assert isinstance(rolled, Batch) and len(rolled) == 4, "2 prompts x n=2, expanded on the worker"
    assert set(get_stage_kind("generate").writes_fields) <= set(handle.output.keys()) <= set(rolled.keys())
    assert rig.executor.wait(handle) is rolled, "waiting again gives the same batch"
    assert "responses" not in prompts, "the batch submitted is not changed"

    scored = rig.executor.wait(rig.executor.submit(reward, rolled, 1))  # a CPU pool: sent numpy, merged as tensors
    assert {"token_level_scores", "scores"} <= set(scored.keys()) and len(scored) == len(rolled)
    assert "responses" in scored and "scores" not in rolled

    for stage, resource in (("generate", "rollout_pool"), ("reward", "reward_pool")):
        (record,) = rig.traced(stage, 1)
        assert set(record) == TRACE_KEYS and record["resource"] == resource and record["attempt"] == 0
        assert record["start"] <= record["end"] <= time.time()
        assert (record["pid"] == os.getpid()) == (rig.kind == "inprocess"), "a Ray worker is a process of its own"


def test_a_weight_transfer_reports_sync_metrics_once_and_the_rollout_serves_the_new_version(rig):
    sync, generate = rig.stages["sync_weights"], rig.stages["generate"]
    before = rig.executor.run_stage(generate, rig.prompts(step=4), 4)
    assert before.metrics["rollout/policy_version"] != 5.0
    rig.executor.run_stage(sync, Batch(), 5)  # the actor's side, as the step loop runs it first
    transfer = rig.executor.submit_transfer(sync, "actor_pool", "rollout_pool", 5)
    assert isinstance(transfer, TransferHandle)
    metrics = rig.executor.wait_transfer(transfer)
    assert metrics and all(k.startswith("sync/") for k in metrics), metrics
    assert metrics["sync/bytes"] > 0 and metrics["sync/seconds"] >= 0
    assert rig.executor.wait_transfer(transfer) == metrics, "waiting twice returns the same metrics"
    assert [r["resource"] for r in rig.traced("export_weights", 5)] == ["actor_pool"]
    assert "rollout_pool" in [r["resource"] for r in rig.traced("sync_weights", 5)]
    after = rig.executor.run_stage(generate, rig.prompts(step=6), 6)
    assert after.metrics["rollout/policy_version"] == 5.0


def test_a_failing_stage_is_a_stage_error_naming_it_and_the_executor_goes_on(rig, tmp_path):
    (tmp_path / "bad_reward.py").write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    raise ValueError('no score for this one')\n"
    )
    reward = rig.stages["reward"]
    rolled = rig.executor.run_stage(rig.stages["generate"], rig.prompts(step=3), 3)
    broken = {**reward.config, "function": f"{tmp_path / 'bad_reward.py'}:compute_score"}
    handle = rig.executor.submit(reward, rolled, 3, config=broken)
    with pytest.raises(StageError) as failed:
        rig.executor.wait(handle)
    said = str(failed.value)
    assert "stage 'reward' failed on resource 'reward_pool', worker 0 (" in said, said
    assert "no score for this one" in said, "the cause is carried"
    scored = rig.executor.run_stage(reward, rolled, 3)  # the same worker, its own function again
    assert {"token_level_scores", "scores"} <= set(scored.keys())


def test_a_worker_killed_mid_stage_is_worker_died_within_seconds(rig):
    import torch

    if rig.kind == "inprocess":
        pytest.skip("in-process workers are threads of the test process: none can die on its own")
    from rlflow.runtime.ray_executor import WorkerDied

    pid = rig.executor.pools["doomed_pool"].info[0]["pid"]
    handle = rig.executor.submit(rig.stages["stuck"], Batch({"scores": torch.zeros(2)}), 7)
    time.sleep(1.0)  # the worker takes the call up at once (nothing else is queued on it) and sleeps in it
    os.kill(pid, signal.SIGKILL)
    start = time.time()
    with pytest.raises(WorkerDied) as died:
        rig.executor.wait(handle)
    assert time.time() - start < 15, "the death is seen, not waited out by the 20 s watchdog"
    said = str(died.value)
    assert f"stage 'stuck': worker 0 (pid {pid} on Ray node " in said and "of resource 'doomed_pool' died" in said

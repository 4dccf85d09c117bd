"""Placements: bundles, strategy and colocation for each resource type."""

from __future__ import annotations

from plan_helpers import SMALL, spec_from_yaml

from rlflow.plan.compile import compile_plan


def plan_with_resources(resources: str, pool: str = "pool"):
    text = SMALL.replace("  pool: {type: local, device: cpu}\n", resources).replace("on: pool", f"on: {pool}")
    return compile_plan(spec_from_yaml(text))


def test_single_node_gpu_pool_packs_one_bundle_per_gpu():
    plan = plan_with_resources("  pool: {type: local, device: gpu, gpus_per_node: 4, cpus_per_worker: 2}\n")
    p = plan.resources["pool"]
    assert (p.type, p.device, p.workers, p.nnodes, p.strategy) == ("local", "gpu", 4, 1, "PACK")
    assert p.bundles == ({"CPU": 2.0, "GPU": 1.0},) * 4
    assert p.gpus_per_worker == 1.0 and p.forwarders == 0 and p.backend is None


def test_multi_node_pool_gets_one_node_sized_bundle_per_node():
    p = plan_with_resources("  pool: {type: local, device: gpu, gpus_per_node: 8, nnodes: 2}\n").resources["pool"]
    assert (p.workers, p.nnodes, p.strategy, len(p.bundles)) == (16, 2, "STRICT_SPREAD", 2)
    assert p.bundles == ({"CPU": 8.0, "GPU": 8.0},) * 2
    assert p.bundle_of == (0,) * 8 + (1,) * 8


def test_auto_device_stays_auto_until_the_runtime_resolves_it():
    p = plan_with_resources("  pool: {type: local, device: auto, gpus_per_node: 2}\n").resources["pool"]
    assert p.device == "auto" and p.bundles == ({"CPU": 1.0},) * 2 and p.gpus_per_worker == 0.0
    gpu = p.with_device("gpu")
    assert gpu.device == "gpu" and gpu.gpus_per_worker == 1.0 and gpu.bundles == ({"CPU": 1.0, "GPU": 1.0},) * 2
    assert p.with_device("cpu").bundles == ({"CPU": 1.0},) * 2 and p.with_device("cpu").device == "cpu"


def test_cpu_pool_is_cpu_actors_and_remote_is_gpu_free_forwarders():
    plan = plan_with_resources("  pool: {type: remote, backend: reference, forwarders: 2, cpus_per_forwarder: 0.5}\n")
    remote, scorers = plan.resources["pool"], plan.resources["scorers"]
    assert (remote.type, remote.forwarders, remote.workers, remote.backend) == ("remote", 2, 2, "reference")
    assert remote.bundles == ({"CPU": 0.5},) * 2 and remote.gpus_per_worker == 0.0
    assert (scorers.type, scorers.workers, scorers.bundles) == ("cpu", 2, ({"CPU": 1.0},) * 2)


def test_colocation_lists_each_stage_once_with_the_driver_last():
    plan = plan_with_resources("  pool: {type: local, device: cpu}\n")
    colocated = ("generate", "old_log_prob", "update_actor", "sync_weights", "load_checkpoint")
    assert plan.resources["pool"].stages == colocated
    assert list(plan.resources) == ["pool", "scorers", "driver"]
    assert plan.resources["driver"].stages == ("advantage",) and plan.resources["driver"].bundles == ()
    shared = {name: p.stages for name, p in plan.resources.items() if len(p.stages) > 1 and p.type != "driver"}
    assert shared == {"pool": colocated}
    assert {s.resource_type for s in plan.step} == {"local", "cpu", "driver"}

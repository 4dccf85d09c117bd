"""Starting or joining Ray, and checking that the cluster can hold every pool before anything starts.

With no ``ray.address`` in rlflow.yaml an embedded local Ray is started (no dashboard, usage
stats off, quiet). Its logical CPU count is raised to what the pipeline asks for when the
laptop has fewer cores: CPU bundles are then shared, which is what a laptop user wants; GPUs
are never invented. With an address, the existing cluster is joined and its real resources
are checked.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from rlflow.errors import ResourceError

log = logging.getLogger("rlflow.runtime")
EMBEDDED_START_ATTEMPTS = 3


@dataclass(frozen=True)
class Demand:
    """What one pool needs: ``workers`` bundles of cpus/gpus, spread over ``nnodes`` nodes."""

    pool: str
    workers: int
    cpus: float
    gpus: float
    nnodes: int = 1


def start_ray(project, cpu_demand: float) -> bool:
    """Start or join Ray; returns True when this call started it (so the caller shuts it down)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    import ray

    if ray.is_initialized():
        return False
    kwargs = dict(project.ray.init or {})
    kwargs.setdefault("include_dashboard", False)
    kwargs.setdefault("log_to_driver", bool(os.environ.get("RLFLOW_DEBUG")))
    kwargs.setdefault("configure_logging", True)
    kwargs.setdefault("logging_level", logging.WARNING)
    if project.ray.namespace:
        kwargs.setdefault("namespace", project.ray.namespace)
    if project.ray.address:
        ray.init(address=project.ray.address, **kwargs)
        return True
    cpus = project.ray.num_cpus or max(os.cpu_count() or 1, int(-(-cpu_demand // 1)))
    for _ in range(EMBEDDED_START_ATTEMPTS - 1):
        try:
            ray.init(num_cpus=cpus, **kwargs)
            return True
        except Exception as exc:  # Ray raises a bare Exception when its raylet misses a fixed 30 s start window
            if "timed out during startup" not in str(exc):
                raise
            log.warning("the embedded Ray did not start in time (a busy machine?); trying again")
            ray.shutdown()
    ray.init(num_cpus=cpus, **kwargs)  # the last attempt: its failure is the run's
    return True


def cluster_nodes() -> list[dict[str, float]]:
    """Per alive node: its CPU and GPU totals."""
    import ray

    nodes = []
    for node in ray.nodes():
        if node.get("Alive"):
            res = node.get("Resources", {})
            nodes.append({"name": node.get("NodeManagerAddress", "?"), "CPU": res.get("CPU", 0.0), "GPU": res.get("GPU", 0.0)})
    return nodes


def check_fit(demands: list[Demand], nodes: list[dict[str, float]]) -> None:
    """Fail with every shortfall named when the cluster cannot hold the pools."""
    problems = []
    total_cpu = sum(n["CPU"] for n in nodes)
    total_gpu = sum(n["GPU"] for n in nodes)
    want_cpu = sum(d.workers * d.cpus for d in demands)
    want_gpu = sum(d.workers * d.gpus for d in demands)
    for d in demands:
        if d.gpus <= 0:
            continue
        per_node = d.workers // d.nnodes * d.gpus
        able = sorted((n for n in nodes if n["GPU"] >= per_node), key=lambda n: -n["GPU"])
        if len(able) < d.nnodes:
            biggest = max(nodes, key=lambda n: n["GPU"], default={"name": "none", "GPU": 0})
            problems.append(
                f"pool {d.pool} wants {per_node:g} GPUs on each of {d.nnodes} node(s); "
                f"{len(able)} node(s) have that many (largest: {biggest['name']} with {biggest['GPU']:g})"
            )
    if want_gpu > total_gpu and not problems:
        problems.append(f"the pools want {want_gpu:g} GPUs in all; the cluster has {total_gpu:g}")
    if want_cpu > total_cpu:
        problems.append(f"the pools want {want_cpu:g} CPUs in all; the cluster has {total_cpu:g}")
    if problems:
        raise ResourceError(
            "the cluster cannot hold this pipeline: " + "; ".join(problems)
            + " (shrink the pools, or add nodes / set `ray.address` in rlflow.yaml to a bigger cluster)"
        )

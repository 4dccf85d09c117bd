"""Do the pipeline's resources fit the cluster described under ``inventory:`` in rlflow.yaml?

Design decisions:
- GPU pools are placed one at a time, in the order they are declared: a pool needs
  ``gpus_per_node`` free GPUs on each of ``nnodes`` distinct nodes (Ray places one bundle
  per node, as verl's resource pools do). Nodes are chosen best-fit (the fullest node that
  still fits) so large nodes stay free for large pools. A shortfall names the pool, what it
  wants and what each node has: "pool actor_pool wants 8 GPUs on 1 node; node0 has 4".
- A local pool is a GPU pool when its device is ``gpu``, or ``auto`` and the inventory has
  GPUs; otherwise its workers are CPU processes.
- CPUs are checked in aggregate (every worker, forwarder and CPU-pool actor together),
  and each worker must fit on the largest node.
"""

from __future__ import annotations

from rlflow.schemas.pipeline import data_parallel_size
from rlflow.schemas.subject import Reporter, Subject


def check_inventory(subject: Subject, inventory, report: Reporter) -> None:
    has_gpus = any(node.gpus for node in inventory.nodes)
    free = {node.name: node.gpus for node in inventory.nodes}
    placed: dict[str, list[str]] = {node.name: [] for node in inventory.nodes}
    for name, res in subject.resources.items():
        if res.type == "local" and (res.device == "gpu" or (res.device == "auto" and has_gpus)):
            _place_gpu_pool(name, res, inventory, free, placed, report)
        elif res.type == "local" and res.nnodes > len(inventory.nodes):
            report(
                ("resources", name, "nnodes"),
                f"pool {name} wants {res.nnodes} nodes; the inventory has {len(inventory.nodes)}",
                f"set nnodes: {len(inventory.nodes)} or fewer",
            )
    _check_cpus(subject, inventory, report)


def _place_gpu_pool(name, res, inventory, free, placed, report: Reporter) -> None:
    want, count = res.gpus_per_node, res.nnodes
    fitting = sorted((n for n in inventory.nodes if free[n.name] >= want), key=lambda n: free[n.name])
    if len(fitting) >= count:
        for node in fitting[:count]:
            free[node.name] -= want
            placed[node.name].append(name)
        return
    where = "1 node" if count == 1 else f"each of {count} nodes"
    report(
        ("resources", name, "gpus_per_node"),
        f"pool {name} wants {want} GPUs on {where}; "
        + ", ".join(_node_state(n, free, placed) for n in inventory.nodes),
        "lower gpus_per_node or nnodes, or add nodes to the inventory",
    )


def _node_state(node, free, placed) -> str:
    state = f"{node.name} has {node.gpus}"
    if placed[node.name]:
        state += f" ({free[node.name]} free after {', '.join(placed[node.name])})"
    return state


def _cpu_demand(res) -> tuple[int, float]:
    """(actors, CPUs per actor) of one resource."""
    if res.type == "local":
        return data_parallel_size(res), res.cpus_per_worker
    if res.type == "cpu":
        return res.workers, res.cpus_per_worker
    return res.forwarders, res.cpus_per_forwarder


def _check_cpus(subject: Subject, inventory, report: Reporter) -> None:
    largest = max(inventory.nodes, key=lambda n: n.cpus)
    total, parts = 0.0, []
    for name, res in subject.resources.items():
        actors, each = _cpu_demand(res)
        total += actors * each
        parts.append(f"{name} {actors * each:g}")
        if each > largest.cpus:
            key = "cpus_per_forwarder" if res.type == "remote" else "cpus_per_worker"
            report(
                ("resources", name, key),
                f"each actor of {name} wants {each:g} CPUs; the largest node ({largest.name}) has {largest.cpus}",
                f"set {key}: {largest.cpus} or less",
            )
    have = sum(node.cpus for node in inventory.nodes)
    if total > have:
        nodes = ", ".join(f"{n.name} {n.cpus}" for n in inventory.nodes)
        report(
            ("resources",),
            f"resources want {total:g} CPUs in all ({', '.join(parts)}); the inventory has {have} ({nodes})",
            "lower workers or CPUs per actor, or add nodes",
            at="key",
        )

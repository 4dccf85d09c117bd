"""Do the pipeline's resources fit the cluster described under ``inventory:`` in rlflow.yaml?

GPU pools are placed one at a time, best fit; CPUs are checked in aggregate; a GPU pool's models fit its GPUs'
memory when the nodes give ``gpu_memory_gb`` (``memory.py``). Design notes: docs/design/fit.md.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rlflow.check.model_memory import check_memory
from rlflow.check.packing import Ask, Room, Shortfall, place
from rlflow.errors import ConfigError
from rlflow.plan.compile import compile_plan
from rlflow.schemas.labels import describe_selector
from rlflow.schemas.pipeline import data_parallel_size
from rlflow.schemas.subject import Reporter, Subject


def check_inventory(
    subject: Subject, inventory, report: Reporter, resolve: Callable[[str], Path] | None = None
) -> None:
    """Every pool against ``inventory``; ``resolve`` (a pipeline path to a file, ``ProjectConfig.resolve``) lets
    the memory rule read the model folders (without it, no memory rule)."""
    has_gpus = any(node.gpus for node in inventory.nodes)
    rooms = [Room(node.name, {"GPU": float(node.gpus), **node.resources}, node.labels) for node in inventory.nodes]
    totals = {node.name: node.gpus for node in inventory.nodes}
    gpu_pools = []
    for name, res in subject.resources.items():
        if res.type == "local" and (res.device == "gpu" or (res.device == "auto" and has_gpus)):
            _place_gpu_pool(name, res, rooms, totals, report)
            gpu_pools.append(name)
        elif res.type == "local" and res.nnodes > len(inventory.nodes):
            report(
                ("resources", name, "nnodes"),
                f"pool {name} wants {res.nnodes} nodes; the inventory has {len(inventory.nodes)}",
                f"set nnodes: {len(inventory.nodes)} or fewer",
            )
        elif res.resources or res.label_selector:
            _place_pinned_pool(name, res, rooms, report)
    _check_cpus(subject, inventory, report)
    if resolve is not None and gpu_pools and any(n.gpu_memory_gb is not None for n in inventory.nodes):
        _check_memory(subject, inventory, resolve, gpu_pools, report)


def _check_memory(subject: Subject, inventory, resolve: Callable[[str], Path], pools: list[str], report) -> None:
    """The memory rule (``memory.py``) on a pipeline that parsed whole and compiles (else others report why)."""
    if subject.spec is None:
        return
    try:
        plan = compile_plan(subject.spec)
    except ConfigError:
        return
    check_memory(subject.spec, plan, inventory, resolve, pools, report)


def _place_gpu_pool(name, res, rooms: list[Room], totals: dict[str, int], report: Reporter) -> None:
    want, count = res.gpus_per_node, res.nnodes
    group = {"GPU": float(want), **{key: amount * want for key, amount in res.resources.items()}}
    short = place([Ask(name, group, count, True, res.label_selector)], rooms)
    if not short:
        return
    if short[0].resource != "GPU":
        _report_pinned(name, res, short[0], report)
        return
    where = "1 node" if count == 1 else f"each of {count} nodes"
    report(
        ("resources", name, "gpus_per_node"),
        f"pool {name} wants {want} GPUs on {where}{_labelled(res)}; "
        + ", ".join(_node_state(room, totals[room.name]) for room in short[0].usable),
        "lower gpus_per_node or nnodes, or add nodes to the inventory",
    )


def _place_pinned_pool(name, res, rooms: list[Room], report: Reporter) -> None:
    """A CPU-only pool pinned to nodes: enough nodes with its labels and custom resources (CPUs are counted
    by ``_check_cpus``)."""
    actors, _ = _cpu_demand(res)
    size, count, spread = (res.gpus_per_node, res.nnodes, True) if res.type == "local" else (1, actors, False)
    group = {key: amount * size for key, amount in res.resources.items()}
    short = place([Ask(name, group, count, spread, res.label_selector)], rooms)
    if short:
        _report_pinned(name, res, short[0], report)


def _report_pinned(name, res, short: Shortfall, report: Reporter) -> None:
    """Why a pinned pool finds no room: no node with its labels, too few of them, or too little of a resource."""
    count = short.ask.count
    if not short.usable:
        report(
            ("resources", name, "label_selector"),
            f"pool {name} selects nodes labelled {describe_selector(res.label_selector)}; no inventory node has them",
            "label the nodes with ray start --labels and list them as labels: under inventory.nodes, or change label_selector",
        )
    elif short.resource is None:
        report(
            ("resources", name, "nnodes"),
            f"pool {name} wants {count} nodes{_labelled(res)}; the inventory has {len(short.usable)}",
            f"set nnodes: {len(short.usable)} or fewer",
        )
    else:
        key, amount = short.resource, short.ask.group[short.resource]
        where = f"on each of {count} nodes" if short.ask.spread and count > 1 else "on one node"
        have = ", ".join(f"{room.name} has {room.free.get(key, 0.0):g}" for room in short.usable)
        report(
            ("resources", name, "resources"),
            f"pool {name} wants {amount:g} of resource {key!r} {where}{_labelled(res)}; {have}",
            "lower it, or offer more with ray start --resources and list it as resources: under inventory.nodes",
        )


def _labelled(res) -> str:
    return f" labelled {describe_selector(res.label_selector)}" if res.label_selector else ""


def _node_state(room: Room, gpus: int) -> str:
    state = f"{room.name} has {gpus}"
    if room.placed:
        state += f" ({room.free['GPU']:g} free after {', '.join(dict.fromkeys(room.placed))})"
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

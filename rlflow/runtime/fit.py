"""Does the cluster have room for every pool: node by node, in all and free now, before the pools start and
before each restart (refused at once, or waited for up to ``ray.placement_timeout_s``).

Design notes: docs/design/fit.md.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from rlflow.check.packing import Ask, Room, Shortfall, place
from rlflow.errors import ResourceError
from rlflow.schemas.labels import describe_selector

log = logging.getLogger("rlflow.runtime")
POLL_S = 0.5  # how often a wait for room looks at the cluster again
NOTICE_AFTER_S = 2.0  # a wait for room says what it waits for once it lasts this long ...
NOTICE_EVERY_S = 10.0  # ... and again this often


@dataclass(frozen=True)
class Demand:
    """What one pool needs: ``workers`` of ``cpus``/``gpus`` (and custom ``resources``) each, on nodes its
    ``label_selector`` matches. A local pool keeps ``workers // nnodes`` of them on each of ``nnodes`` distinct
    nodes; a CPU pool's workers and a remote resource's forwarders (``per_worker``) go wherever each fits."""

    pool: str
    workers: int
    cpus: float
    gpus: float
    nnodes: int = 1
    per_worker: bool = False
    resources: Mapping[str, float] = field(default_factory=dict)
    label_selector: Mapping[str, str] = field(default_factory=dict)

    def ask(self) -> Ask:
        """This pool as the per-node placement rule takes it (``rlflow.check.packing``)."""
        size = 1 if self.per_worker else self.workers // self.nnodes
        each = {"GPU": self.gpus, "CPU": self.cpus, **self.resources}
        group = {name: amount * size for name, amount in each.items() if amount}
        count = self.workers if self.per_worker else self.nnodes
        return Ask(self.pool, group, count, not self.per_worker, self.label_selector)


@dataclass(frozen=True)
class ClusterNode:
    """An alive node: its resources in all (``total``) and unreserved now (``free``), and its labels."""

    name: str
    total: Mapping[str, float]
    free: Mapping[str, float]
    labels: Mapping[str, str] = field(default_factory=dict)


def cluster_nodes() -> list[ClusterNode]:
    """Every alive node: its resources in all and free now (as verl's ``ResourcePoolManager`` reads them), its
    labels. A node that has not reported what is free yet counts as all free."""
    import ray

    free = ray._private.state.available_resources_per_node()
    return [
        ClusterNode(
            f"node {node['NodeID'][:8]} at {node.get('NodeManagerAddress', '?')}",
            node.get("Resources", {}),
            free.get(node["NodeID"], node.get("Resources", {})),
            node.get("Labels", {}),
        )
        for node in ray.nodes()
        if node.get("Alive")
    ]


def fit_problems(demands: list[Demand], nodes: list[ClusterNode], free: bool = False) -> list[str]:
    """Every way the nodes cannot hold the pools, each pool placed on its own nodes (``rlflow.check.packing``):
    against what the nodes have in all, or (``free``) against what is unreserved now."""
    rooms = [Room(n.name, dict(n.free if free else n.total), n.labels) for n in nodes]
    totals = {n.name: n.total for n in nodes}
    problems = []
    for key, noun in (("GPU", "GPUs"), ("CPU", "CPUs")):
        want = sum(d.workers * (d.gpus if key == "GPU" else d.cpus) for d in demands)
        have = sum(room.free.get(key, 0.0) for room in rooms)
        if want > have:
            of = f" free (of {sum(t.get(key, 0.0) for t in totals.values()):g})" if free else ""
            problems.append(f"the pools want {want:g} {noun} in all; the cluster has {have:g}{of}")
    short = place([d.ask() for d in demands], rooms)
    return problems + [_shortfall(s, totals, free) for s in short]


def _shortfall(short: Shortfall, totals: dict[str, Mapping[str, float]], free: bool) -> str:
    ask = short.ask
    pinned = f" on nodes labelled {describe_selector(ask.label_selector)}" if ask.label_selector else ""
    if not short.usable:
        return f"pool {ask.pool} wants nodes labelled {describe_selector(ask.label_selector)}; no alive node has them"
    if short.resource is None:
        return f"pool {ask.pool} wants {ask.count} distinct nodes{pinned}; {len(short.usable)} alive node(s) match"
    key, amount = short.resource, ask.group[short.resource]
    what = {"GPU": f"{amount:g} GPUs", "CPU": f"{amount:g} CPUs"}.get(key, f"{amount:g} of resource {key!r}")
    where = f"on each of {ask.count} node(s)" if ask.spread else f"for each of its {ask.count} worker(s)"
    largest = max(short.usable, key=lambda room: room.free.get(key, 0.0))
    state = f"{largest.name} with {largest.free.get(key, 0.0):g}"
    if free:
        state += f" free of {totals[largest.name].get(key, 0.0):g}"
    if largest.placed:
        state += f" after {', '.join(dict.fromkeys(largest.placed))}"
    if short.placed:  # some of its groups fit, not all
        fit = f"only {short.placed} {'node(s)' if ask.spread else 'worker(s)'} fit"
    else:
        fit = f"{sum(room.free.get(key, 0.0) >= amount for room in short.usable)} node(s) have that many"
    return f"pool {ask.pool} wants {what} {where}{pinned}; {fit} (largest: {state})"


def check_fit(demands: list[Demand], nodes: list[ClusterNode], when: str = "") -> None:
    """Fail at once, every shortfall named, when the nodes could not hold the pools even with nothing else on
    them; ``when`` prefixes the message (a restart)."""
    problems = fit_problems(demands, nodes)
    if problems:
        pinned = any(d.resources or d.label_selector for d in demands)
        raise ResourceError(
            f"{when}the cluster cannot hold this pipeline: "
            + "; ".join(problems)
            + " (shrink the pools"
            + (", loosen their resources: or label_selector:" if pinned else "")
            + ", or add nodes / set `ray.address` in rlflow.yaml to a bigger cluster)"
        )


def await_fit(
    demands: list[Demand],
    timeout_s: float,
    when: str = "",
    read: Callable[[], list[ClusterNode]] = cluster_nodes,
) -> list[ClusterNode]:
    """Wait until what the pools need is free on the nodes (``read``); the nodes then.

    Refused at once (``check_fit``) when the nodes could not hold the pools even with nothing else on
    them, and after ``timeout_s`` when they could but the room stays held: by another job, or by this
    run's pools a moment after a restart stopped them (Ray reports freed resources late). While it
    waits it says what is missing, every ``NOTICE_EVERY_S``.
    """
    start = time.monotonic()
    told = start + NOTICE_AFTER_S - NOTICE_EVERY_S  # the first notice after NOTICE_AFTER_S
    while True:
        nodes = read()
        check_fit(demands, nodes, when)
        problems = fit_problems(demands, nodes, free=True)
        if not problems:
            return nodes
        now = time.monotonic()
        if now - start >= timeout_s:
            raise ResourceError(
                f"{when}the cluster has room for this pipeline, but not free: {'; '.join(problems)}; it stayed held "
                f"for {timeout_s:g} s (another job holds it: wait for it, or raise ray.placement_timeout_s in "
                "rlflow.yaml)"
            )
        if now - told >= NOTICE_EVERY_S:
            log.warning(
                "%swaiting for room on the cluster (%.0f of %g s): %s",
                when,
                now - start,
                timeout_s,
                "; ".join(problems),
            )
            told = now
        time.sleep(POLL_S)

"""Reserving a pool's placement group: bounded in time, and saying what it waits for.

Design notes: docs/design/pools.md.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from rlflow.errors import ResourceError
from rlflow.runtime.fit import NOTICE_AFTER_S, NOTICE_EVERY_S, Demand, cluster_nodes, fit_problems
from rlflow.schemas.labels import describe_selector

log = logging.getLogger("rlflow.runtime")


def reserve(placement, demand: Demand, timeout_s: float) -> Any:
    """The placed placement group of ``placement`` (``demand``: the same pool, for the messages)."""
    import ray
    from ray.util.placement_group import placement_group

    bundles = [dict(b) for b in placement.bundles]
    selector = [dict(placement.label_selector)] * len(bundles) if placement.label_selector else None
    # unique per run: two runs in one Ray namespace (docs/cluster.md's `namespace: team`) must not collide
    name = f"rlflow-{placement.name}-{uuid.uuid4().hex[:12]}"
    pg = placement_group(bundles, strategy=placement.strategy, name=name, bundle_label_selector=selector)
    what = f"{len(bundles)} x {bundles[0]}"
    if selector:
        what += f" on nodes labelled {describe_selector(placement.label_selector)}"
    ready = pg.ready()
    start = time.monotonic()
    try:
        while True:
            waited = time.monotonic() - start
            pause = NOTICE_AFTER_S if waited < NOTICE_AFTER_S else NOTICE_EVERY_S
            if ray.wait([ready], timeout=max(0.0, min(pause, timeout_s - waited)))[0]:
                return pg
            waited = time.monotonic() - start
            nodes = cluster_nodes()
            never = fit_problems([demand], nodes)
            if never:
                raise ResourceError(f"pool {placement.name}: the cluster can no longer hold it: {'; '.join(never)}")
            why = (
                "; ".join(fit_problems([demand], nodes, free=True)) or "the nodes have it free now (Ray is placing it)"
            )
            if waited >= timeout_s:
                raise ResourceError(
                    f"pool {placement.name}: its placement group ({what}) was not placed within {timeout_s:g} s: "
                    f"{why} (another job holds the room: wait for it, or raise ray.placement_timeout_s in rlflow.yaml)"
                )
            log.warning("pool %s is waiting for %s (%.0f of %g s): %s", placement.name, what, waited, timeout_s, why)
    except BaseException:
        ray.util.remove_placement_group(pg)
        raise

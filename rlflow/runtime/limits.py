"""Operating-system limits a worker process puts on itself.

``limit_address_space`` caps the process's virtual address space (``RLIMIT_AS``). It is the
backstop behind the reward's own memory caps (``rlflow.reward.sql_exec``): whatever else
allocates without bound in a ``cpu`` pool worker then gets a ``MemoryError`` in that worker,
which the reward turns into one row's 0, instead of the machine's OOM killer choosing a victim.
The limit counts address space, not resident memory: a Ray worker that has imported torch maps
a few GB before doing any work, so the limit must sit well above that (see docs/reward.md).
Only lowering is possible for an unprivileged process, and a limit below what is already mapped
still applies to every later allocation.
"""

from __future__ import annotations

import resource


def limit_address_space(megabytes: int | None) -> None:
    """Cap this process's address space at ``megabytes`` MB; None leaves it as it is."""
    if megabytes is None:
        return
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = megabytes * 2**20
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))

"""Operating-system limits a worker process puts on itself.

``limit_address_space`` caps ``RLIMIT_AS``: the backstop behind the reward's own memory caps.
Design notes: docs/design/limits.md.
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

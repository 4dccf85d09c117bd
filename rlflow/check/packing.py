"""Placing pools on nodes, group by group: the per-node rule both fit checks share (best fit, distinct
nodes for ``nnodes``, a pool placed whole or not at all). Design notes: docs/design/packing.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from rlflow.schemas.labels import matches


@dataclass(frozen=True)
class Ask:
    """One pool's request: ``count`` groups, each of ``group``'s resources (GPUs and CPUs first)."""

    pool: str
    group: Mapping[str, float]
    count: int = 1
    spread: bool = True
    label_selector: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Room:
    """A node as the placement sees it: what it has ``free`` (used up as pools land), its labels, and the
    pools given room on it so far."""

    name: str
    free: dict[str, float]
    labels: Mapping[str, str] = field(default_factory=dict)
    placed: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Shortfall:
    """A pool that does not fit. ``placed`` of its groups found a node before one did not; ``resource`` is the
    first of its resources that no node left to it had enough of (None when no node was left: none matches
    its labels, or it spreads over more nodes than match); ``usable``: the nodes its labels allow, as they
    were then."""

    ask: Ask
    placed: int
    resource: str | None
    usable: tuple[Room, ...]


def place(asks: Sequence[Ask], rooms: Sequence[Room]) -> list[Shortfall]:
    """Place ``asks`` in order on ``rooms`` (their ``free`` and ``placed`` change); the pools that do not fit."""
    short = []
    for ask in asks:
        usable = [room for room in rooms if matches(ask.label_selector, room.labels)]
        taken: list[Room] = []
        for i in range(ask.count):
            left = [room for room in usable if not (ask.spread and any(room is t for t in taken))]
            fits = [room for room in left if all(room.free.get(k, 0.0) >= v for k, v in ask.group.items())]
            if not fits:
                for room in taken:
                    _give(room, ask, -1)
                snapshot = tuple(Room(r.name, dict(r.free), r.labels, list(r.placed)) for r in usable)
                short.append(Shortfall(ask, i, _lacking(ask.group, left), snapshot))
                break
            best = min(fits, key=lambda room: [room.free.get(k, 0.0) - v for k, v in ask.group.items()])
            _give(best, ask, 1)
            taken.append(best)
    return short


def _give(room: Room, ask: Ask, sign: int) -> None:
    """Take one group of ``ask`` from ``room`` (``sign`` 1), or hand it back (-1)."""
    for key, amount in ask.group.items():
        room.free[key] = room.free.get(key, 0.0) - sign * amount
    if sign > 0:
        room.placed.append(ask.pool)
    else:
        room.placed.remove(ask.pool)


def _lacking(group: Mapping[str, float], left: list[Room]) -> str | None:
    """The first resource of ``group`` no room in ``left`` has enough of (the first one when each is somewhere,
    but never all on one node); None when no room is left."""
    if not left:
        return None
    for key, amount in group.items():
        if max(room.free.get(key, 0.0) for room in left) < amount:
            return key
    return next(iter(group), None)

"""Order a step's stages from the fields they read and write, and find what cannot be ordered.

A stage runs after the producers of every field it reads; verl's order decides among stages ready together.
Design notes: docs/design/plan.md.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from graphlib import CycleError, TopologicalSorter

from rlflow.plan.model import DATA_SOURCE, Edge
from rlflow.stages.base import SOURCE_FIELDS, STATE_FIELDS, VERL_ORDER

VERL_INDEX = {timer: i for i, timer in enumerate(VERL_ORDER)}
_SOURCE_KEY = (-1, 0, -1)
_SOURCES = frozenset(SOURCE_FIELDS)

Problem = tuple[str, str]


@dataclass(frozen=True)
class FlowNode:
    """A stage as the sort sees it; ``path`` locates it in the pipeline file for messages."""

    name: str
    path: str
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    verl_timer: str | None
    origin: str = ""  # why an implicit stage exists, e.g. "added because trainer.save_freq > 0"

    def describe(self) -> str:
        return f"'{self.name}' ({self.origin or self.path})"


@dataclass
class Flow:
    """The result of ``analyse``: an order (indices into the nodes), the problems, the producers."""

    order: list[int]
    problems: list[Problem]
    producer: dict[str, int]


def analyse(
    nodes: Sequence[FlowNode], kinds_producing: Callable[[str], list[str]], report_missing: bool = True
) -> Flow:
    """Sort ``nodes``; collect duplicate producers, missing producers (when asked) and cycles."""
    problems: list[Problem] = []
    producer = _producers(nodes, problems)
    preds: list[set[int]] = [set() for _ in nodes]
    for i, node in enumerate(nodes):
        for name in node.reads:
            p = producer.get(name)
            if p is None:
                if report_missing and name not in _SOURCES and not node.origin:
                    problems.append((node.path, _missing_message(node, name, kinds_producing(name))))
            elif name not in STATE_FIELDS:
                preds[i].add(p)
    order = _sort(nodes, preds, producer)
    if len(order) < len(nodes):
        problems.extend(_cycles(nodes, preds, _placeable(preds)))
    return Flow(order, problems, producer)


def _producers(nodes: Sequence[FlowNode], problems: list[Problem]) -> dict[str, int]:
    producer: dict[str, int] = {}
    for i, node in enumerate(nodes):
        for name in node.writes:
            first = producer.setdefault(name, i)
            if name in _SOURCES:
                problems.append(
                    (node.path, f"stage {node.describe()} writes '{name}', which the data loader already provides; "
                     "write a new field name instead")
                )  # fmt: skip
            elif first != i:
                problems.append(
                    (node.path, f"field '{name}' has two producers: stage {nodes[first].describe()} and stage "
                     f"{node.describe()}; remove one of them or make one write another field")
                )  # fmt: skip
    return producer


def _missing_message(node: FlowNode, name: str, kinds: list[str]) -> str:
    hint = f"add a stage using one of: {', '.join(kinds)}" if kinds else "no known stage kind produces it"
    return f"stage '{node.name}' reads '{name}' but no stage produces it ({hint})"


def _sort(nodes: Sequence[FlowNode], preds: list[set[int]], producer: dict[str, int]) -> list[int]:
    """The step order; empty when the stages form a cycle (``_cycles`` reports it)."""
    sorter = TopologicalSorter({i: ps for i, ps in enumerate(preds)})
    try:
        sorter.prepare()
    except CycleError:
        return []
    static = [(VERL_INDEX[n.verl_timer], 0, i) if n.verl_timer in VERL_INDEX else None for i, n in enumerate(nodes)]
    keys: list[tuple[int, int, int] | None] = list(static)
    heap: list[tuple[tuple[int, int, int], int]] = []
    order: list[int] = []
    while sorter.is_active():
        for i in sorter.get_ready():
            if keys[i] is None:
                keys[i] = _after_producers(nodes[i], i, keys, static, producer)
            heapq.heappush(heap, (keys[i], i))
        _, i = heapq.heappop(heap)
        order.append(i)
        sorter.done(i)
    return order


def _after_producers(
    node: FlowNode, i: int, keys: list, static: list, producer: dict[str, int]
) -> tuple[int, int, int]:
    """Key of a stage without a verl timer: right after the last of its producers.

    Data producers have run (their keys are set); a state-field producer counts by its verl
    position only, so a stage reading ``actor_weights`` lands after the update.
    """
    last = _SOURCE_KEY
    for name in node.reads:
        p = producer.get(name)
        if p is None or p == i:
            continue
        key = static[p] if name in STATE_FIELDS else keys[p]
        if key is not None and key > last:
            last = key
    return (last[0], last[1] + 1, i)


def _placeable(preds: list[set[int]]) -> set[int]:
    """The stages no cycle holds back: those whose predecessors are all placeable."""
    done: set[int] = set()
    while grown := {i for i, ps in enumerate(preds) if i not in done and ps <= done}:
        done |= grown
    return done


def _cycles(nodes: Sequence[FlowNode], preds: list[set[int]], done: set[int]) -> list[Problem]:
    """One problem per cycle among the stages the sort could not place.

    Every unplaced stage has an unplaced predecessor, so walking predecessors from one must
    come back to a stage already on the walk: that loop is a cycle.
    """
    problems: list[Problem] = []
    seen: set[int] = set()
    for start in range(len(nodes)):
        if start in done or start in seen:
            continue
        walk: list[int] = []
        on_walk: dict[int, int] = {}
        i = start
        while i not in on_walk and i not in seen:
            on_walk[i] = len(walk)
            walk.append(i)
            i = min(p for p in preds[i] if p not in done)
        seen.update(walk)
        if i in on_walk:
            problems.append(_cycle_problem(nodes, walk[on_walk[i] :][::-1]))
    return problems


def _cycle_problem(nodes: Sequence[FlowNode], cycle: list[int]) -> Problem:
    """``cycle`` lists stages so that each feeds the next and the last feeds the first."""
    first = cycle.index(min(cycle))
    cycle = cycle[first:] + cycle[:first]  # start at the stage declared first: stable messages
    links = []
    for a, b in zip(cycle, cycle[1:] + cycle[:1]):
        fields = [f for f in nodes[b].reads if f in nodes[a].writes and f not in STATE_FIELDS]
        links.append(f"'{nodes[b].name}' reads {', '.join(repr(f) for f in fields)} from '{nodes[a].name}'")
    names = " -> ".join(nodes[i].name for i in cycle + cycle[:1])
    return (nodes[cycle[0]].path, f"stages form a cycle: {names} ({'; '.join(links)}); break it by making one stage "
            "read a field produced earlier")  # fmt: skip


def data_edges(nodes: Sequence[FlowNode], order: Sequence[int], producer: dict[str, int]) -> tuple[Edge, ...]:
    """Edges grouped by (producer, consumer) in step order; the data loader feeds source fields."""
    position = {i: pos for pos, i in enumerate(order)}
    grouped: dict[tuple[str, str, bool], list[str]] = {}
    for i in order:
        node = nodes[i]
        for name in node.reads:
            p = producer.get(name)
            if p is None:
                if name in _SOURCES:
                    grouped.setdefault((DATA_SOURCE, node.name, False), []).append(name)
                continue
            loop = name in STATE_FIELDS and position[p] >= position[i]
            grouped.setdefault((nodes[p].name, node.name, loop), []).append(name)
    return tuple(Edge(src, dst, tuple(fields), loop) for (src, dst, loop), fields in grouped.items())

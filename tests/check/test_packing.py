"""The per-node placement rule: best fit, distinct nodes for a spread pool, labels, and all-or-nothing."""

from __future__ import annotations

from rlflow.check.packing import Ask, Room, place


def rooms(*cpus: float, labels: dict | None = None) -> list[Room]:
    return [Room(f"n{i}", {"CPU": c}, dict(labels or {})) for i, c in enumerate(cpus)]


def test_each_group_goes_to_the_fullest_node_that_holds_it_so_big_nodes_stay_free():
    nodes = rooms(4, 1)
    assert place([Ask("reward", {"CPU": 1}), Ask("actor", {"CPU": 4})], nodes) == []
    assert [n.placed for n in nodes] == [["actor"], ["reward"]]


def test_a_group_wider_than_every_node_does_not_fit_though_the_cpus_add_up():
    """1.5 CPUs per worker on three 1-CPU nodes: 3 CPUs in all, no node for one worker."""
    short = place([Ask("reward_pool", {"CPU": 1.5}, count=1, spread=False)], rooms(1, 1, 1))
    assert [(s.ask.pool, s.placed, s.resource) for s in short] == [("reward_pool", 0, "CPU")]


def test_a_spread_pool_needs_distinct_nodes_and_a_pool_that_does_not_fit_takes_nothing():
    nodes = rooms(2, 2)
    short = place([Ask("actor", {"CPU": 1}, count=3, spread=True)], nodes)
    assert [(s.placed, s.resource) for s in short] == [(2, None)], "no third node to spread to"
    assert [n.free["CPU"] for n in nodes] == [2, 2] and [n.placed for n in nodes] == [[], []]
    assert place([Ask("reward", {"CPU": 1}, count=4, spread=False)], nodes) == [], "per-worker groups may share"


def test_a_pinned_pool_uses_only_the_nodes_its_labels_and_resources_select():
    nodes = [
        Room("trainer", {"CPU": 4, "slot": 1}, {"role": "trainer"}),
        Room("scorer", {"CPU": 4}, {"role": "reward"}),
    ]
    assert (
        place([Ask("actor", {"CPU": 1, "slot": 1}), Ask("reward", {"CPU": 1}, 2, False, {"role": "reward"})], nodes)
        == []
    )
    assert [n.placed for n in nodes] == [["actor"], ["reward", "reward"]]
    short = place([Ask("judge", {"CPU": 1}, label_selector={"role": "judge"})], nodes)
    assert [(s.usable, s.resource) for s in short] == [((), None)], "no node has the labels"
    short = place([Ask("actor2", {"CPU": 1, "slot": 1})], nodes)
    assert [s.resource for s in short] == ["slot"], "the one node with the resource holds it already"

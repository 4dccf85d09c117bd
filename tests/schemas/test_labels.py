"""Label selectors and custom resources are checked and matched as Ray itself does (its own functions on the same
input), and a pipeline that pins a pool badly is refused with the key and the fix."""

from __future__ import annotations

import pytest
from schema_helpers import MINIMAL, problems_of

from rlflow.schemas.labels import label_key_problem, matches, resource_problem, selector_value_problem

KEYS = ["role", "ray.io/node-id", "example.com/zone", "a" * 63, "a" * 64, "-role", "role-", "bad key", "x/", "a..b/c"]
VALUES = ["reward", "!reward", "in(a,b)", "!in(a,b)", "a_b.c-d", "in(a, b)", "(a,b)", "", "in()", "!!a", "-a", "a" * 64]


@pytest.mark.parametrize("key", KEYS)
def test_label_keys_are_refused_exactly_when_ray_refuses_them(key):
    from ray._private.label_utils import validate_label_key

    assert (label_key_problem(key) is None) == (validate_label_key(key) is None)


@pytest.mark.parametrize("value", VALUES)
def test_selector_values_ray_refuses_or_reads_literally_are_refused(value):
    """Ray's syntax check lets 'in(a, b)', '(a,b)' and '' through, yet its scheduler keeps the space in ' b' and
    compares the other two literally (no node is ever labelled '(a,b)'), so those are refused here too."""
    from ray._private.label_utils import validate_label_selector_value

    ours = selector_value_problem("role", value)
    if validate_label_selector_value(value) is not None:
        assert ours is not None
    elif value in ("in(a, b)", "(a,b)", ""):
        assert ours is not None and (value != "in(a, b)" or "space after a comma" in ours)
    else:
        assert ours is None


@pytest.mark.parametrize("value", ["reward", "!reward", "in(reward,trainer)", "!in(reward,trainer)", "in(x)"])
@pytest.mark.parametrize("labels", [{}, {"role": "reward"}, {"role": "trainer"}, {"role": "other", "zone": "a"}])
def test_a_selector_matches_the_nodes_ray_schedules_on(value, labels):
    from ray._raylet import node_labels_match_selector

    assert matches({"role": value}, labels) == node_labels_match_selector(labels, {"role": value})


@pytest.mark.parametrize(
    "resources", [{"trainer_slot": 1}, {"node:10.0.0.1": 0.01}, {"CPU": 1}, {"GPU": 1}, {"slot": 0.00001}]
)
def test_custom_resources_ray_would_refuse_are_refused(resources):
    from ray._common.ray_option_utils import _validate_resources

    ray_says = _validate_resources(resources)
    ours = [resource_problem(name, amount) for name, amount in resources.items()]
    assert (ray_says is None) == (ours == [None] * len(ours)), (ray_says, ours)


@pytest.mark.parametrize(
    "pool, expected",
    [
        (
            "{type: cpu, workers: 2, label_selector: {role: 'in(reward, scoring)'}}",
            "resources.rw.label_selector: value error, label selector role: 'in(reward, scoring)' has a space",
        ),
        (
            "{type: cpu, resources: {CPU: 2}}",
            "resources.rw.resources: value error, 'CPU' is not a custom resource: CPUs are cpus_per_worker",
        ),
    ],
)
def test_a_badly_pinned_pool_is_refused_naming_the_key(pool, expected, project_dir):
    problems = problems_of(project_dir, MINIMAL.replace("rw: {type: cpu}", f"rw: {pool}"))
    assert any(expected in p for p in problems), problems

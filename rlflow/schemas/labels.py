"""Pinning a pool to nodes in Ray's terms: custom resources and node-label selectors, checked with Ray's
own rules without importing Ray. Design notes: docs/design/labels.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

# Ray's LABEL_REGEX (a DNS label), its prefix rule and its selector values (ray/_private/label_utils.py)
_LABEL = r"([a-zA-Z0-9]([a-zA-Z0-9_.-]{0,61}[a-zA-Z0-9])?)"
_PREFIX = re.compile(rf"^({_LABEL}?(\.{_LABEL}?)*)$")
_NAME = re.compile(_LABEL)
_SELECTOR = re.compile(rf"^!?in\({_LABEL}(?:,{_LABEL})*\)$|^!?{_LABEL}$")
# what Ray reserves for its own options (num_cpus, num_gpus, memory, object_store_memory)
RAY_BUILTIN_RESOURCES = ("CPU", "GPU", "memory", "object_store_memory")
RESOURCE_UNIT = 1e-4  # the smallest amount Ray accepts (1 / its RESOURCE_UNIT_SCALING)


def label_key_problem(key: str) -> str | None:
    """Why Ray would refuse ``key`` as a label key, or None."""
    prefix, _, name = key.rpartition("/")
    if "/" in key and (len(prefix) > 253 or not _PREFIX.fullmatch(prefix)):
        return f"label key {key!r}: its prefix must be DNS labels separated by dots, 253 characters at most"
    if len(name) > 63 or not _NAME.fullmatch(name):
        return (
            f"label key {key!r}: the name must be 63 characters at most, begin and end with a letter or digit, "
            "and hold only letters, digits, '-', '_' and '.'"
        )
    return None


def selector_value_problem(key: str, value: str) -> str | None:
    """Why ``value`` cannot select on label ``key`` (Ray would refuse it, or match it literally), or None."""
    if _SELECTOR.fullmatch(value):
        return None
    if ", " in value:
        return f"label selector {key}: {value!r} has a space after a comma, which Ray keeps in the value; drop it"
    return (
        f"label selector {key}: {value!r} is not one of Ray's forms 'value', '!value', 'in(a,b)' or '!in(a,b)' "
        "(each value 63 characters at most: letters, digits, '-', '_' and '.')"
    )


def resource_problem(name: str, amount: float) -> str | None:
    """Why Ray would refuse ``amount`` of custom resource ``name`` per worker, or None."""
    if name in RAY_BUILTIN_RESOURCES:
        return f"{name!r} is not a custom resource: CPUs are cpus_per_worker, GPUs come with device: gpu"
    if amount < RESOURCE_UNIT:
        return f"resource {name!r}: {amount:g} is below the smallest amount Ray reserves, 0.0001"
    return None


def matches(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """Whether a node with ``labels`` satisfies ``selector``, as Ray's scheduler decides it."""
    for key, value in selector.items():
        negated = value.startswith("!")
        body = value[1:] if negated else value
        wanted = body[3:-1].split(",") if body.startswith("in(") and body.endswith(")") else [body]
        if (labels.get(key) in wanted) == negated:
            return False
    return True


def describe_selector(selector: Mapping[str, str]) -> str:
    """``role=reward, zone=!a``: as ``ray start --labels`` writes labels."""
    return ", ".join(f"{key}={value}" for key, value in selector.items())

"""Compile a valid pipeline into a Plan (being written)."""


def dataflow_problems(spec):
    """(dotted path, message) for each data-flow error: unproduced fields, two producers, cycles."""
    return []

"""Parse functions for the judge_score tests, loaded by path (verl's compute_score signature)."""

import re
import time


def first_digit(data_source, solution_str, ground_truth, extra_info=None):
    """A well-behaved parser: the verdict's first digit / 10."""
    match = re.search(r"\d", solution_str)
    return None if match is None else int(match.group()) / 10


def raises(data_source, solution_str, ground_truth, extra_info=None):
    raise ValueError("this parser always fails")


def hangs(data_source, solution_str, ground_truth, extra_info=None):
    time.sleep(60)
    return 1.0


def returns_none(data_source, solution_str, ground_truth, extra_info=None):
    return None


def exits(data_source, solution_str, ground_truth, extra_info=None):
    raise SystemExit(3)

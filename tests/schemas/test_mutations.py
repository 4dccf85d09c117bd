"""Property tests: any mutation of the shipped bird pipeline yields a spec or a ConfigError, nothing else.

Structured mutations (delete keys, change types, insert junk keys, random text values) and raw
text mutations (characters inserted, deleted or replaced) of pipelines/bird_grpo.yaml must
only ever produce a valid pipeline or a ConfigError whose diagnostics all carry a file and a
line; never another exception.
"""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schema_helpers import BIRD, REPO

from rlflow.check import load_pipeline
from rlflow.errors import ConfigError
from rlflow.schemas.project import load_project_config

PROJECT = load_project_config(REPO)
SOURCE = BIRD.read_text()
DATA = load_pipeline(BIRD, project=PROJECT).data

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**6), 10**6), st.floats(allow_nan=False), st.text(max_size=12)
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=6,
)
text_chars = st.characters(blacklist_categories=("Cs",))


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, prefix + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _paths(value, prefix + (i,))


PATHS = [p for p in _paths(DATA) if p]


def _holds(node, key) -> bool:
    return key in node if isinstance(node, dict) else isinstance(node, list) and key in range(len(node))


def _mutate(data, draw):
    path = draw(st.sampled_from(PATHS))
    parent = data
    for key in path[:-1]:
        if not _holds(parent, key):
            return  # an earlier mutation removed this part
        parent = parent[key]
    if not _holds(parent, path[-1]):
        return
    action = draw(st.sampled_from(["delete", "retype", "junk", "text"]))
    if action == "delete":
        del parent[path[-1]]
    elif action == "retype":
        parent[path[-1]] = draw(values)
    elif action == "text":
        parent[path[-1]] = draw(st.text(max_size=20))
    elif isinstance(parent[path[-1]], dict):
        parent[path[-1]][draw(st.text(min_size=1, max_size=10))] = draw(values)


@pytest.fixture(scope="module")
def folder():
    with tempfile.TemporaryDirectory() as name:
        yield Path(name)


def _check(path: Path) -> None:
    try:
        load_pipeline(path, project=PROJECT)
    except ConfigError as exc:
        assert exc.diagnostics
        for d in exc.diagnostics:
            assert d.file == str(path) and d.line >= 1 and d.col >= 1 and d.message


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_structured_mutations_only_raise_config_errors(folder, data):
    mutated = copy.deepcopy(DATA)
    for _ in range(data.draw(st.integers(1, 4))):
        _mutate(mutated, data.draw)
    path = folder / "mutated.yaml"
    path.write_text(yaml.safe_dump(mutated, allow_unicode=True))
    _check(path)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_text_mutations_only_raise_config_errors(folder, data):
    text = SOURCE
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(text)))
        cut = data.draw(st.integers(0, 3))
        text = text[:at] + data.draw(st.text(text_chars, max_size=4)) + text[at + cut :]
    path = folder / "mutated_text.yaml"
    path.write_text(text, encoding="utf-8")
    _check(path)

"""The shared registry: a name given by import path is listed at once and imported on first lookup."""

from __future__ import annotations

import sys

import pytest

from rlflow.errors import RegistryError
from rlflow.registry import Registry

PLUGIN = """
class Thing:
    pass


class Other:
    pass
"""


@pytest.fixture
def registry(tmp_path, monkeypatch):
    (tmp_path / "lazy_things.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "lazy_things", raising=False)
    found = Registry("thing", "rlflow.test_no_such_group", "Add things through plugins.")
    found.register_lazy("thing", "lazy_things:Thing")
    yield found
    sys.modules.pop("lazy_things", None)


def test_a_lazy_name_is_known_without_importing_its_module(registry):
    assert "thing" in registry and registry.names() == ["thing"] and list(registry) == ["thing"]
    assert "lazy_things" not in sys.modules
    thing = registry.get("thing")
    assert thing.__module__ == "lazy_things" and thing.__qualname__ == "Thing"
    assert registry.get("thing") is thing and registry.names() == ["thing"]


def test_another_object_cannot_take_a_lazy_name(registry):
    class Thing:
        pass

    with pytest.raises(RegistryError, match=r"'thing' is already registered by lazy_things\.Thing; .*Thing cannot"):
        registry.register("thing", Thing)
    assert "lazy_things" not in sys.modules


def test_an_unknown_name_suggests_a_lazy_one_and_unregister_forgets_it(registry):
    with pytest.raises(RegistryError, match=r"unknown thing 'thin' \(did you mean 'thing'\?\); known: thing\."):
        registry.get("thin")
    registry.unregister("thing")
    assert "thing" not in registry and registry.names() == []

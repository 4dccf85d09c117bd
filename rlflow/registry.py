"""A small named registry shared by stage kinds and remote backends.

Plugins fill it through an entry-point group or a module named in rlflow.yaml ``plugins``; a built-in
can be named by its import path and imported on first ``get``. Design notes: docs/design/registries.md.
"""

from __future__ import annotations

import difflib
import importlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from rlflow.errors import RegistryError

T = TypeVar("T")


def did_you_mean(name: str, known: list[str] | tuple[str, ...] | set[str]) -> str:
    """' (did you mean 'x'?)' when a close match exists, else ''."""
    match = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    return f" (did you mean '{match[0]}'?)" if match else ""


class Registry(Generic[T]):
    """Name -> object, with entry-point discovery."""

    def __init__(self, what: str, entry_point_group: str, plugin_hint: str) -> None:
        self.what = what
        self.entry_point_group = entry_point_group
        self.plugin_hint = plugin_hint
        self._items: dict[str, T] = {}
        self._lazy: dict[str, str] = {}  # name -> "module:attr", imported on first get
        self._entry_points_loaded = False
        self._broken_plugins: dict[str, str] = {}

    def register(self, name: str, obj: T | None = None) -> Callable[[T], T] | T:
        """``register("x", obj)`` or ``@register("x")``."""
        if obj is None:
            return lambda o: self._add(name, o)
        return self._add(name, obj)

    def register_lazy(self, name: str, target: str) -> None:
        """Name ``target`` (``"package.module:attr"``) under ``name`` without importing it: ``get`` imports
        the module, which may register the object itself, and registers the attribute."""
        self._lazy[name] = target

    def _add(self, name: str, obj: T) -> T:
        existing = self._qualname_of(name)
        if existing is not None and self._items.get(name) is not obj and existing != _qualname(obj):
            raise RegistryError(
                f"{self.what} {name!r} is already registered by {existing}; "
                f"{_qualname(obj)} cannot take the same name (rename one of them)"
            )
        self._lazy.pop(name, None)
        self._items[name] = obj
        return obj

    def _qualname_of(self, name: str) -> str | None:
        if name in self._items:
            return _qualname(self._items[name])
        target = self._lazy.get(name)
        return None if target is None else target.replace(":", ".")

    def get(self, name: str) -> T:
        target = self._lazy.get(name)
        if target is not None:
            module, _, attr = target.partition(":")
            self._add(name, getattr(importlib.import_module(module), attr))
        if name not in self._items:
            self.load_entry_points()
        try:
            return self._items[name]
        except KeyError:
            raise RegistryError(self.unknown(name)) from None

    def unknown(self, name: str) -> str:
        """What to say of a name this registry lacks: the close match, the known names, how to add plugins."""
        names = self.names()
        known = ", ".join(names) or "none"
        broken = "".join(f"; plugin {k!r} failed to load: {v}" for k, v in self._broken_plugins.items())
        return f"unknown {self.what} {name!r}{did_you_mean(name, names)}; known: {known}. {self.plugin_hint}{broken}"

    def __contains__(self, name: object) -> bool:
        if name not in self._items and name not in self._lazy:
            self.load_entry_points()
        return name in self._items or name in self._lazy

    def names(self) -> list[str]:
        self.load_entry_points()
        return sorted({*self._items, *self._lazy})

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def unregister(self, name: str) -> None:
        """Remove a name (tests and plugin reloads)."""
        self._items.pop(name, None)
        self._lazy.pop(name, None)

    def load_entry_points(self) -> None:
        """Import every plugin of the entry-point group once; a broken plugin is remembered, not fatal."""
        if self._entry_points_loaded:
            return
        self._entry_points_loaded = True
        from importlib.metadata import entry_points  # costs tens of ms: only when a name is not known yet

        for ep in entry_points(group=self.entry_point_group):
            try:
                obj = ep.load()
            except Exception as exc:  # a broken plugin must not break every other name
                self._broken_plugins[ep.name] = f"{type(exc).__name__}: {exc}"
                continue
            if not isinstance(obj, type(importlib)):  # a module registers itself on import
                self._add(ep.name, obj)


def import_plugins(modules: list[str] | tuple[str, ...], root: str | os.PathLike | None = None) -> None:
    """Import plugin modules by dotted path (rlflow.yaml ``plugins``); they register on import.

    ``root``, the project root (the folder of rlflow.yaml), goes on ``sys.path`` first, as
    pytest's rootdir does, so a module next to rlflow.yaml imports without ``PYTHONPATH``, in
    the driver and in every worker alike. It goes at the end: an installed module of the same
    name wins over a project file.
    """
    if root is not None and modules and str(root) not in sys.path:
        sys.path.append(str(root))
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as exc:
            where = f"from the project root {root} or " if root is not None else ""
            raise RegistryError(
                f"plugin module {module!r} failed to import: {type(exc).__name__}: {exc} "
                f"(a plugin is imported {where}from an installed package: put its file or package next to "
                "rlflow.yaml, `pip install` it, or add its folder to PYTHONPATH; and check the `plugins` list "
                "in rlflow.yaml)"
            ) from exc


def _qualname(obj: object) -> str:
    target = obj if isinstance(obj, type) or callable(obj) else type(obj)
    return f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', repr(target))}"

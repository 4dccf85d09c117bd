"""Pipelines that build on other pipelines: ``base: other.yaml`` and the merge of a file over its base.

JSON Merge Patch (RFC 7386), plus ``stages:`` patched by name. Design notes: docs/design/inherit.md.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlflow.io import read_bytes
from rlflow.schemas.diagnostics import Diagnostic, format_path, parse_path, suggestion
from rlflow.schemas.safe_yaml import MAX_BYTES, Positions, decode_text, parse_yaml
from rlflow.schemas.templating import line_mapper, render

BASE_KEY = "base"
MAX_BASES = 16  # bases in one chain: each level recurses through the merge


@dataclass
class Document:
    """A pipeline file merged over its bases (``data`` is None when it could not be read)."""

    data: dict | None
    positions: Positions
    files: dict[tuple, str]  # path -> the file that wrote it, for every path in ``positions``
    rendered: str | None  # the named file after templating
    sources: list[str] = field(default_factory=list)
    problems: list[Diagnostic] = field(default_factory=list)

    def relocate(self, diagnostics: Iterable[Diagnostic], file: str) -> list[Diagnostic]:
        """Diagnostics of ``file`` moved into the file that wrote their path (a base, often)."""
        return [self._relocated(d) if d.file == file and d.path else d for d in diagnostics]

    def _relocated(self, d: Diagnostic) -> Diagnostic:
        path = parse_path(d.path)
        while path and path not in self.files:
            path = path[:-1]
        written = self.files.get(path, d.file)
        return d if written == d.file else Diagnostic(written, d.line, d.col, d.path, d.message, d.fix)


def load_document(path: Path, source: str, variables: Mapping[str, Any], file: str) -> Document:
    """Render and parse ``source`` (the text of ``path``), then merge it over its bases."""
    document, parsed = _parse(source, variables, file)
    if document.rendered is not None and document.data is None and not document.problems:
        document.problems.append(_not_a_mapping(parsed, file, document.positions.locate(())))
    if document.data is not None:
        _merge_over_base(document, path, variables, file, [path.resolve()])
    return document


def _not_a_mapping(data: Any, file: str, where: tuple[int, int]) -> Diagnostic:
    return Diagnostic(
        file, *where, "", f"the top level must be a mapping (name:, data:, stages:, ...), got {_kind(data)}"
    )


def _kind(data: Any) -> str:
    return "nothing (only comments)" if data is None else f"a {type(data).__name__}"


def _parse(source: str, variables: Mapping[str, Any], file: str) -> tuple[Document, Any]:
    rendered, problems = render(source, variables, file)
    if rendered is None:
        return Document(None, Positions(), {}, None, [source], problems), None
    data, positions, problems = parse_yaml(rendered, file, line_mapper(source, rendered))
    files = {p: file for p in (*positions.values, *positions.keys)}
    return Document(data if isinstance(data, dict) else None, positions, files, rendered, [source], problems), data


def _merge_over_base(
    document: Document, path: Path, variables: Mapping[str, Any], file: str, chain: list[Path]
) -> None:
    """Load the base named in ``document`` (when it names one) and merge ``document`` over it, in place."""
    data, positions = document.data, document.positions
    if BASE_KEY not in data:
        return None
    named = data.pop(BASE_KEY)
    where = positions.locate((BASE_KEY,))
    _forget(document, (BASE_KEY,))

    def problem(message: str, fix: str) -> None:  # at the base: line, the thing to fix
        document.problems.append(Diagnostic(file, *where, BASE_KEY, message, fix))
        document.data = None

    if not isinstance(named, str) or not named.strip():
        return problem(f"expected the path of a pipeline file, got {named!r}", "e.g. base: bird_grpo.yaml")
    base_path = path.parent / named
    base_file = os.path.normpath(base_path)
    if base_path.resolve() in chain:
        loop = " -> ".join(os.path.relpath(p) for p in [*chain, base_path.resolve()])
        return problem(f"{named!r} is already in this chain of bases: {loop}", "a pipeline cannot build on itself")
    if len(chain) > MAX_BASES:
        return problem(
            f"more than {MAX_BASES} bases in a chain, from {os.path.relpath(chain[0])}",
            "merge some of the bases into one file",
        )
    try:
        raw = read_bytes(base_path, MAX_BYTES, "base pipeline")
    except OSError as exc:
        return problem(
            f"cannot read the base pipeline {base_file}: {exc.strerror or exc}",
            f"the path is relative to the folder of {file}",
        )
    source, unreadable = decode_text(raw, base_file)
    if source is None:
        document.problems += unreadable
        document.data = None
        return None
    base, parsed = _parse(source, variables, base_file)
    if base.rendered is not None and base.data is None and not base.problems:
        base.problems.append(
            Diagnostic(
                file,
                *where,
                BASE_KEY,
                f"the base {base_file} is not a pipeline: its top level is {_kind(parsed)}, not a mapping",
                "a base is a pipeline file (name:, data:, stages:, ...)",
            )
        )
    if base.data is not None:
        _merge_over_base(base, base_path, variables, base_file, [*chain, base_path.resolve()])
    document.sources += base.sources
    document.problems += base.problems
    if base.data is None:
        document.data = None
        return None
    merge = _Merge(base, document, file)
    merge.take((), (), subtree=False)
    merge.mapping(data, (), ())
    document.data, document.positions, document.files = base.data, base.positions, base.files


class _Merge:
    """Merges the derived document ``over`` into ``base`` (in place), moving positions along."""

    def __init__(self, base: Document, over: Document, file: str) -> None:
        self.base, self.over, self.file = base, over, file

    def mapping(self, patch: dict, src: tuple, dst: tuple) -> None:
        target = _get(self.base.data, dst)
        for key, value in patch.items():
            old = target.get(key)
            if value is None:
                target.pop(key, None)
                _forget(self.base, dst + (key,))
            elif isinstance(value, dict) and isinstance(old, dict):
                self.take(src + (key,), dst + (key,), subtree=False)
                self.mapping(value, src + (key,), dst + (key,))
            elif dst == () and key == "stages" and isinstance(value, dict):
                self._patch_stages(value, old)
            else:
                target[key] = value
                _forget(self.base, dst + (key,))
                self.take(src + (key,), dst + (key,), subtree=True)

    def _patch_stages(self, patches: dict, stages: Any) -> None:
        if not isinstance(stages, list):
            where = self.over.positions.locate(("stages",), "key")
            self.over.problems.append(
                Diagnostic(
                    self.file,
                    *where,
                    "stages",
                    "a mapping under stages: patches the base's stages by name, but the base has no list of stages",
                    "write the stages as a list",
                )
            )
            return
        index = {name: stage_index(stages, name) for name in stage_names(stages)}
        self.take(("stages",), ("stages",), subtree=False)
        removed = []
        for name, patch in patches.items():
            at = ("stages", name)
            if name not in index:
                where = self.over.positions.locate(at, "key")
                known = sorted(index, key=index.get)
                fix = suggestion(name, known) or (
                    "stages in the base: " + ", ".join(known) + "; to add a stage, write the whole stages list"
                )
                self.over.problems.append(
                    Diagnostic(self.file, *where, format_path(at), f"the base has no stage named {name!r}", fix)
                )
            elif patch is None:
                removed.append(index[name])
            elif not isinstance(patch, dict):
                where = self.over.positions.locate(at)
                self.over.problems.append(
                    Diagnostic(
                        self.file,
                        *where,
                        format_path(at),
                        f"a stage patch is a mapping of the keys to change, got {patch!r}",
                        "e.g. generate: {on: arctic}; null removes the stage",
                    )
                )
            else:
                self.take(at, ("stages", index[name]), subtree=False)
                self.mapping(patch, at, ("stages", index[name]))
        for i in sorted(removed, reverse=True):
            del stages[i]
            _shift_stages(self.base, i)

    def take(self, src: tuple, dst: tuple, subtree: bool) -> None:
        """Positions of ``src`` in the derived file become those of ``dst`` (and of all below, when ``subtree``)."""
        theirs, ours = self.over.positions, self.base.positions
        for table, mine in ((theirs.values, ours.values), (theirs.keys, ours.keys)):
            for path, where in table.items():
                if path == src or (subtree and path[: len(src)] == src):
                    moved = dst + path[len(src) :]
                    mine[moved] = where
                    self.base.files[moved] = self.file


def stage_index(stages: Any, name: str) -> int | None:
    """The index of the first stage called ``name`` in a list of stage mappings, or None."""
    if isinstance(stages, list):
        for i, stage in enumerate(stages):
            if isinstance(stage, dict) and stage.get("name") == name:
                return i
    return None


def stage_names(stages: Any) -> list[str]:
    """The names of the stages in a list of stage mappings, in order."""
    if not isinstance(stages, list):
        return []
    return [s["name"] for s in stages if isinstance(s, dict) and isinstance(s.get("name"), str)]


def drop_stage(document: Document, index: int) -> None:
    """Remove stage ``index`` of the merged document, moving the positions of the stages after it."""
    del document.data["stages"][index]
    _shift_stages(document, index)


def _get(data: Any, path: tuple) -> Any:
    for key in path:
        data = data[key]
    return data


def _forget(document: Document, path: tuple) -> None:
    """Drop the positions of ``path`` and of everything below it."""
    for table in (document.positions.values, document.positions.keys, document.files):
        for stale in [p for p in table if p[: len(path)] == path]:
            del table[stale]


def _shift_stages(document: Document, removed: int) -> None:
    """Positions of the stages after ``removed`` move up one index."""
    _forget(document, ("stages", removed))
    for table in (document.positions.values, document.positions.keys, document.files):
        moved = {
            p: v
            for p, v in table.items()
            if p[:1] == ("stages",) and len(p) > 1 and isinstance(p[1], int) and p[1] > removed
        }
        for p in moved:
            del table[p]
        table.update({("stages", p[1] - 1, *p[2:]): v for p, v in moved.items()})

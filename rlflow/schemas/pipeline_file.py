"""Parse a pipeline file: read, render, parse, override, validate its schema; keep every problem.

Nothing stops at the first problem: when the whole pipeline does not parse, the sections that do are still
checked (``_partial_subject``). Design notes: docs/design/schemas.md.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from rlflow.errors import ConfigError
from rlflow.schemas.diagnostics import Diagnostic, sort_unique, suggestion
from rlflow.schemas.inherit import Document, drop_stage, load_document, stage_index, stage_names
from rlflow.schemas.overrides import (
    ConfigModelOf,
    Setting,
    apply_overrides,
    drop_settings,
    mark_set_origins,
    parse_settings,
    resolve_stage_names,
)
from rlflow.schemas.pipeline import AlgorithmSpec, CpuPool, LocalPool, Pipeline, RemotePool, StageSpec, TrainerSpec
from rlflow.schemas.project import ProjectConfig, import_project_plugins, load_project_config
from rlflow.schemas.safe_yaml import read_config
from rlflow.schemas.schema_errors import clean_loc, validation_diagnostics
from rlflow.schemas.subject import Reporter, Subject
from rlflow.schemas.templating import template_variables

_POOLS: dict[str, type[BaseModel]] = {"local": LocalPool, "cpu": CpuPool, "remote": RemotePool}


@dataclass(frozen=True)
class LoadedPipeline:
    """A valid pipeline and where it came from."""

    spec: Pipeline
    path: Path
    source: str  # the file as written
    rendered: str  # after templating
    data: dict  # parsed from ``rendered``, merged over its ``base:`` chain, after ``--set`` paths
    project: ProjectConfig
    warnings: tuple[Diagnostic, ...] = ()  # settings that are valid but do not do what they seem to

    def resolved_yaml(self) -> str:
        """The fully rendered, merged, validated pipeline as YAML (every default spelled out; no ``base``)."""
        import yaml

        return yaml.safe_dump(self.spec.model_dump(by_alias=True, mode="json"), sort_keys=False, allow_unicode=True)


@dataclass
class ParsedPipeline:
    """What parsing found: the spec when the whole file parsed, the parts that did, and the problems so far."""

    spec: Pipeline | None
    subject: Subject
    report: Reporter
    problems: list[Diagnostic]
    path: Path
    source: str
    rendered: str
    data: dict
    project: ProjectConfig
    document: Document  # the file and its bases, which know where each value was written
    overrides: list[Setting]  # the --set paths applied

    def all_problems(self) -> list[Diagnostic]:
        """The parse problems and what the report holds, a value set by ``--set`` named as such."""
        return self.problems + mark_set_origins(self.report.diagnostics, self.overrides)

    def errors(self, problems: list[Diagnostic]) -> ConfigError:
        """``problems`` (from ``all_problems``), each placed in the file (this one or a base) that wrote its value."""
        return ConfigError(sort_unique(self.document.relocate(problems, str(self.path))))

    def loaded(self) -> LoadedPipeline:
        assert self.spec is not None, "only a pipeline that parsed is loaded"
        warnings = self.document.relocate(mark_set_origins(self.report.warnings, self.overrides), str(self.path))
        return LoadedPipeline(
            self.spec, self.path, self.source, self.rendered, self.data, self.project, tuple(sort_unique(warnings))
        )


def parse_pipeline(
    path: str | os.PathLike,
    sets: Sequence[str] = (),
    project: ProjectConfig | None = None,
    config_model_of: ConfigModelOf = lambda kind: None,
    drops: Sequence[str] = (),
) -> ParsedPipeline:
    """Parse a pipeline file; ConfigError when it cannot even be read as a mapping, else every problem kept.

    ``drops``: names of stages to remove (``--drop``)."""
    path = Path(path)
    file = str(path)
    project = project if project is not None else load_project_config()
    settings, problems = parse_settings(tuple(sets or ()), file)
    problems += import_project_plugins(project)
    source = _read(path, file)
    variables = {**project.vars, **{s.path[0]: s.value for s in settings if s.is_variable}}
    document = load_document(path, source, variables, file)
    data, positions, diagnostics = document.data, document.positions, document.problems
    paths, unused = _overrides(document.sources, settings, project, file)
    problems += unused + diagnostics
    if data is None:
        raise ConfigError(sort_unique(problems))
    removals = [s for s in paths if s.is_stage_drop] + drop_settings(drops)
    problems += _drop_stages(document, removals, file)
    paths = resolve_stage_names(data, [s for s in paths if not s.is_stage_drop])
    problems += apply_overrides(data, positions, paths, Pipeline, file, config_model_of)
    report = Reporter(file, positions)
    spec = None
    try:
        spec = Pipeline.model_validate(data)
        subject = _full_subject(spec)
    except ValidationError as exc:
        report.diagnostics += _not_follow_ons(validation_diagnostics(exc, Pipeline, data, positions, file), diagnostics)
        subject = _subject_despite(data, exc)
    return ParsedPipeline(
        spec, subject, report, problems, path, source, document.rendered, data, project, document, paths
    )


def _read(path: Path, file: str) -> str:
    text, problems = read_config(path, file, "pipeline")
    if text is None:
        raise ConfigError(problems)
    if not text.strip():
        raise ConfigError(
            [
                Diagnostic(
                    file, 1, 1, "", "the file is empty", "a pipeline is a mapping with at least name, data and stages"
                )
            ]
        )
    return text


def _overrides(
    sources: list[str], settings: list[Setting], project: ProjectConfig, file: str
) -> tuple[list[Setting], list[Diagnostic]]:
    """The ``--set``s that are path overrides; a problem for a name that no template (of the file or its bases)
    uses and that is no top-level field either."""
    used = set().union(*(template_variables(source) or set() for source in sources))
    paths = [s for s in settings if not s.is_variable]
    problems = []
    for setting in (s for s in settings if s.is_variable):
        name = setting.path[0]
        if name in used or name in project.vars:
            continue
        if name in Pipeline.model_fields:
            paths.append(setting)  # not a variable of this template, but a top-level field
        else:
            known = sorted(used | set(project.vars))
            fix = suggestion(name, known) or f"its variables: {', '.join(known) or 'none'}"
            problems.append(
                Diagnostic(
                    file,
                    1,
                    1,
                    "",
                    f"{setting.label}: the pipeline has no template variable "
                    f"{name!r} (and no top-level field of that name)",
                    fix,
                )
            )
    return paths, problems


def _drop_stages(document: Document, removals: list[Setting], file: str) -> list[Diagnostic]:
    """Remove the named stages from the merged document; a problem for each name it lacks."""
    problems = []
    for setting in removals:
        name = setting.path[1]
        stages = document.data.get("stages")
        index = stage_index(stages, name)
        if index is not None:
            drop_stage(document, index)
            continue
        names = stage_names(stages)
        line, col = document.positions.locate(("stages",), "key")
        fix = suggestion(name, names) or (f"its stages: {', '.join(names)}" if names else "it has no list of stages")
        problems.append(Diagnostic(file, line, col, "stages", f"{setting.label}: no stage named {name!r}", fix))
    return problems


def _not_follow_ons(found: list[Diagnostic], earlier: list[Diagnostic]) -> list[Diagnostic]:
    """Drop schema errors at a path the YAML layer already reported (a refused tag leaves a null behind)."""
    spots = {d.path for d in earlier if d.path}
    return [d for d in found if not any(d.path == s or d.path.startswith((s + ".", s + "[")) for s in spots)]


def _full_subject(spec: Pipeline) -> Subject:
    return Subject(
        stages=list(enumerate(spec.stages)),
        resources=dict(spec.resources),
        resource_names=set(spec.resources),
        algorithm=spec.algorithm,
        trainer=spec.trainer,
        stages_complete=True,
        spec=spec,
    )


def _subject_despite(data: dict, exc: ValidationError) -> Subject:
    """What the checks can still look at: unknown keys dropped, then every section that parses."""
    cleaned = copy.deepcopy(data)
    for err in exc.errors():
        if err["type"] == "extra_forbidden":
            loc = clean_loc(tuple(err["loc"]), data)
            parent = _lookup(cleaned, loc[:-1])
            if isinstance(parent, dict):
                parent.pop(loc[-1], None)
    try:
        return _full_subject(Pipeline.model_validate(cleaned))
    except ValidationError as rest:
        return _partial_subject(cleaned, rest)


def _lookup(data: Any, path: tuple) -> Any:
    for key in path:
        data = data[key] if isinstance(data, (dict, list)) else None
    return data


def _partial_subject(data: dict, exc: ValidationError) -> Subject:
    """What parsed of a pipeline that did not parse as a whole (see the module docstring)."""
    locs = [tuple(err["loc"]) for err in exc.errors()]
    broken_top = {loc[0] for loc in locs if loc}
    broken = {loc[:2] for loc in locs if len(loc) > 1}
    raw_stages, raw_resources = data.get("stages"), data.get("resources", {})
    stages = []
    if isinstance(raw_stages, list):
        for i, raw in enumerate(raw_stages):
            if ("stages", i) not in broken:
                stages.append((i, StageSpec.model_validate(raw)))
    resources = {}
    if isinstance(raw_resources, dict):
        for name, raw in raw_resources.items():
            if ("resources", name) not in broken and isinstance(raw, dict) and raw.get("type") in _POOLS:
                resources[name] = _POOLS[raw["type"]].model_validate(raw)
    return Subject(
        stages=stages,
        resources=resources,
        resource_names=set(raw_resources) if isinstance(raw_resources, dict) else None,
        algorithm=_section(AlgorithmSpec, data, "algorithm", broken_top),
        trainer=_section(TrainerSpec, data, "trainer", broken_top),
        stages_complete="stages" not in broken_top,
    )


def _section(model: type[BaseModel], data: dict, key: str, broken_top: set) -> Any:
    return None if key in broken_top else model.model_validate(data.get(key) or {})

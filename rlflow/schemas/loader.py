"""Load a pipeline file: read, render, parse, override, validate, check; report every problem at once.

    text --render (Jinja2 sandbox)--> YAML --parse (positions kept)--> dict --apply --set paths-->
    dict --pydantic--> Pipeline --semantic checks--> LoadedPipeline   (or ConfigError with all diagnostics)

Design decisions:
- Nothing stops at the first problem. Schema errors and rule errors are reported together:
  when the whole pipeline does not parse, the sections that do parse are still checked
  (``_partial_subject``), and rules that depend on a broken section stay silent.
- Template variables come from rlflow.yaml ``vars``, then ``--set name=value``. A ``--set``
  name that the template does not use and that names a top-level field overrides that
  field; any other unused name is an error (a misspelt variable would otherwise be ignored).
- Plugins listed in rlflow.yaml are imported first, so their stage kinds and backends are
  known to the checks.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from pydantic import BaseModel, ValidationError

from rlflow.errors import ConfigError
from rlflow.schemas.checks import Reporter, Subject, run_checks
from rlflow.schemas.diagnostics import Diagnostic, sort_unique, suggestion
from rlflow.schemas.overrides import Setting, apply_overrides, mark_set_origins, parse_settings
from rlflow.schemas.pipeline import AlgorithmSpec, CpuPool, LocalPool, Pipeline, RemotePool, StageSpec, TrainerSpec
from rlflow.schemas.project import ProjectConfig, import_project_plugins, load_project_config
from rlflow.schemas.templating import line_mapper, render, template_variables
from rlflow.schemas.validation import clean_loc, validation_diagnostics
from rlflow.schemas.yaml_loader import decode_text, parse_yaml

_POOLS: dict[str, type[BaseModel]] = {"local": LocalPool, "cpu": CpuPool, "remote": RemotePool}


@dataclass(frozen=True)
class LoadedPipeline:
    """A valid pipeline and where it came from."""

    spec: Pipeline
    path: Path
    source: str  # the file as written
    rendered: str  # after templating
    data: dict  # parsed from ``rendered``, after ``--set`` paths
    project: ProjectConfig

    def resolved_yaml(self) -> str:
        """The fully rendered, validated pipeline as YAML (every default spelled out)."""
        import yaml

        return yaml.safe_dump(self.spec.model_dump(by_alias=True, mode="json"), sort_keys=False, allow_unicode=True)


def load_pipeline(
    path: str | os.PathLike, sets: Sequence[str] = (), project: ProjectConfig | None = None
) -> LoadedPipeline:
    """Load and validate a pipeline file; raises ConfigError holding every problem found."""
    path = Path(path)
    file = str(path)
    project = project if project is not None else load_project_config()
    settings, problems = parse_settings(tuple(sets or ()), file)
    problems += import_project_plugins(project)
    source = _read(path, file)
    variables, paths, unused = _variables(source, settings, project, file)
    problems += unused
    rendered, diagnostics = render(source, variables, file)
    if rendered is None:
        raise ConfigError(sort_unique(problems + diagnostics))
    data, positions, diagnostics = parse_yaml(rendered, file, line_mapper(source, rendered))
    problems += diagnostics
    if not diagnostics and not isinstance(data, dict):
        problems.append(_not_a_mapping(data, file, positions.locate(())))
    if not isinstance(data, dict):
        raise ConfigError(sort_unique(problems))
    problems += apply_overrides(data, positions, paths, Pipeline, file)
    report = Reporter(file, positions)
    spec = None
    try:
        spec = Pipeline.model_validate(data)
        subject = _full_subject(spec)
    except ValidationError as exc:
        report.diagnostics += _not_follow_ons(validation_diagnostics(exc, Pipeline, data, positions, file), diagnostics)
        subject = _subject_despite(data, exc)
    run_checks(subject, report, project)
    problems += mark_set_origins(report.diagnostics, paths)
    if problems or spec is None:
        raise ConfigError(sort_unique(problems))
    return LoadedPipeline(spec, path, source, rendered, data, project)


def _read(path: Path, file: str) -> str:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError([Diagnostic(file, 1, 1, "", f"cannot read the pipeline: {exc.strerror or exc}")]) from None
    text, problems = decode_text(raw, file)
    if text is None:
        raise ConfigError(problems)
    if not text.strip():
        raise ConfigError([Diagnostic(file, 1, 1, "", "the file is empty",
                                      "a pipeline is a mapping with at least name, data and stages")])
    return text


def _variables(
    source: str, settings: list[Setting], project: ProjectConfig, file: str
) -> tuple[dict[str, Any], list[Setting], list[Diagnostic]]:
    """Split ``--set``s into template variables and path overrides; a problem for a name that is neither."""
    variables = dict(project.vars)
    used = template_variables(source) or set()
    paths = [s for s in settings if not s.is_variable]
    problems = []
    for setting in (s for s in settings if s.is_variable):
        name = setting.path[0]
        if name in used or name in project.vars:
            variables[name] = setting.value
        elif name in Pipeline.model_fields:
            paths.append(setting)  # not a variable of this template, but a top-level field
        else:
            known = sorted(used | set(project.vars))
            fix = suggestion(name, known) or f"its variables: {', '.join(known) or 'none'}"
            problems.append(Diagnostic(file, 1, 1, "", f"--set {setting.text}: the pipeline has no template variable "
                                       f"{name!r} (and no top-level field of that name)", fix))
    return variables, paths, problems


def _not_a_mapping(data: Any, file: str, where: tuple[int, int]) -> Diagnostic:
    got = "nothing (only comments)" if data is None else f"a {type(data).__name__}"
    return Diagnostic(file, *where, "", f"the top level must be a mapping (name:, data:, stages:, ...), got {got}")


def _not_follow_ons(found: list[Diagnostic], earlier: list[Diagnostic]) -> list[Diagnostic]:
    """Drop schema errors at a path the YAML layer already reported (a refused tag leaves a null behind)."""
    spots = {d.path for d in earlier if d.path}
    return [d for d in found if not any(d.path == s or d.path.startswith((s + ".", s + "[")) for s in spots)]


def _full_subject(spec: Pipeline) -> Subject:
    return Subject(
        stages=list(enumerate(spec.stages)), resources=dict(spec.resources), resource_names=set(spec.resources),
        algorithm=spec.algorithm, trainer=spec.trainer, stages_complete=True, spec=spec,
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
        stages=stages, resources=resources,
        resource_names=set(raw_resources) if isinstance(raw_resources, dict) else None,
        algorithm=_section(AlgorithmSpec, data, "algorithm", broken_top),
        trainer=_section(TrainerSpec, data, "trainer", broken_top),
        stages_complete="stages" not in broken_top,
    )


def _section(model: type[BaseModel], data: dict, key: str, broken_top: set) -> Any:
    return None if key in broken_top else model.model_validate(data.get(key) or {})

"""``--set`` on the command line: template variables and dotted-path overrides.

``--set name=value`` sets a template variable, ``--set dotted.path=value`` one field (``--drop`` removes a
stage); a path is checked against the schema before it is applied. Design notes: docs/design/schemas.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from rlflow.schemas.diagnostics import Diagnostic, format_path, parse_path, suggestion
from rlflow.schemas.inherit import stage_index, stage_names
from rlflow.schemas.safe_yaml import Positions, parse_yaml
from rlflow.schemas.schema_errors import known_keys, walk


@dataclass(frozen=True)
class Setting:
    """One ``--set`` (or ``--drop``): its text, the name or path it sets, and the value read as YAML."""

    text: str
    path: tuple
    value: Any
    option: str = "--set"

    @property
    def label(self) -> str:
        """How the user wrote it: ``--set trainer.seed=3``, ``--drop ref_log_prob``."""
        return f"{self.option} {self.text}"

    @property
    def is_variable(self) -> bool:
        return len(self.path) == 1 and isinstance(self.path[0], str)

    @property
    def is_stage_drop(self) -> bool:
        """``stages.<name>=null``: remove the stage of that name."""
        return len(self.path) == 2 and self.path[0] == "stages" and isinstance(self.path[1], str) and self.value is None


def drop_settings(names: Sequence[str]) -> list[Setting]:
    """``--drop NAME`` options as the stage removals they mean."""
    return [Setting(name, ("stages", name), None, option="--drop") for name in dict.fromkeys(names)]


def resolve_stage_names(data: dict, settings: list[Setting]) -> list[Setting]:
    """``stages.<name>...`` paths rewritten to the stage's index (unknown names are left for the check to name)."""
    out = []
    for setting in settings:
        path = setting.path
        if len(path) > 1 and path[0] == "stages" and isinstance(path[1], str):
            index = stage_index(data.get("stages"), path[1])
            if index is not None:
                setting = replace(setting, path=("stages", index, *path[2:]))
        out.append(setting)
    return out


def parse_settings(sets: list[str] | tuple[str, ...], file: str) -> tuple[list[Setting], list[Diagnostic]]:
    settings, problems = [], []
    for text in sets:
        name, eq, raw = text.partition("=")
        name = name.strip()
        if name.startswith(("+", "~")):
            message, fix = _hydra_prefix(name, raw)
            problems.append(Diagnostic(file, 1, 1, "", f"--set {text!r}: {message}", fix))
            continue
        if not eq or not name:
            problems.append(
                Diagnostic(
                    file,
                    1,
                    1,
                    "",
                    f"--set {text!r}: expected name=value",
                    "e.g. --set bird_root=/data/bird or --set trainer.seed=3",
                )
            )
            continue
        path = parse_path(name) if "." in name or "[" in name else (name,)
        if len(path) == 1 and not name.isidentifier():
            problems.append(Diagnostic(file, 1, 1, "", f"--set {text!r}: {name!r} is not a valid variable name"))
            continue
        settings.append(Setting(text, path, _read_value(raw)))
    return settings, problems


def _hydra_prefix(name: str, raw: str) -> tuple[str, str]:
    """(problem, fix) for a Hydra override prefix: ``+key=v``, ``++key=v`` (add) or ``~key`` (delete)."""
    bare = name.lstrip("+~")
    if name.startswith("~"):
        return "Hydra's '~' deletes a key, which --set cannot", f"set {bare} to the value you want, or edit the file"
    prefix = name[: len(name) - len(name.lstrip("+"))]
    return (
        f"Hydra's {prefix!r} prefix",
        f"--set needs none: --set {bare}={raw} sets the field whether or not the file has it",
    )


def _read_value(raw: str) -> Any:
    if not raw.strip():
        return raw
    data, _, problems = parse_yaml(raw, "--set")
    return raw if problems else data


ConfigModelOf = Callable[[str], Any]  # stage kind name -> its config model, or None when unknown


def apply_overrides(
    data: dict,
    positions: Positions,
    settings: list[Setting],
    root: Any,
    file: str,
    config_model_of: ConfigModelOf = lambda kind: None,
) -> list[Diagnostic]:
    """Apply ``settings`` (paths) to ``data`` in place; a diagnostic for each path the schema rejects."""
    problems = []
    for setting in settings:
        problem = _check_path(data, setting, root, config_model_of)
        if problem is None:
            problem = _assign(data, setting.path, setting.value)
        if problem is not None:
            depth, message, fix = problem
            line, col = positions.locate(setting.path[:depth], "key")
            message = f"{setting.label}: {message}"
            problems.append(Diagnostic(file, line, col, format_path(setting.path), message, fix))
    return problems


def mark_set_origins(diagnostics: list[Diagnostic], settings: list[Setting]) -> list[Diagnostic]:
    """Prefix ``--set <text>:`` to each diagnostic at or under a path that a ``--set`` replaced (the last one wins)."""
    out = []
    for diagnostic in diagnostics:
        at = parse_path(diagnostic.path) if diagnostic.path else ()
        origin = next((s for s in reversed(settings) if at[: len(s.path)] == s.path), None)
        if origin is not None:
            diagnostic = replace(diagnostic, message=f"{origin.label}: {diagnostic.message}")
        out.append(diagnostic)
    return out


def _check_path(data: dict, setting: Setting, root: Any, config_model_of: ConfigModelOf) -> tuple[int, str, str] | None:
    """None when the setting's path is allowed, else (depth reached, message, fix)."""
    path = setting.path
    for depth in range(1, len(path) + 1):
        parent, key = path[: depth - 1], path[depth - 1]
        node = _get(data, parent)
        if isinstance(node, list) and not isinstance(key, int):
            if parent == ("stages",):
                names = stage_names(node)
                return depth - 1, f"no stage named {key!r}", suggestion(key, names) or f"stages: {', '.join(names)}"
            return depth - 1, f"{format_path(parent)} is a list; index it with a number", f"0..{len(node) - 1}"
        if walk(root, path[:depth], data) is None:
            known = known_keys(walk(root, parent, data))
            if not known:
                fix = f"set it whole: --set {'.'.join(map(str, parent))}=..."
                return depth - 1, f"{format_path(parent)} is a single value, not a mapping", fix
            fix = _verl_fix(data, setting) or suggestion(key, known) or f"known keys: {', '.join(known)}"
            return depth - 1, f"unknown key {key!r}", fix
        if isinstance(key, int) and not (isinstance(node, list) and key < len(node)):
            size = len(node) if isinstance(node, list) else 0
            return depth - 1, f"index {key} is out of range ({format_path(parent)} has {size} items)", ""
        if _is_stage_with(path, depth):
            return _check_stage_with(data, path, config_model_of)
    return None


def _verl_fix(data: dict, setting: Setting) -> str:
    """rlflow's name for a verl key, with the ``--set`` to write where there is one; '' for other keys."""
    from rlflow.schemas.verl_names import lookup  # a big table: imported for an error only

    name = lookup(setting.path)
    if name is None:
        return ""
    target = None if name.global_size else name.pipeline_path(data)
    value = setting.text.partition("=")[2]
    return name.hint() + (f"; write --set {target}={value}" if target else "")


def _is_stage_with(path: tuple, depth: int) -> bool:
    return depth == 3 and len(path) > 3 and path[0] == "stages" and path[2] == "with"


def _check_stage_with(data: dict, path: tuple, config_model_of: ConfigModelOf) -> tuple[int, str, str] | None:
    """Keys under ``stages.<i>.with`` must belong to that stage kind's config model."""
    stage = _get(data, path[:2])
    kind = stage.get("uses") if isinstance(stage, dict) else None
    model = config_model_of(kind) if isinstance(kind, str) else None
    if model is None:
        return None  # the stage's own problem is reported by the checks
    for depth in range(4, len(path) + 1):
        if walk(model, path[3:depth]) is None:
            known = known_keys(walk(model, path[3 : depth - 1])) or []
            fix = suggestion(path[depth - 1], known) or f"stage kind {kind!r} takes: {', '.join(known) or 'nothing'}"
            return depth - 1, f"unknown key {path[depth - 1]!r} for stage kind {kind!r}", fix
    return None


def _get(data: Any, path: tuple) -> Any:
    for key in path:
        if isinstance(data, dict):
            data = data.get(key)
        elif isinstance(data, list) and isinstance(key, int) and 0 <= key < len(data):
            data = data[key]
        else:
            return None
    return data


def _assign(data: dict, path: tuple, value: Any) -> tuple[int, str, str] | None:
    node: Any = data
    for depth, key in enumerate(path[:-1], start=1):
        child = node[key] if isinstance(node, list) else node.get(key)
        if child is None:
            child = node[key] = {}
        if not isinstance(child, (dict, list)):
            return depth, f"{format_path(path[:depth])} holds {child!r}, not a mapping", "set the whole value instead"
        node = child
    node[path[-1]] = value
    return None

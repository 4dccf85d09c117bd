"""Read a verl config as verl's trainer does: Hydra composes the file's ``defaults:`` and the overrides.

``read_verl_config`` gives the resolved config and the keys the user set. Design notes: docs/design/importers.md.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlflow.errors import ConfigError, Diagnostic
from rlflow.io import check_regular
from rlflow.registry import did_you_mean
from rlflow.schemas.safe_yaml import parse_yaml, read_config

SHIPPED = "ppo_trainer"  # verl's GRPO/PPO trainer config, what verl.trainer.main_ppo composes
_MISSING = object()


@dataclass(frozen=True)
class VerlConfig:
    """A composed, resolved verl config and what the user set in it."""

    source: str  # the config as named on the command line
    values: dict  # resolved, plain containers
    set_keys: dict[str, Any]  # dotted leaf key -> resolved value: an override, or a value off verl's default
    override_keys: frozenset[str]  # dotted keys the overrides name
    read_outside: tuple[str, ...] = ()  # files Hydra read outside the config's folder and verl's configs

    def get(self, key: str, default: Any = None) -> Any:
        """The resolved value at dotted ``key``, or ``default`` when the config has no such key."""
        return _at(self.values, key, default)

    def has(self, key: str) -> bool:
        return self.get(key, _MISSING) is not _MISSING

    def is_set(self, key: str) -> bool:
        """Whether the user set ``key`` (or a key under it)."""
        return key in self.set_keys or any(k.startswith(key + ".") for k in self.set_keys)


def verl_config_dir() -> Path:
    """The folder of verl's shipped trainer configs, found without importing verl."""
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError([_problem("", "verl is not installed", "pip install 'rlflow[train]'")])
    return Path(next(iter(spec.submodule_search_locations))) / "trainer" / "config"


def locate(config: str) -> Path:
    """A config file, or the name of a config verl ships (``ppo_trainer``, ``ppo_trainer.yaml``)."""
    path = Path(os.path.expanduser(config))
    if path.exists():
        try:
            check_regular(path)
        except OSError as exc:
            raise ConfigError([_problem("", f"{config}: {exc.strerror or exc}", "give a verl config file")]) from None
        return path.resolve()
    shipped = verl_config_dir() / (config if config.endswith(".yaml") else f"{config}.yaml")
    if "/" not in config and shipped.is_file():
        return shipped
    names = sorted(p.stem for p in verl_config_dir().glob("*.yaml") if not p.stem.startswith("_"))
    raise ConfigError(
        [
            _problem(
                "",
                f"no verl config file at {config!r}",
                f"give a config file, or the name of one verl ships: {', '.join(names)}",
            )
        ]
    )


def read_verl_config(config: str, overrides: Sequence[str] = ()) -> VerlConfig:
    """Compose ``config`` with ``overrides`` as verl does; ConfigError naming every malformed override."""
    from omegaconf import OmegaConf

    path = locate(config)
    parsed = _parse_overrides(overrides)
    outside: list[str] = []
    composed = _compose(path, list(overrides), parsed, outside)
    values = _resolve(composed)
    leaves, default_leaves = _flatten(OmegaConf.to_container(composed, resolve=False)), _shipped_leaves()
    resolved = _flatten(values)
    set_keys = {k: resolved.get(k) for k, v in leaves.items() if default_leaves.get(k, _MISSING) != v}
    keys = set()
    for override in parsed:
        key = override.key_or_group
        value = _at(values, key, _MISSING)
        if override.is_delete() or override.package is not None or value is _MISSING:
            continue
        if isinstance(value, dict) and not isinstance(override.value(), dict):
            continue  # a config-group choice (data=legacy_data): the diff above shows what it changed
        keys.add(key)
        set_keys.update(_flatten(value, key))
    return VerlConfig(config, values, dict(sorted(set_keys.items())), frozenset(keys), tuple(outside))


@functools.cache
def _shipped_leaves() -> dict[str, Any]:
    """verl's shipped config, unresolved, as dotted leaves (what "set" is measured against)."""
    from omegaconf import OmegaConf

    return _flatten(OmegaConf.to_container(_compose(verl_config_dir() / f"{SHIPPED}.yaml", [], []), resolve=False))


def _parse_overrides(overrides: Sequence[str]) -> list:
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    parser = OverridesParser.create()
    parsed, problems = [], []
    for text in overrides:
        try:
            parsed += parser.parse_overrides([text])
        except OverrideParseException as exc:
            reason = _first_reason(str(exc))
            problems.append(
                _problem(
                    "",
                    f"override {text!r} is malformed: {reason}",
                    'write key=value as verl\'s scripts do; quote a list for the shell: key=\'["a","b"]\'',
                )
            )
    if problems:
        raise ConfigError(problems)
    return parsed


def _first_reason(message: str) -> str:
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith(("Error parsing override", "See https://"))]
    return lines[0] if lines else message.strip()


def _search_path(path: Path) -> str:
    """``hydra.searchpath=[...]``: the file's own entries that exist, then verl's config folder."""
    text, _ = read_config(path, str(path), "verl config")  # a problem here, Hydra's read of the file words
    data = parse_yaml(text, str(path))[0] if text is not None else None
    hydra = data.get("hydra") if isinstance(data, dict) else None
    own = hydra.get("searchpath") if isinstance(hydra, dict) else None
    own = own if isinstance(own, list) else []
    keep = [p for p in own if isinstance(p, str) and not (p.startswith("file://") and not Path(p[7:]).exists())]
    entries = [*keep, f"file://{verl_config_dir()}"]
    return "hydra.searchpath=[" + ",".join(f"'{e}'" for e in entries) + "]"


def _compose(path: Path, overrides: list[str], parsed: list, outside: list[str] | None = None):
    """``path`` composed with ``overrides``, every file read bounded; ``outside`` gets the files read from
    outside the config's folder and verl's configs (a ``hydra.searchpath`` entry or a group override)."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from rlflow.importers.hydra_files import bounded_sources

    search = [] if any(o.key_or_group == "hydra.searchpath" for o in parsed) else [_search_path(path)]
    problems: list[Diagnostic] = []
    kept = list(zip(overrides, parsed))
    while True:  # Hydra stops at the first unknown key: leave it out and go on, to name them all at once
        try:
            with warnings.catch_warnings(), bounded_sources([path.parent, verl_config_dir()]) as read_outside:
                warnings.simplefilter("ignore")  # Hydra warns about search-path entries it cannot find
                with initialize_config_dir(config_dir=str(path.parent), version_base=None):
                    composed = compose(config_name=path.stem, overrides=[*(o for o, _ in kept), *search])
        except (HydraException, OmegaConfBaseException) as exc:
            problems.append(_composition_problem(path, exc, parsed))
            unknown = _unknown_key(exc)
            left = [(o, p) for o, p in kept if p.key_or_group != unknown]
            if unknown is None or len(left) == len(kept):
                raise ConfigError(problems) from None
            kept = left
            continue
        if problems:
            raise ConfigError(problems)
        if outside is not None:
            outside += read_outside
        return composed


def _unknown_key(exc: Exception) -> str | None:
    """The key of an override Hydra refused because the config has no such key."""
    match = re.match(r"Could not override '([^']+)'", str(exc))
    return match.group(1) if match else None


def _composition_problem(path: Path, exc: Exception, parsed: list) -> Diagnostic:
    message = str(exc)
    key = _unknown_key(exc)
    if key is not None:
        text = next((o.input_line for o in parsed if o.key_or_group == key), key)
        parent, _, leaf = key.rpartition(".")
        known = _keys_at(path, parent)
        hint = did_you_mean(leaf, known).strip()
        fix = f"{hint[1:-1]} Or " if hint else ""
        return _problem("", f"override {text!r}: the verl config has no key {key!r}", f"{fix}add it with +{text}")
    reason = message.split("\nConfig search path", 1)[0]
    return _problem("", f"{path.name}: {' '.join(reason.split())}", "check the config file and the overrides")


def _keys_at(path: Path, parent: str) -> list[str]:
    """The keys under ``parent`` in ``path`` composed without overrides (for did-you-mean)."""
    try:
        values = _resolve(_compose(path, [], []))
    except ConfigError:
        return []
    node = _at(values, parent) if parent else values
    return sorted(node) if isinstance(node, dict) else []


def _resolve(config) -> dict:
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        return OmegaConf.to_container(config, resolve=True)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", "") or ""
        reason = str(exc).splitlines()[0]
        raise ConfigError([_problem(key, f"cannot resolve: {reason}", "fix the interpolation")]) from None


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted leaf keys -> values; lists and empty mappings are leaves."""
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for key, child in value.items():
            out.update(_flatten(child, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value} if prefix else {}


def _at(values: Any, key: str, default: Any = None) -> Any:
    """The value at dotted ``key`` of nested mappings, or ``default``."""
    for part in key.split("."):
        if not isinstance(values, dict) or part not in values:
            return default
        values = values[part]
    return values


def _problem(path: str, message: str, fix: str = "") -> Diagnostic:
    return Diagnostic("", 0, 0, path, message, fix)

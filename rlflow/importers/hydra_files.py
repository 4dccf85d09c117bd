"""The files Hydra composes for a verl config, read through rlflow's bounded reader.

While ``bounded_sources`` is active, Hydra's ``file://`` source reads through ``rlflow.io`` and counts aliases
first. Design notes: docs/design/importers.md.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from hydra._internal.core_plugins.file_config_source import FileConfigSource
from hydra._internal.sources_registry import SourcesRegistry
from hydra.core.plugins import Plugins
from hydra.plugins.config_source import ConfigLoadError, ConfigResult, ConfigSource
from omegaconf import OmegaConf

from rlflow.errors import ConfigError
from rlflow.schemas.safe_yaml import check_aliases, read_config

# verl's composed ppo_trainer has about 3,000 nodes; one file of it a few hundred
MAX_NODES = 100_000


class _BoundedFileConfigSource(FileConfigSource):
    allowed: tuple[Path, ...] = ()
    outside: list[str] = []

    def is_config(self, config_path: str) -> bool:
        """Any entry but a folder: a FIFO or a device of a config's name is then refused by name, not skipped."""
        full_path = os.path.realpath(os.path.join(self.path, self._normalize_file_name(config_path)))
        return os.path.lexists(full_path) and not os.path.isdir(full_path)

    def load_config(self, config_path: str) -> ConfigResult:
        named = os.path.normpath(os.path.join(self.path, self._normalize_file_name(config_path)))
        full_path = os.path.realpath(named)
        if not os.path.lexists(full_path):
            raise ConfigLoadError(f"Config not found : {full_path}")
        text, problems = read_config(named, named, "verl config")
        problem = check_aliases(text, named, MAX_NODES) if text is not None else None
        if text is None or problem is not None:
            raise ConfigError(problems if text is None else [problem])
        if not any(Path(full_path).is_relative_to(root) for root in self.allowed) and full_path not in self.outside:
            self.outside.append(full_path)
        return ConfigResult(
            config=OmegaConf.load(io.StringIO(text)),
            path=f"{self.scheme()}://{self.path}",
            provider=self.provider,
            header=ConfigSource._get_header_dict(text[:512]),
        )


@contextmanager
def bounded_sources(allowed: Sequence[Path]) -> Iterator[list[str]]:
    """Within the block Hydra reads ``file://`` configs bounded; yields the list of files read outside ``allowed``."""
    Plugins.instance()  # registers Hydra's own sources first, so the swap below is what it keeps
    registry = SourcesRegistry.instance().types
    original = registry["file"]
    _BoundedFileConfigSource.allowed = tuple(Path(os.path.realpath(p)) for p in allowed)
    _BoundedFileConfigSource.outside = []
    registry["file"] = _BoundedFileConfigSource
    try:
        yield _BoundedFileConfigSource.outside
    finally:
        registry["file"] = original

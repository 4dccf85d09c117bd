"""Hydra reads verl configs through rlflow's bounded reader only inside ``bounded_sources``, and names the files
it read outside the folders allowed."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from hydra._internal.sources_registry import SourcesRegistry
from hydra.core.plugins import Plugins

from rlflow.errors import ConfigError
from rlflow.importers.hydra_files import bounded_sources


def _compose(folder, name: str, overrides=()):
    with initialize_config_dir(config_dir=str(folder), version_base=None):
        return compose(config_name=name, overrides=list(overrides))


def test_inside_the_block_files_are_bounded_and_outside_reads_recorded(tmp_path):
    own, other = tmp_path / "own", tmp_path / "other"
    (other / "extra").mkdir(parents=True)
    own.mkdir()
    (own / "main.yaml").write_text("defaults:\n  - extra: far\n  - _self_\nx: 1\n")
    (other / "extra" / "far.yaml").write_text("y: 2\n")
    Plugins.instance()  # Hydra registers its sources on first use
    before = SourcesRegistry.instance().types["file"]
    with bounded_sources([own]) as outside:
        config = _compose(own, "main", [f"hydra.searchpath=[file://{other}]"])
        assert SourcesRegistry.instance().types["file"] is not before
    assert SourcesRegistry.instance().types["file"] is before, "Hydra's own source is back after the block"
    assert config.x == 1 and config.extra.y == 2
    assert outside == [str((other / "extra" / "far.yaml").resolve())]


def test_an_alias_bomb_in_a_composed_file_is_refused_before_omegaconf_builds_it(tmp_path):
    lines = ["a0: &a0 [x,x,x,x,x,x,x,x,x,x]"]
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 10)]
    (tmp_path / "main.yaml").write_text("\n".join(lines) + "\n")
    with bounded_sources([tmp_path]), pytest.raises(ConfigError, match="alias bomb"):
        _compose(tmp_path, "main")

"""The corpus of broken pipelines (tests/schemas/broken): each must fail with the right line and message.

Every file says what it expects in its header (``# expect: LINE:text``; see conftest.read_case);
``empty.yaml`` cannot, so its expectation lives in ``NO_HEADER`` below. Most cases run
in-process; a handful go through the real CLI in a subprocess.
"""

from __future__ import annotations

import pytest
from schema_helpers import BROKEN, read_case, run_cli, write_project

from rlflow.check import load_pipeline
from rlflow.errors import ConfigError
from rlflow.schemas.project import load_project_config

NO_HEADER = {"empty.yaml": [(1, "the file is empty")]}
CASES = sorted(BROKEN.glob("*.yaml"))
CLI_CASES = [
    "python_tag_os_system",
    "sandbox_escape_os_system",
    "alias_bomb",
    "binary_garbage",
    "bad_set_path",
    "inventory_gpu_shortfall",
    "empty",
    "template_line_shift",
    "base_unknown_stage",
    "critic_missing_stages",
    "critic_all_at_once",
]


def _expectations(path):
    case = read_case(path)
    case["expect"] = case["expect"] or NO_HEADER.get(path.name, [])
    return case


def test_corpus_is_large_and_every_file_says_what_it_expects():
    assert len(CASES) >= 30
    for path in CASES:
        assert _expectations(path)["expect"], f"{path.name} has no expectation"


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_broken_pipeline_reports_line_and_message(path, tmp_path, monkeypatch):
    case = _expectations(path)
    write_project(tmp_path, case["project"])
    monkeypatch.chdir(tmp_path)
    before = sorted(tmp_path.iterdir())
    with pytest.raises(ConfigError) as info:
        load_pipeline(path, case["set"], load_project_config(tmp_path), check_paths=False)  # no data here
    diagnostics = info.value.diagnostics
    assert diagnostics
    for d in diagnostics:
        assert d.file == str(path) and d.line >= 1 and d.col >= 1, d
    for line, text in case["expect"]:
        assert any(d.line == line and text in str(d) for d in diagnostics), (
            f"expected line {line}: {text!r}; got:\n" + "\n".join(map(str, diagnostics))
        )
    assert sorted(tmp_path.iterdir()) == before, "validation must not execute anything"


@pytest.mark.parametrize("stem", CLI_CASES)
def test_broken_pipeline_through_the_cli(stem, tmp_path):
    path = BROKEN / f"{stem}.yaml"
    case = _expectations(path)
    write_project(tmp_path, case["project"])
    sets = [arg for s in case["set"] for arg in ("--set", s)]
    result = run_cli("validate", str(path), *sets, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    for line, text in case["expect"]:
        assert f"{path}:{line}:" in result.stderr and text in result.stderr, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rlflow.yaml"], "validation must not execute anything"

"""Hydra-style ``key=value`` where ``validate``, ``run`` and ``graph`` take a pipeline file: one line naming --set."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlflow.cli.app import app
from rlflow.cli.positional_overrides import override_error
from rlflow.cli.validate_report import fast_path

REPO = Path(__file__).resolve().parents[2]
BIRD = "pipelines/bird_grpo.yaml"
EXPECTED = (
    "error: 'trainer.total_steps=2' is a Hydra-style override, not a pipeline file: "
    "did you mean --set trainer.total_steps=2?\n"
)


@pytest.mark.parametrize(
    "args, expected",
    [
        (["trainer.total_steps=2"], "did you mean --set trainer.total_steps=2?"),
        (["+trainer.seed=3"], "did you mean --set trainer.seed=3?"),
        (["++trainer.seed=3"], "did you mean --set trainer.seed=3?"),
        (["stages[0].with.temperature=0.7"], "did you mean --set stages[0].with.temperature=0.7?"),
        (["trainer.logger=[console,wandb]"], "did you mean --set trainer.logger=[console,wandb]?"),
        (["~trainer.seed"], "is a Hydra-style deletion, not a pipeline file: --set cannot delete a key; edit the file"),
    ],
)
def test_an_override_is_named_as_such(args, expected):
    assert expected in override_error(["p.yaml", *args])


def test_files_are_not_overrides(tmp_path):
    odd = tmp_path / "a=b.yaml"
    odd.write_text("")
    assert override_error([BIRD, str(odd), "missing.yaml", "pipelines/x.yaml", "~/p.yaml"]) is None


def test_validate_fast_path_and_typer_answer_alike(capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    code = fast_path(["validate", BIRD, "trainer.total_steps=2"])
    fast = capsys.readouterr()
    assert (code, fast.out, fast.err) == (2, "", EXPECTED)
    full = CliRunner().invoke(app, ["validate", BIRD, "trainer.total_steps=2"])
    assert (full.exit_code, full.output) == (2, EXPECTED)


@pytest.mark.parametrize("command", ["run", "graph"])
def test_run_and_graph_answer_the_same(command, monkeypatch):
    monkeypatch.chdir(REPO)
    for args in ([command, BIRD, "trainer.total_steps=2"], [command, "trainer.total_steps=2"]):
        result = CliRunner().invoke(app, args)
        assert (result.exit_code, result.output) == (2, EXPECTED), args


def test_another_extra_argument_is_still_a_usage_error(monkeypatch):
    monkeypatch.chdir(REPO)
    result = CliRunner().invoke(app, ["graph", BIRD, "extra"])
    assert result.exit_code == 2 and "Got unexpected extra argument (extra)" in result.output


def test_the_answer_costs_no_typer_and_no_torch():
    code = (
        "import sys; sys.argv = ['rlflow', 'validate', 'pipelines/bird_grpo.yaml', 'trainer.total_steps=2']\n"
        "from rlflow.cli.main import main\ntry:\n    main()\nexcept SystemExit as exc:\n    print(exc.code)\n"
        "print(sorted(m for m in ('typer', 'click', 'torch', 'ray') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.stdout.splitlines() == ["2", "[]"], result.stdout + result.stderr
    assert result.stderr == EXPECTED

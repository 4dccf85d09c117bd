"""What every command shares: --version/-V, -h as well as --help, shell completion, the commands listed."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from cli_helpers import REPO, rlflow

from rlflow import __version__
from rlflow.cli.app import COMMAND_MODULES


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version(flag):
    result = rlflow(flag, timeout=120)
    assert (result.returncode, result.stdout) == (0, f"rlflow {__version__}\n")


def test_help_lists_every_command_init_and_export_included():
    result = rlflow("-h", timeout=120)
    assert result.returncode == 0 and result.stdout.lstrip().startswith("Usage: rlflow [OPTIONS] COMMAND")
    listed = {line.split()[1] for line in result.stdout.splitlines() if line.startswith("│ ") and len(line.split()) > 2}
    assert {name.replace("_", "-") for name in COMMAND_MODULES} <= listed, listed
    assert "--install-completion" in result.stdout


@pytest.mark.parametrize(
    "command",
    [[name.replace("_", "-")] for name in COMMAND_MODULES] + [["backend", "serve"], ["backend", "list"]],
    ids=str,
)
def test_every_command_takes_h_as_help(command):
    short, long = rlflow(*command, "-h", timeout=120), rlflow(*command, "--help", timeout=120)
    assert short.returncode == 0 and "Usage: rlflow " + " ".join(command) in short.stdout
    assert short.stdout == long.stdout


def test_shell_completion_completes_commands_and_options():
    def complete(words: str) -> list[str]:
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "_RLFLOW_COMPLETE": "complete_bash",
            "COMP_WORDS": words,
            "COMP_CWORD": str(len(words.split()) - 1),
        }
        result = subprocess.run(
            [sys.executable, "-m", "rlflow.cli.main"], env=env, capture_output=True, text=True, timeout=120
        )
        return result.stdout.split()

    assert complete("rlflow exp") == ["export"]
    assert complete("rlflow run pipelines/x.yaml --si") == ["--sink"]
    script = subprocess.run(  # what `rlflow --install-completion` writes for bash, whatever shell runs the test
        [sys.executable, "-m", "rlflow.cli.main"],
        env={**os.environ, "PYTHONPATH": str(REPO), "_RLFLOW_COMPLETE": "source_bash"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "_rlflow_completion" in script.stdout, script.stderr

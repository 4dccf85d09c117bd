"""The package's layering holds, and cannot rot silently.

The contracts live in pyproject.toml (``[tool.importlinter]``) and are checked with
import-linter over every import, including those inside functions. A copy of the package
with one forbidden import added must fail the same check, so the check is known to bite.
Stages are found by role: no stage kind's name appears in the runtime or the plan. A trainer mode
reaches the step loop only through the methods the loop names for modes.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import rlflow
from rlflow.stages import STAGE_KINDS

REPO = Path(__file__).resolve().parents[1]
LINT = shutil.which("lint-imports", path=str(Path(os.sys.executable).parent))


def lint(root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [LINT, "--config", str(root / "pyproject.toml"), "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_layers_hold():
    result = lint(REPO)
    assert result.returncode == 0, result.stdout + result.stderr


NOT_LAYERED = {"assets"}  # the starter project's files and their paths: data, imported by any layer


def test_every_package_is_placed_in_the_layers_and_named_in_the_package_docstring():
    """A new package (``rlflow.sandbox``, say) is stated in the layers contract and in rlflow/__init__.py's list."""
    contract = re.search(r"^layers = \[(.*?)^\]", (REPO / "pyproject.toml").read_text(), re.M | re.S)
    layers = re.findall(r'"([^"]+)"', contract.group(1))
    layered = {name.strip().removeprefix("rlflow.") for layer in layers for name in layer.split("|")}
    packages = {path.parent.name for path in (REPO / "rlflow").glob("*/__init__.py")} - NOT_LAYERED
    assert packages <= layered, f"not in the layers contract: {sorted(packages - layered)}"
    unnamed = sorted(name for name in packages if f"``{name}``" not in rlflow.__doc__)
    assert not unnamed, f"not in rlflow/__init__.py's list of layers: {unnamed}"
    assert layers.index("rlflow.reward") < layers.index("rlflow.sandbox") < layers.index("rlflow.schemas")


@pytest.mark.parametrize(
    ("module", "forbidden"),
    [
        ("schemas/pipeline.py", "from rlflow.runtime import step_loop"),  # a pure layer reaching up
        ("backends/local/models.py", "from rlflow.stages import generate"),  # a backend knowing stage kinds
        ("plan/model.py", "import torch"),  # the plan importing torch
    ],
)
def test_a_forbidden_import_breaks_the_check(tmp_path, module, forbidden):
    shutil.copytree(REPO / "rlflow", tmp_path / "rlflow", ignore=shutil.ignore_patterns("__pycache__", "assets"))
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    target = tmp_path / "rlflow" / module
    target.write_text(target.read_text() + f"\n\ndef _reach():\n    {forbidden}\n")
    result = lint(tmp_path)
    assert result.returncode != 0 and "BROKEN" in result.stdout, result.stdout + result.stderr


def test_no_stage_kind_name_in_the_runtime_or_the_plan():
    names = STAGE_KINDS.names()
    pattern = re.compile(r"""["'](""" + "|".join(map(re.escape, names)) + r""")["']""")
    found = [
        f"{path.relative_to(REPO)}:{n}: {line.strip()}"
        for package in ("runtime", "plan")
        for path in sorted((REPO / "rlflow" / package).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert not found, "stages are found by role, not by kind name:\n" + "\n".join(found)


def loop_uses(path: Path) -> set[tuple[str, ...]]:
    """The ``loop.<name>[.<attr>]`` chains a module reads, from ``self.loop`` or a ``loop`` parameter."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Attribute):
            continue
        chain, value = [node.attr], node.value
        while isinstance(value, ast.Attribute):
            chain.insert(0, value.attr)
            value = value.value
        if isinstance(value, ast.Name) and value.id == "self" and chain[0] == "loop" and len(chain) > 1:
            found.add(tuple(chain[1:3]))
        elif isinstance(value, ast.Name) and value.id == "loop":
            found.add(tuple(chain[:2]))
    return found


def test_the_trainer_modes_reach_the_loop_only_through_its_methods_for_modes():
    from rlflow.runtime.step_loop import StepLoop

    for name in StepLoop.FOR_MODES:  # each exists: a renamed method cannot leave the list behind
        assert hasattr(StepLoop, name) or name in StepLoop.__init__.__code__.co_names, name
    for path in sorted((REPO / "rlflow" / "runtime" / "modes").glob("*.py")):
        for chain in loop_uses(path):
            assert chain[0] in StepLoop.FOR_MODES, f"{path.name} reaches loop.{'.'.join(chain)}"
            assert len(chain) == 1 or chain[0] == "plan", f"{path.name} reaches into loop.{'.'.join(chain)}"

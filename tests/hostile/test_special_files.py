"""Special files and alias bombs in every file the CLI reads, through the real CLI in a subprocess.

A FIFO nobody writes, ``/dev/zero``, a folder or a socket where a pipeline, a ``base:``, rlflow.yaml,
a data file, a tool file, the agent's prompt template or a verl config (or a file Hydra composes
for one) is expected: each is refused at once with one line naming it, exit 2. A ten-level alias
bomb (10^10 nodes expanded) in each YAML reader is refused in a second, where constructing it would
take gigabytes.
"""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

import pytest
from test_hostile_inputs import PIPELINE, REPO, assert_refused, rlflow, sandbox  # noqa: F401 - sandbox: a fixture


def alias_bomb(levels: int = 10) -> str:
    lines = ["a0: &a0 [x,x,x,x,x,x,x,x,x,x]"]
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def make_special(path: Path, kind: str) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        path.symlink_to("/dev/zero")
    elif kind == "folder":
        path.mkdir()
    else:
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(path))  # the socket file stays after the test's process drops it
        server.close()


KINDS = {"fifo": "FIFO", "device": "character device", "folder": "folder", "socket": "socket"}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_special_file_as_pipeline_is_refused_at_once(sandbox, kind):  # noqa: F811
    make_special(sandbox / "p.yaml", kind)
    result = rlflow(sandbox, "validate", "p.yaml", timeout=60)
    assert_refused(result, "p.yaml:1:1: cannot read the pipeline:", KINDS[kind])


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_special_file_as_base_or_project_file_is_refused(sandbox, kind):  # noqa: F811
    make_special(sandbox / "base.yaml", kind)
    (sandbox / "p.yaml").write_text("base: base.yaml\nname: x\n")
    assert_refused(rlflow(sandbox, "validate", "p.yaml", timeout=60), "cannot read the base pipeline", KINDS[kind])

    (sandbox / "p.yaml").write_text(PIPELINE)
    (sandbox / "rlflow.yaml").unlink()
    make_special(sandbox / "rlflow.yaml", kind)
    assert_refused(rlflow(sandbox, "validate", "p.yaml", timeout=60), "rlflow.yaml:1:1: cannot read", KINDS[kind])


def test_a_fifo_as_data_file_is_refused_by_validate_and_run(sandbox):  # noqa: F811
    os.mkfifo(sandbox / "data" / "pipe.json")
    (sandbox / "p.yaml").write_text(PIPELINE)
    for command in ("validate", "run"):
        result = rlflow(sandbox, command, "p.yaml", "--set", "data.train=data/pipe.json", timeout=120)
        assert_refused(result, "pipe.json is a FIFO (named pipe), not a regular file")


MULTI_TURN = "stages.generate.with.multi_turn"


@pytest.mark.parametrize("field", ["tool_config_path", "function_tool_path", "prompt_template"])
def test_a_fifo_as_a_tool_file_or_the_agents_template_is_refused_by_validate_and_run(sandbox, field):  # noqa: F811
    os.mkfifo(sandbox / "pipe")
    shutil.copy(REPO / "pipelines" / "tools" / "bird_sql.yaml", sandbox / "tools.yaml")
    (sandbox / "p.yaml").write_text(PIPELINE)
    sets = [f"{MULTI_TURN}.enable=true", f"{MULTI_TURN}.tool_config_path=tools.yaml"]
    sets += [f"{MULTI_TURN}.{field}=pipe"] if field != "prompt_template" else ["data.prompt_template=pipe"]
    for command in ("validate", "run"):
        result = rlflow(sandbox, command, "p.yaml", *[a for s in sets for a in ("--set", s)], timeout=120)
        assert_refused(result, "pipe", "a FIFO (named pipe), not a regular file")


def test_alias_bombs_in_a_base_and_in_rlflow_yaml_are_refused(sandbox):  # noqa: F811
    (sandbox / "base.yaml").write_text(alias_bomb())
    (sandbox / "p.yaml").write_text("base: base.yaml\nname: x\n")
    assert_refused(rlflow(sandbox, "validate", "p.yaml", timeout=60), "base.yaml:", "alias bomb")
    (sandbox / "rlflow.yaml").write_text(alias_bomb())
    (sandbox / "p.yaml").write_text(PIPELINE)
    assert_refused(rlflow(sandbox, "validate", "p.yaml", timeout=60), "rlflow.yaml:", "alias bomb")


VERL_MAIN = "defaults:\n  - ppo_trainer\n  - _self_\nalgorithm:\n  adv_estimator: grpo\n"


@pytest.mark.parametrize("where", ["main", "group"])
def test_import_verl_refuses_an_alias_bomb_in_any_file_hydra_composes(sandbox, where):  # noqa: F811
    config = sandbox / "verl"
    (config / "data").mkdir(parents=True)
    if where == "main":
        (config / "main.yaml").write_text(VERL_MAIN + alias_bomb())
        args = ["import-verl", "verl/main.yaml"]
    else:
        (config / "main.yaml").write_text(VERL_MAIN)
        (config / "data" / "bomb.yaml").write_text(alias_bomb())
        args = ["import-verl", "verl/main.yaml", "data=bomb"]
    result = rlflow(sandbox, *args, timeout=120)
    name = "main.yaml" if where == "main" else "data/bomb.yaml"
    assert_refused(result, name, "more than 100000 nodes (alias bomb?)")


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_import_verl_refuses_special_files_as_config_or_group_file(sandbox, kind):  # noqa: F811
    make_special(sandbox / "special.yaml", kind)
    assert_refused(rlflow(sandbox, "import-verl", "special.yaml", timeout=60), "special.yaml:", KINDS[kind])
    config = sandbox / "verl"
    (config / "data").mkdir(parents=True)
    (config / "main.yaml").write_text(VERL_MAIN)
    make_special(config / "data" / "odd.yaml", kind)
    result = rlflow(sandbox, "import-verl", "verl/main.yaml", "data=odd", timeout=120)
    assert_refused(result, "data/odd.yaml", "cannot read the verl config", KINDS[kind])

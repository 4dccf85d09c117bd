"""The generate stage's multi_turn tool files at validate time: each problem names the tool file and its line.

The pipeline's diagnostic sits at the ``multi_turn`` key that names the file; its message names
the tool file's own line (a schema that verl would refuse, a ``@function_tool`` without a
docstring or type hints), and a tool the prompt template shows that no file declares gets a
did-you-mean.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from schema_helpers import MINIMAL, load_text, problems_of

from rlflow.backends.remote import RemoteBackend, register
from rlflow.backends.remote.registry import REMOTE_BACKENDS

ASSETS = Path(__file__).resolve().parents[1] / "tools" / "assets"
GENERATE = "  - {name: generate, uses: generate, on: pool}\n"


def pipeline(multi_turn: str, data: str = "data: {train: data/train.json}") -> str:
    """MINIMAL whose generate stage (line 9) has a multi_turn block starting at line 14."""
    text = MINIMAL.replace(
        GENERATE,
        "  - name: generate\n    uses: generate\n    on: pool\n    with:\n      multi_turn:\n"
        f"        enable: true\n{multi_turn}",
    )
    return text.replace("data: {train: data/train.json}", data)


def test_verl_tool_files_validate(project_dir):
    shutil.copytree(ASSETS, project_dir / "tools")
    text = pipeline("        tool_config_path: tools/tools.yaml\n        function_tool_path: tools/function_tools.py\n")
    assert load_text(project_dir, text).spec.stage("generate").with_["multi_turn"]["enable"] is True


def test_a_bad_schema_is_named_at_its_line(project_dir):
    (project_dir / "tools.yaml").write_text(
        "tools:\n"
        "  - class_name: mytools.Search\n"
        "    config: {type: native}\n"
        "    tool_schema:\n"
        "      type: function\n"
        "      function:\n"
        "        name: search\n"
        "        description: Search.\n"
        "        parameters: {type: object, properties: {q: {type: text}}, required: [q]}\n"
        "  - class_name: NoModule\n"
    )
    problems = problems_of(project_dir, pipeline("        tool_config_path: tools.yaml\n"))
    assert len(problems) == 2, problems
    assert all(p.startswith("15:27: stages[0].with.multi_turn.tool_config_path: ") for p in problems)
    text = "\n".join(problems)
    assert "tools.yaml:5 (tools[0].tool_schema): function.parameters.properties.q.type 'text'" in text
    assert "tools.yaml:10 (tools[1].class_name): class_name is 'NoModule'" in text


def test_function_tools_need_docstrings_and_hints(project_dir):
    (project_dir / "fns.py").write_text(
        "from verl.tools.function_tool import function_tool\n\n@function_tool\ndef look(table):\n    return table\n\n"
        '@function_tool("peek")\ndef head(table: str, rows: int) -> str:\n    """Peek.\n\n    Args:\n'
        '        table: which one\n    """\n    return table\n'
    )
    problems = problems_of(project_dir, pipeline("        function_tool_path: fns.py\n"))
    assert any("fns.py:4 (look): a @function_tool needs a docstring" in p for p in problems), problems
    assert any("fns.py:4 (look.table): parameter 'table' has no type hint" in p for p in problems), problems
    assert any("fns.py:8 (head.rows): parameter 'rows' is not described under Args:" in p for p in problems), problems
    assert len(problems) == 3, problems


def test_missing_file_and_template_mentions(project_dir):
    (problem,) = problems_of(project_dir, pipeline("        tool_config_path: nowhere.yaml\n"))
    assert "cannot read" in problem and "nowhere.yaml" in problem
    shutil.copytree(ASSETS, project_dir / "tools")
    (project_dir / "prompt.j2").write_text('Call tools as\n<tool_call>{"name": "ad", "arguments": {}}</tool_call>\n')
    data = "data: {train: data/train.json, prompt_template: prompt.j2}"
    (problem,) = problems_of(project_dir, pipeline("        tool_config_path: tools/tools.yaml\n", data))
    assert (
        "prompt.j2:2: the prompt template shows the tool 'ad', which no tool file declares; did you mean 'add'?"
        in problem
    )


def verl_loader_refuses(file: Path) -> bool:
    """Whether verl's own ``initialize_tools_from_config`` fails on ``file`` (its folder on the path)."""
    import sys

    from verl.tools.tool_registry import initialize_tools_from_config

    old = sys.path[:]
    sys.path.insert(0, str(file.parent))
    try:
        initialize_tools_from_config(str(file))
        return False
    except Exception:  # verl raises whatever the attribute or import lookup raises
        return True
    finally:
        sys.path[:] = old


def test_a_class_that_does_not_exist_is_refused_at_its_line(project_dir):
    """verl's documented example (verl.tools.gsm8k_tool.Gsm8kTool) is not in verl 0.9.1: verl fails at load."""
    (project_dir / "tools.yaml").write_text(
        "tools:\n  - class_name: verl.tools.gsm8k_tool.Gsm8kTool\n    config: {type: native}\n"
    )
    assert verl_loader_refuses(project_dir / "tools.yaml")
    (problem,) = problems_of(project_dir, pipeline("        tool_config_path: tools.yaml\n"))
    assert problem.startswith("15:27: stages[0].with.multi_turn.tool_config_path: ")
    assert "tools.yaml:2 (tools[0].class_name): module 'verl.tools.gsm8k_tool' is not found" in problem
    assert "(modules in verl.tools: base_tool, function_tool, schemas, tool_registry)" in problem


def test_config_type_native_is_required_as_verl_requires_it(project_dir):
    shutil.copytree(ASSETS, project_dir / "tools")
    schema = "    tool_schema: {type: function, function: {name: add, description: Add.}}\n"
    for config, expected in (
        ("    config: {offset: 1}\n", "tools.yaml:3 (tools[0].config): config has no 'type'"),
        ("    config: {type: mcp}\n", "tools.yaml:3 (tools[0].config): config.type is 'mcp'"),
        ("", "tools.yaml:2 (tools[0].config): config is missing"),
    ):
        (project_dir / "tools" / "tools.yaml").write_text(
            f"tools:\n  - class_name: verl_tools.AddTool\n{config}{schema}"
        )
        assert verl_loader_refuses(project_dir / "tools" / "tools.yaml")
        (problem,) = problems_of(project_dir, pipeline("        tool_config_path: tools/tools.yaml\n"))
        assert expected in problem and "type: native" in problem, problem


def test_the_shipped_tool_config_loads_in_verls_loader_and_validates():
    from rlflow.tools.files import load_tool_config

    repo = Path(__file__).resolve().parents[2]
    shipped = repo / "pipelines" / "tools" / "bird_sql.yaml"
    assert not verl_loader_refuses(shipped)  # verl imports rlflow.tools.sql and builds the SqlTool
    entries, problems = load_tool_config(shipped, repo)
    assert problems == [] and entries[0]["config"]["type"] == "native"


class _SingleTurnBackend(RemoteBackend):
    """A backend whose generate knows nothing of multi_turn (it does not set runs_agent_loop)."""

    from_config = reconnect_handle = destroy = None
    generate = compute_log_prob = compute_ref_log_prob = update_actor = None
    update_weights = set_global_steps = save_checkpoint = load_checkpoint = None


@pytest.fixture
def single_turn_backend():
    register("single_turn_only")(_SingleTurnBackend)
    yield "single_turn_only"
    REMOTE_BACKENDS.unregister("single_turn_only")


def _on_remote(backend: str) -> str:
    text = pipeline("").replace(
        "  rw: {type: cpu}\n", f"  rw: {{type: cpu}}\n  srv: {{type: remote, backend: {backend}}}\n"
    )
    return text.replace("    uses: generate\n    on: pool\n", "    uses: generate\n    on: srv\n")


def test_multi_turn_on_a_remote_backend_that_does_not_run_the_agent_loop_is_refused(project_dir, single_turn_backend):
    problems = problems_of(project_dir, _on_remote(single_turn_backend))
    assert any(
        "stages[0].with.multi_turn.enable: remote backend 'single_turn_only' (resource 'srv') does not run "
        "multi-turn rollouts (its class does not set runs_agent_loop)" in p
        for p in problems
    ), problems


def test_multi_turn_on_the_reference_backend_validates(project_dir):
    spec = load_text(project_dir, _on_remote("reference")).spec
    assert spec.stage("generate").on == "srv" and spec.stage("generate").with_["multi_turn"]["enable"] is True

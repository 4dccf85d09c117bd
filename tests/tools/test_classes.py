"""A tool config's class_name, found without importing it, against verl's own loader on the same names.

verl's ``get_tool_class`` imports the module and reads the class; ``class_problem`` must refuse
exactly what it would refuse (a missing module, a missing class), with the package's modules or
the module's classes to choose from, while running none of the module's code.
"""

from __future__ import annotations

import sys

import pytest

from rlflow.tools.classes import class_problem


def verl_loads(class_name: str, search: list[str]) -> bool:
    """Whether verl's own loader gets the class, with ``search`` on the path as the tool process has it."""
    from verl.tools.tool_registry import get_tool_class

    old = sys.path[:]
    sys.path[:0] = search
    try:
        get_tool_class(class_name)
        return True
    except Exception:  # AttributeError, ModuleNotFoundError: verl has no message of its own
        return False
    finally:
        sys.path[:] = old
        for name in [n for n in sys.modules if n.startswith("mytools")]:
            del sys.modules[name]


def test_verls_documented_gsm8k_tool_is_not_in_verl_0_9_1():
    name = "verl.tools.gsm8k_tool.Gsm8kTool"  # verl's multi-turn docs' example
    assert not verl_loads(name, [])
    problem, fix = class_problem(name, [])
    assert problem.startswith("module 'verl.tools.gsm8k_tool' is not found: package 'verl.tools' has no 'gsm8k_tool'")
    assert fix == "modules in verl.tools: base_tool, function_tool, schemas, tool_registry"


def test_a_class_missing_from_a_project_module_gets_a_did_you_mean(tmp_path):
    (tmp_path / "mytools.py").write_text(
        "from verl.tools.base_tool import BaseTool\n\nclass SearchTool(BaseTool):\n    pass\n"
    )
    assert verl_loads("mytools.SearchTool", [str(tmp_path)])
    assert class_problem("mytools.SearchTool", [str(tmp_path)]) is None
    assert not verl_loads("mytools.SerchTool", [str(tmp_path)])
    problem, fix = class_problem("mytools.SerchTool", [str(tmp_path)])
    assert "has no class 'SerchTool'; did you mean 'SearchTool'?" in problem and fix == "classes it defines: SearchTool"
    problem, _ = class_problem("mytool.SearchTool", [str(tmp_path)])
    assert "module 'mytool' is not found" in problem and "did you mean 'mytools'?" in problem


def test_packages_re_exports_and_guarded_definitions_are_found(tmp_path):
    package = tmp_path / "mytools"
    (package / "search").mkdir(parents=True)
    (package / "__init__.py").write_text("from mytools.search.engine import SearchTool as Search\n")
    (package / "search" / "__init__.py").write_text("")
    (package / "search" / "engine.py").write_text(
        "try:\n    import fast\nexcept ImportError:\n    class SearchTool:\n        pass\n"
    )
    search = [str(tmp_path)]
    for name in ("mytools.Search", "mytools.search.engine.SearchTool"):
        assert class_problem(name, search) is None
    problem, _ = class_problem("mytools.search.engine.SearchTool.x", search)
    assert problem == "'mytools.search.engine' is a module, not a package: it has no 'SearchTool'"


def test_no_code_of_the_module_runs(tmp_path):
    sentinel = tmp_path / "ran"
    (tmp_path / "mytools").mkdir()
    (tmp_path / "mytools" / "__init__.py").write_text(f"open({str(sentinel)!r}, 'w').close()\n")
    (tmp_path / "mytools" / "tool.py").write_text(f"open({str(sentinel)!r}, 'w').close()\nclass Tool:\n    pass\n")
    assert class_problem("mytools.tool.Tool", [str(tmp_path)]) is None
    assert not sentinel.exists() and "mytools" not in sys.modules


def test_the_shipped_sql_tool_is_found_wherever_rlflow_is_installed():
    assert class_problem("rlflow.tools.sql.SqlTool", []) is None
    problem, _ = class_problem("rlflow.tools.sql.SQLTool", [])
    assert "did you mean 'SqlTool'?" in problem


@pytest.mark.parametrize("source", ["def broken(:\n", "x" * 10 + "\0"])
def test_a_module_that_does_not_parse_is_named(tmp_path, source):
    (tmp_path / "mytools.py").write_text(source)
    problem, _ = class_problem("mytools.Tool", [str(tmp_path)])
    assert problem.startswith("module 'mytools' (") and "cannot be read" in problem

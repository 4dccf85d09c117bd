"""The stage-kind registry names every built-in kind without importing it, and answers by role."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
from typing import get_args

import rlflow.stages
from rlflow.stages import STAGE_KINDS, Role, StageKind, builtin_kind
from rlflow.stages.registry import BUILTIN_FOR_ROLE, BUILTIN_KINDS


def test_every_kind_rlflow_ships_is_named_with_its_module_and_class():
    for module in pkgutil.iter_modules(rlflow.stages.__path__, "rlflow.stages."):
        importlib.import_module(module.name)  # a kind missing from BUILTIN_KINDS fails here (builtin_stage)
    shipped = {
        cls.name: f"{cls.__module__}:{cls.__qualname__}"
        for name in STAGE_KINDS.names()
        if (cls := STAGE_KINDS.get(name)).__module__.startswith("rlflow.stages.")
    }
    assert shipped == BUILTIN_KINDS


def test_each_role_has_one_built_in_kind_of_that_role():
    roles = {STAGE_KINDS.get(name).role for name in BUILTIN_KINDS}
    assert set(BUILTIN_FOR_ROLE) == roles and roles <= set(get_args(Role))  # transform: plugins' only
    for role, name in BUILTIN_FOR_ROLE.items():
        assert builtin_kind(role).name == name and builtin_kind(role).role == role


LOOKUP = """
import sys
import rlflow.check
from rlflow.stages import STAGE_KINDS, get_stage_kind
from rlflow.stages.registry import BUILTIN_KINDS

modules = {target.partition(":")[0] for target in BUILTIN_KINDS.values()}
assert set(BUILTIN_KINDS) <= set(STAGE_KINDS.names())
print(sorted(modules & set(sys.modules)))
get_stage_kind("ref_log_prob")
print(sorted(modules & set(sys.modules)))
"""


def test_a_lookup_imports_only_that_kind_and_what_its_module_imports():
    result = subprocess.run([sys.executable, "-c", LOOKUP], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["[]", "['rlflow.stages.old_log_prob', 'rlflow.stages.ref_log_prob']"]


def test_a_plugin_cannot_take_a_built_in_name_before_it_is_imported():
    code = (
        "from rlflow.stages import StageKind, register_stage\n"
        "class Generate(StageKind):\n"
        "    name = 'generate'\n"
        "    role = 'rollout'\n"
        "try:\n"
        "    register_stage(Generate)\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.startswith(
        "RegistryError stage kind 'generate' is already registered by rlflow.stages.generate.Generate; "
        "__main__.Generate cannot take the same name"
    ), result.stdout + result.stderr
    assert issubclass(STAGE_KINDS.get("generate"), StageKind)

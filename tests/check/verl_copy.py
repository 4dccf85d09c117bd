"""An editable copy of the installed verl's V1 trainers (sync and separate_async): the verl order tests
change verl's source (text edits, or an ``if`` unwrapped through ``ast``) and check that each change is caught.

Shared by tests/check, tests/cli and tests/runtime (each puts this folder on sys.path).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest


class VerlCopy:
    """The installed verl's trainer modules copied under a folder, to be edited and read from there.

    Every edit must find what it changes exactly once, so a verl whose source moved on fails the
    test that edits it instead of passing without the edit.
    """

    MODULES = ("trainer_sync.py", "trainer_base.py", "trainer_separate_async.py")

    def __init__(self, root: Path) -> None:
        from rlflow.check.verl_source import verl_root

        installed = verl_root()
        if installed is None:
            pytest.skip("verl is not installed")
        self.root = root
        self.folder = root / "verl" / "trainer" / "ppo" / "v1"
        self.folder.mkdir(parents=True)
        for name in self.MODULES:
            (self.folder / name).write_text((installed / "verl" / "trainer" / "ppo" / "v1" / name).read_text())

    def replace(self, module: str, old: str, new: str) -> VerlCopy:
        path = self.folder / module
        text = path.read_text()
        assert text.count(old) == 1, f"{module} holds {text.count(old)} copies of {old!r}; verl changed"
        path.write_text(text.replace(old, new))
        return self

    def indent(self, module: str, first: str, last: str) -> VerlCopy:
        """Indent by four spaces the lines from the one holding ``first`` to the next one holding ``last``."""
        path = self.folder / module
        lines = path.read_text().splitlines(keepends=True)
        starts = [i for i, line in enumerate(lines) if first in line]
        assert len(starts) == 1, f"{module} holds {len(starts)} lines with {first!r}; verl changed"
        end = next(i for i in range(starts[0], len(lines)) if last in lines[i])
        lines[starts[0] : end + 1] = ["    " + line if line.strip() else line for line in lines[starts[0] : end + 1]]
        path.write_text("".join(lines))
        return self

    def unwrap_if(self, module: str, test: str) -> VerlCopy:
        """Make the body of ``if <test>:`` (an ``if`` without ``else``) run unconditionally."""
        path = self.folder / module
        tree = ast.parse(path.read_text())
        unwrap = _Unwrap(ast.unparse(ast.parse(test, mode="eval").body))
        tree = ast.fix_missing_locations(unwrap.visit(tree))
        assert unwrap.count == 1, f"{module} holds {unwrap.count} `if {test}:` blocks; verl changed"
        path.write_text(ast.unparse(tree))
        return self


class _Unwrap(ast.NodeTransformer):
    def __init__(self, test: str) -> None:
        self.test = test
        self.count = 0

    def visit_If(self, node: ast.If):
        self.generic_visit(node)
        if ast.unparse(node.test) == self.test and not node.orelse:
            self.count += 1
            return node.body
        return node

"""Reward function references: parse ``module:callable`` or ``path/to/file.py:callable``, load and check them.

The validator and the runner's child process share ``load_function``, so what validates is what runs.
Design notes: docs/design/reward.md.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rlflow.io import read_bytes

SOURCE_BYTES = 16 << 20  # a reward module is a few KiB
CALL_KEYWORDS = ("data_source", "solution_str", "ground_truth", "extra_info")
_DOTTED_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


class FunctionLoadError(Exception):
    """A reference that cannot be parsed or loaded: ``message`` says what, ``fix`` how to fix it."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(f"{message} ({fix})")
        self.message = message
        self.fix = fix


@dataclass(frozen=True)
class Reference:
    """A parsed reference: a module name or a file path, and the attribute in it."""

    text: str
    module: str | None
    path: str | None
    attribute: str

    @property
    def default_name(self) -> str:
        """What the function is called in metrics when it is given no name: its attribute's last part."""
        return self.attribute.rpartition(".")[2]


def parse_reference(text: str) -> Reference:
    """``module:callable`` or ``path.py:callable`` as a Reference; FunctionLoadError if it is neither."""
    fix = "write `package.module:function` or `path/to/file.py:function`"
    if not isinstance(text, str) or ":" not in text:
        raise FunctionLoadError(f"reward function reference {text!r} has no ':' before the callable's name", fix)
    target, _, attribute = text.rpartition(":")
    if not _DOTTED_NAME.fullmatch(attribute):
        raise FunctionLoadError(f"reward function reference {text!r}: {attribute!r} is not a Python name", fix)
    if target.endswith(".py") or "/" in target or "\\" in target:
        return Reference(text, None, target, attribute)
    if not _DOTTED_NAME.fullmatch(target):
        raise FunctionLoadError(f"reward function reference {text!r}: {target!r} is not a module name", fix)
    return Reference(text, target, None, attribute)


def resolve_path(reference: Reference, root: str | Path) -> Path:
    """The file a path reference names, relative paths taken from ``root`` (the project root)."""
    path = Path(os.path.expanduser(reference.path))
    return (path if path.is_absolute() else Path(root) / path).resolve()


def _import_file(path: Path):
    if not path.exists():
        raise FunctionLoadError(
            f"reward function file {str(path)!r} does not exist",
            "relative paths are taken from the project root (the folder of rlflow.yaml)",
        )
    name = f"rlflow_reward_file_{path.stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:10]}"
    if name in sys.modules:
        return sys.modules[name]
    try:  # read here, bounded, rather than by the import system, which would open a FIFO or /dev/zero
        source = read_bytes(path, SOURCE_BYTES, "reward function file")
    except OSError as exc:
        raise FunctionLoadError(f"cannot read {str(path)!r}: {exc.strerror or exc}", "name a .py file") from None
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise FunctionLoadError(f"cannot load {str(path)!r} as a Python module", "name a .py file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        exec(compile(source, str(path), "exec"), module.__dict__)  # noqa: S102 - the user's own reward file
    except BaseException as exc:
        del sys.modules[name]
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise FunctionLoadError(
            f"loading {str(path)!r} failed: {type(exc).__name__}: {exc}", "fix the error in that file"
        ) from exc
    return module


def _import_module(name: str):
    try:
        return importlib.import_module(name)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise FunctionLoadError(
            f"cannot import module {name!r}: {type(exc).__name__}: {exc}",
            "check the module name and that it is installed or on the Python path, "
            "or give a file path instead: `path/to/file.py:function`",
        ) from exc


def load_function(reference: Reference, root: str | Path) -> Callable:
    """Import the reference's module (or file) and return the callable, checked to take verl's keywords."""
    where = reference.module or str(resolve_path(reference, root))
    module = _import_module(reference.module) if reference.module else _import_file(resolve_path(reference, root))
    target = module
    for part in reference.attribute.split("."):
        if not hasattr(target, part):
            public = sorted(
                n
                for n, v in vars(module).items()
                if callable(v) and not n.startswith("_") and getattr(v, "__module__", None) == module.__name__
            )
            raise FunctionLoadError(
                f"{where} has no attribute {reference.attribute!r}",
                f"callables there: {', '.join(public[:12]) or 'none'}",
            )
        target = getattr(target, part)
    if not callable(target):
        raise FunctionLoadError(
            f"{reference.text!r} is a {type(target).__name__}, not a callable", "name a function defined there"
        )
    _check_signature(reference, target)
    return target


def _check_signature(reference: Reference, fn: Callable) -> None:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # some builtins have no signature to inspect: the call will tell
        return
    try:
        signature.bind(**dict.fromkeys(CALL_KEYWORDS))
    except TypeError as exc:
        raise FunctionLoadError(
            f"{reference.text!r} cannot be called as fn({', '.join(f'{k}=...' for k in CALL_KEYWORDS)}): {exc} "
            f"(its signature is {reference.attribute}{signature})",
            f"define it as def {reference.default_name}(data_source, solution_str, ground_truth, extra_info=None)",
        ) from exc

"""Render a pipeline file as a Jinja2 template, safely, before it is parsed as YAML.

Templates run in Jinja2's ``SandboxedEnvironment`` with ``StrictUndefined``; every failure is a diagnostic.
Design notes: docs/design/templating.md.
"""

from __future__ import annotations

import difflib
import functools
import re
import traceback
from collections.abc import Callable, Mapping
from typing import Any

from rlflow.schemas.diagnostics import Diagnostic, suggestion

MAX_OUTPUT = 1 << 20
MAX_EXPONENT = 1024
MAX_LOOP = 100_000
_TEMPLATE_NAME = "<template>"
_UNDEFINED = re.compile(r"^'([^']+)' is undefined$")
_PLAIN_VARIABLE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_ANY_TEMPLATE = re.compile(r"\{[{%#]")
_JINJA_NAMES = frozenset(
    {"true", "false", "none", "True", "False", "None", "range", "dict", "lipsum", "cycler", "joiner", "namespace"}
)  # literals and globals: Jinja2 gives them meaning


@functools.lru_cache(maxsize=1)
def _environment():
    """The sandbox (built on first use: plain files never import Jinja2)."""
    from jinja2 import StrictUndefined
    from jinja2.sandbox import SandboxedEnvironment, SecurityError

    class Sandbox(SandboxedEnvironment):
        """Jinja2's sandbox, plus limits on arithmetic that could exhaust memory or time."""

        intercepted_binops = frozenset({"**", "*"})

        def call_binop(self, context, operator, left, right):  # noqa: ANN001 (Jinja2's signature)
            if operator == "**" and isinstance(right, (int, float)) and abs(right) > MAX_EXPONENT:
                raise SecurityError(f"exponent {right} is too large (at most {MAX_EXPONENT})")
            if operator == "*":
                for seq, count in ((left, right), (right, left)):
                    if isinstance(seq, (str, list, tuple)) and isinstance(count, int) and len(seq) * count > MAX_OUTPUT:
                        raise SecurityError(f"repetition would build {len(seq) * count} items (at most {MAX_OUTPUT})")
            return super().call_binop(context, operator, left, right)

    return Sandbox(undefined=StrictUndefined, keep_trailing_newline=True, autoescape=False)


def _only_plain_variables(source: str) -> bool:
    """True when every template construct is ``{{ name }}`` (then rendering is plain substitution)."""
    if "\0" in source:
        return False
    rest = _PLAIN_VARIABLE.sub("\0", source)  # "{{{ x }}" lexes as "{{" then "{ x }}" in Jinja2: not plain
    if _ANY_TEMPLATE.search(rest) or "{\0" in rest:
        return False
    return not _JINJA_NAMES.intersection(_PLAIN_VARIABLE.findall(source))


def template_variables(source: str) -> set[str] | None:
    """Names the template reads from outside (None when it does not parse)."""
    if _only_plain_variables(source):
        return set(_PLAIN_VARIABLE.findall(source))
    from jinja2 import TemplateSyntaxError, meta

    try:
        return set(meta.find_undeclared_variables(_environment().parse(source)))
    except TemplateSyntaxError:
        return None


def render(source: str, variables: Mapping[str, Any], file: str) -> tuple[str | None, list[Diagnostic]]:
    """Render ``source``; returns (text, []) or (None, diagnostics)."""
    if _only_plain_variables(source):
        return _substitute(source, variables, file)
    from jinja2 import TemplateSyntaxError
    from jinja2.sandbox import SecurityError

    try:
        template = _environment().from_string(source, globals={"range": _budgeted_range()})
    except TemplateSyntaxError as exc:
        return None, [Diagnostic(file, exc.lineno or 1, 1, "", f"template syntax error: {exc.message}")]
    try:
        chunks, size = [], 0
        for chunk in template.generate(**variables):
            size += len(chunk)
            if size > MAX_OUTPUT:
                raise SecurityError(f"the template renders more than {MAX_OUTPUT} characters")
            chunks.append(chunk)
        return "".join(chunks), []
    except Exception as exc:  # noqa: BLE001 - any failure inside a user's template is a diagnostic
        return None, [_render_error(exc, source, variables, file)]


def _budgeted_range() -> Callable[..., range]:
    """``range`` for one render: all its ranges together may hold at most MAX_LOOP items, so
    nested loops cannot spin for hours without printing anything."""
    from jinja2.sandbox import SecurityError

    used = 0

    def budgeted(*args: int) -> range:
        nonlocal used
        items = range(*args)
        used += len(items)
        if used > MAX_LOOP:
            raise SecurityError(f"loops over range() may run at most {MAX_LOOP} times in all")
        return items

    return budgeted


def _substitute(source: str, variables: Mapping[str, Any], file: str) -> tuple[str | None, list[Diagnostic]]:
    """``{{ name }}`` -> ``str(value)``: exactly what Jinja2 renders for such a template, without Jinja2."""
    for match in _PLAIN_VARIABLE.finditer(source):
        if match.group(1) not in variables:
            line = source.count("\n", 0, match.start()) + 1
            return None, [_undefined(match.group(1), line, source.splitlines()[line - 1], variables, file)]
    return _PLAIN_VARIABLE.sub(lambda m: str(variables[m.group(1)]), source), []


def _undefined(name: str, line: int, text: str, variables: Mapping[str, Any], file: str) -> Diagnostic:
    hint = suggestion(name, variables)
    fix = (hint + "; " if hint else "") + f"define it under vars: in rlflow.yaml or pass --set {name}=..."
    return Diagnostic(file, line, text.find(name) + 1 or 1, "", f"undefined template variable {name!r}", fix)


def _render_error(exc: Exception, source: str, variables: Mapping[str, Any], file: str) -> Diagnostic:
    from jinja2 import UndefinedError
    from jinja2.sandbox import SecurityError

    line = _template_line(exc)
    text = source.splitlines()[line - 1] if 0 < line <= len(source.splitlines()) else ""
    if isinstance(exc, UndefinedError):
        match = _UNDEFINED.match(str(exc))
        if match:
            return _undefined(match.group(1), line, text, variables, file)
        return Diagnostic(file, line, 1, "", f"template error: {exc}")
    if isinstance(exc, SecurityError):
        return Diagnostic(
            file, line, 1, "", f"template refused by the sandbox: {exc}", "templates may only substitute values"
        )
    return Diagnostic(file, line, 1, "", f"template error: {type(exc).__name__}: {exc}")


def _template_line(exc: BaseException) -> int:
    """The template line an error was raised at (Jinja2 puts it in the traceback)."""
    lines = [frame.lineno for frame in traceback.extract_tb(exc.__traceback__) if frame.filename == _TEMPLATE_NAME]
    return (lines[-1] or 1) if lines else 1


def line_mapper(source: str, rendered: str) -> Callable[[int], int]:
    """Rendered line (1-based) -> template line (1-based)."""
    src, out = source.splitlines(), rendered.splitlines()
    if len(src) == len(out):
        return lambda line: line
    table: list[int] = []
    matcher = difflib.SequenceMatcher(None, src, out, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        for j in range(j1, j2):
            if tag == "equal":
                table.append(i1 + (j - j1) + 1)
            elif i2 > i1:
                table.append(i1 + min(j - j1, i2 - i1 - 1) + 1)
            else:  # lines only in the output came from the template line just above
                table.append(max(i1, 1))
    last = max(len(src), 1)
    return lambda line: table[line - 1] if 0 < line <= len(table) else last

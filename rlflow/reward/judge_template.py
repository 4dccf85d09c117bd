"""The judging prompt: a Jinja2 template rendered per row, in the pipeline templates' sandbox.

``with.template`` is a file relative to the project root or ``builtin:<name>`` (``rlflow/assets/judges``);
it gets each row's ``prompt``, ``response``, ``data_source``, ``ground_truth`` and ``extra_info`` and its
rendering is the judge's user message. A template reaches neither files nor private attributes: the
sandbox of ``rlflow.schemas.templating`` renders it. Design notes: docs/design/reward_models.md.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlflow.assets import BUILTIN_PREFIX, builtin_path
from rlflow.io import read_text
from rlflow.schemas.templating import render, template_variables

TEMPLATE_VARIABLES = ("prompt", "response", "data_source", "ground_truth", "extra_info")
TEMPLATE_BYTES = 1 << 20  # a judging prompt is a few lines


class JudgeTemplateError(Exception):
    """A template that cannot be found, read or parsed: ``message`` says what (with file:line), ``fix`` how."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(f"{message} ({fix})")
        self.message = message
        self.fix = fix


@dataclass(frozen=True)
class JudgeTemplate:
    source: str
    file: str  # the path as messages name it

    def render_row(self, variables: dict[str, Any]) -> tuple[str | None, str]:
        """(the user message, "") or (None, why: file:line and the sandbox's or Jinja2's message)."""
        text, problems = render(self.source, variables, self.file)
        if text is None:
            first = problems[0]
            return None, f"{first.file}:{first.line}: {first.message}"
        return text, ""


def template_file(reference: str, root: str | Path | None) -> Path:
    """The file ``reference`` names: ``builtin:<name>`` (a shipped ``.jinja``) or a path from ``root``."""
    if reference.startswith(BUILTIN_PREFIX):
        try:
            path = builtin_path(reference)
        except ValueError as exc:
            raise JudgeTemplateError(str(exc), "name a shipped template, e.g. builtin:ranking_judge") from None
        if path is None:
            raise JudgeTemplateError(f"{reference!r} is a model, not a template", "name a template file")
        return path
    path = Path(os.path.expanduser(reference))
    return path if path.is_absolute() else Path(root or Path.cwd()) / path


def load_template(reference: str, root: str | Path | None) -> JudgeTemplate:
    """Read and check the template: it parses and reads only ``TEMPLATE_VARIABLES``."""
    path = template_file(reference, root)
    fix = "relative paths are taken from the project root (the folder of rlflow.yaml)"
    if not path.is_file():
        raise JudgeTemplateError(f"judge template {str(path)!r} does not exist or is not a file", fix)
    try:
        source = read_text(path, TEMPLATE_BYTES, "judge template")
    except (OSError, UnicodeDecodeError) as exc:
        raise JudgeTemplateError(f"cannot read judge template {str(path)!r}: {exc}", "give a UTF-8 text file") from None
    template = JudgeTemplate(source, str(path))
    _check(template)
    return template


def _check(template: JudgeTemplate) -> None:
    names = template_variables(template.source)
    if names is None:  # rendering once reports the syntax error with its line
        _, why = template.render_row(dict.fromkeys(TEMPLATE_VARIABLES, ""))
        raise JudgeTemplateError(why or f"{template.file}:1: template syntax error", "fix the template's syntax")
    unknown = sorted(names - set(TEMPLATE_VARIABLES) - {"range"})
    if unknown:
        line = _line_of(template.source, unknown[0])
        raise JudgeTemplateError(
            f"{template.file}:{line}: the template reads {', '.join(map(repr, unknown))}, which a row does not give",
            f"a judge template may use {', '.join(TEMPLATE_VARIABLES)}",
        )


def _line_of(source: str, name: str) -> int:
    for number, line in enumerate(source.splitlines(), start=1):
        if name in line:
            return number
    return 1


def row_variables(raw_prompt: Any, response: Any, data_source: Any, reward_info: Any) -> dict[str, Any]:
    """What the template gets for one row (``reward_info`` as the data loader writes it)."""
    info = reward_info if isinstance(reward_info, dict) else {}
    return {
        "prompt": raw_prompt,
        "response": response,
        "data_source": str(data_source),
        "ground_truth": info.get("ground_truth"),
        "extra_info": info.get("extra_info") or {},
    }


def render_messages(template: JudgeTemplate, rows: list[dict[str, Any]]) -> tuple[list[list[dict] | None], list[str]]:
    """Each row's chat (one user message), or None where rendering failed; and the failures' reasons."""
    messages: list[list[dict] | None] = []
    failures: list[str] = []
    for variables in rows:
        text, why = template.render_row(variables)
        messages.append(None if text is None else [{"role": "user", "content": text}])
        if text is None:
            failures.append(why)
    return messages, failures

"""Reading the tool files a ``multi_turn`` block names, checked without running them.

Design notes: docs/design/tools.md.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

from pydantic import ValidationError

from rlflow.io import read_bytes
from rlflow.schemas.diagnostics import Diagnostic
from rlflow.schemas.safe_yaml import MAX_BYTES, decode_text, parse_yaml
from rlflow.tools.classes import class_problem
from rlflow.tools.schema import ToolSchema, did_you_mean, schema_problems


def _read(file: Path, what: str) -> tuple[bytes | None, str | None]:
    """The bytes of ``file`` through the bounded reader (a FIFO or device is refused, never waited on)."""
    try:
        return read_bytes(file, MAX_BYTES, what), None
    except OSError as exc:
        return None, f"cannot read the {what}: {exc.strerror or exc}"  # the diagnostic names the file


def tool_search_path(file: Path, root: Path) -> list[str]:
    """Where the tool process finds a tool config's modules: the project root, the config's folder, sys.path."""
    return [str(root), str(file.parent), *sys.path]


def tool_config_diagnostics(file: Path, root: Path) -> tuple[list[dict], list[Diagnostic]]:
    """The entries of a verl tool config and the problems found in it (each at its line)."""
    name = str(file)
    raw, error = _read(file, "tool config")
    if raw is None:
        return [], [Diagnostic(name, 1, 1, "", error, "point multi_turn.tool_config_path at a verl tool config")]
    text, problems = decode_text(raw, name)
    if text is None:
        return [], problems
    data, positions, problems = parse_yaml(text, name, what="a tool config")
    if problems:
        return [], problems
    if not isinstance(data, dict) or not isinstance(data.get("tools"), list):
        return [], [
            Diagnostic(name, 1, 1, "tools", "no 'tools' list", "write tools: [{class_name, config, tool_schema}]")
        ]
    entries, out = [], []
    for i, entry in enumerate(data["tools"]):
        path = ("tools", i)
        line, col = positions.locate(path)
        where = f"tools[{i}]"
        if not isinstance(entry, dict):
            out.append(
                Diagnostic(name, line, col, where, "a tool entry must be a mapping", "class_name, config, tool_schema")
            )
            continue
        class_name = entry.get("class_name")
        if not isinstance(class_name, str) or "." not in class_name:
            line, col = positions.locate((*path, "class_name"))
            out.append(
                Diagnostic(
                    name, line, col, f"{where}.class_name", f"class_name is {class_name!r}", "write module.Class"
                )
            )
            continue
        config_problem = _config_problem(entry.get("config"))
        if config_problem is not None:
            line, col = positions.locate((*path, "config") if "config" in entry else path)
            out.append(Diagnostic(name, line, col, f"{where}.config", *config_problem))
            continue
        schema = entry.get("tool_schema")
        if schema is not None:
            line, col = positions.locate((*path, "tool_schema"))
            try:
                problems = schema_problems(ToolSchema.model_validate(schema))
            except ValidationError as exc:
                first = exc.errors()[0]
                field = ".".join(str(p) for p in first["loc"])
                problems = [f"{field}: {first['msg']}"]
            if problems:
                out.append(
                    Diagnostic(name, line, col, f"{where}.tool_schema", problems[0], "an OpenAI function schema")
                )
                continue
        missing = class_problem(class_name, tool_search_path(file, root))
        if missing is not None:
            line, col = positions.locate((*path, "class_name"))
            out.append(Diagnostic(name, line, col, f"{where}.class_name", *missing))
            continue
        entries.append({"class_name": class_name, "config": entry["config"], "tool_schema": schema})
    return entries, out


def _config_problem(config) -> tuple[str, str] | None:
    """(problem, fix) unless ``config`` is what verl's loader reads: a mapping whose ``type`` is ``native``."""
    if not isinstance(config, dict):
        what = "missing" if config is None else f"a {type(config).__name__}"
        return f"config is {what}; verl's loader reads config.type", "write config: {type: native, ...}"
    if "type" not in config:
        return "config has no 'type'; verl's loader reads config.type", "add type: native to config"
    if config["type"] != "native":
        return f"config.type is {config['type']!r}; verl 0.9.1 loads only native tools", "set type: native"
    return None


def load_tool_config(file: Path, root: Path) -> tuple[list[dict], list[str]]:
    """The entries of a verl tool config and its problems as one-line texts (each with the fix)."""
    entries, problems = tool_config_diagnostics(file, root)
    return entries, [str(p) for p in problems]


def _is_function_tool(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return (isinstance(target, ast.Name) and target.id == "function_tool") or (
        isinstance(target, ast.Attribute) and target.attr == "function_tool"
    )


def function_file_diagnostics(file: Path) -> tuple[list[str], list[Diagnostic]]:
    """The tool names a ``@function_tool`` file declares and the problems verl would raise on loading it."""
    name = str(file)
    raw, error = _read(file, "function tool file")
    if raw is None:
        return [], [Diagnostic(name, 1, 1, "", error, "point multi_turn.function_tool_path at a Python file")]
    try:
        tree = ast.parse(raw, filename=name)
    except SyntaxError as exc:
        return [], [Diagnostic(name, exc.lineno or 1, exc.offset or 1, "", f"syntax error: {exc.msg}", "fix the file")]
    names, out = [], []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        decorators = [d for d in node.decorator_list if _is_function_tool(d)]
        if not decorators:
            continue
        renamed = decorators[0]
        if isinstance(renamed, ast.Call) and renamed.args and isinstance(renamed.args[0], ast.Constant):
            names.append(str(renamed.args[0].value))
        else:
            names.append(node.name)
        docstring = ast.get_docstring(node)
        described = _described_args(docstring or "")
        if docstring is None:
            out.append(
                Diagnostic(
                    name,
                    node.lineno,
                    node.col_offset + 1,
                    node.name,
                    "a @function_tool needs a docstring",
                    "a Google-style docstring with an Args: block (verl builds the schema from it)",
                )
            )
        args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
        for arg in args:
            if docstring is not None and arg.arg not in described:
                out.append(
                    Diagnostic(
                        name,
                        arg.lineno,
                        arg.col_offset + 1,
                        f"{node.name}.{arg.arg}",
                        f"parameter {arg.arg!r} is not described under Args: in the docstring",
                        f"add '{arg.arg}: what it is' under Args: (verl's schema takes the description from there)",
                    )
                )
            if arg.annotation is None:
                out.append(
                    Diagnostic(
                        name,
                        arg.lineno,
                        arg.col_offset + 1,
                        f"{node.name}.{arg.arg}",
                        f"parameter {arg.arg!r} has no type hint",
                        "annotate it (str, int, float, bool, list, dict)",
                    )
                )
        if node.args.vararg or node.args.kwarg:
            out.append(
                Diagnostic(
                    name,
                    node.lineno,
                    node.col_offset + 1,
                    node.name,
                    "*args / **kwargs cannot be expressed in a tool schema",
                    "name every parameter",
                )
            )
    if not names:
        out.append(
            Diagnostic(
                name,
                1,
                1,
                "",
                "no @function_tool function in the file",
                "decorate the tool functions with @function_tool",
            )
        )
    return names, out


_ARGS_BLOCK = re.compile(r"\n\s*Args:\n\s*(.*?)[\n\s]*(Returns:|Raises:|\Z)", re.DOTALL)  # transformers' args_re
_ARG_NAME = re.compile(r"^\s*(\w+)\s*(?:\([^)]*\))?:", re.MULTILINE)


def _described_args(docstring: str) -> set[str]:
    """The parameter names a Google-style docstring describes under ``Args:``."""
    block = _ARGS_BLOCK.search("\n" + docstring)
    return set(_ARG_NAME.findall(block.group(1))) if block else set()


_MENTION = re.compile(r'"name"\s*:\s*"([^"\\]{1,100})"')


def mentioned_tool_names(text: str) -> list[str]:
    """Tool names a prompt template shows the model in hermes calls (``"name": "..."``), in order, once each."""
    return list(dict.fromkeys(_MENTION.findall(text)))


def tool_file_problems(multi_turn, root: Path, prompt_template: str | None) -> list[tuple[str, str, str]]:
    """(field under ``multi_turn``, message naming the file and line, fix) for each problem of the tool files."""
    problems: list[tuple[str, str, str]] = []
    names: list[str] = []
    files = (
        ("tool_config_path", multi_turn.tool_config_path, lambda file: tool_config_diagnostics(file, root)),
        ("function_tool_path", multi_turn.function_tool_path, function_file_diagnostics),
    )
    for field, value, read in files:
        if not value:
            continue
        found, diagnostics = read(root / value)
        if field == "tool_config_path":
            found = [e["tool_schema"]["function"]["name"] for e in found if e["tool_schema"]]
        for clash in sorted(set(found) & set(names)):
            problems.append(
                (field, f"tool {clash!r} is declared in both tool files", "rename one of them (verl refuses it)")
            )
        names += found
        for d in diagnostics:
            where = f" ({d.path})" if d.path else ""
            problems.append((field, f"{d.file}:{d.line}{where}: {d.message}", d.fix))
    if prompt_template and names:
        template = root / prompt_template
        raw, _ = _read(template, "prompt template")  # the template's own reader words its problems
        text = raw.decode("utf-8", "replace") if raw is not None else ""
        for name in mentioned_tool_names(text):
            if name not in names:
                line = text[: text.find(f'"{name}"')].count("\n") + 1
                problems.append(
                    (
                        "tool_config_path" if multi_turn.tool_config_path else "function_tool_path",
                        f"{template}:{line}: the prompt template shows the tool {name!r}, which no tool file declares"
                        f"{did_you_mean(name, names)}",
                        f"tools declared: {', '.join(sorted(names))}",
                    )
                )
    return problems

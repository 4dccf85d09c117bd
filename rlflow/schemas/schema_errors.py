"""Turn pydantic ``ValidationError``s into positioned diagnostics, with did-you-mean.

Locations map onto YAML positions (pydantic's union tags dropped) and messages are rewritten in the file's
terms. Design notes: docs/design/schemas.md.
"""

from __future__ import annotations

import re
import types
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from rlflow.schemas.diagnostics import Diagnostic, format_path, short_repr, suggestion
from rlflow.schemas.safe_yaml import Positions

_TYPE_NAMES = {
    dict: "mapping",
    list: "list",
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    type(None): "null",
}
_EXPECTED = {
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "dict_type": "a mapping",
    "list_type": "a list",
    "tuple_type": "a list",
    "string_type": "a string",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
}


def members(annotation: Any) -> list:
    """The alternatives of an annotation: ``Annotated``/``Optional``/``Union`` unwrapped, None dropped."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return members(get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        return [m for arg in get_args(annotation) if arg is not type(None) for m in members(arg)]
    return [annotation]


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _field(model: type[BaseModel], key: Any):
    for name, info in model.model_fields.items():
        if key == name or key == info.alias:
            return info
    return None


def _narrow(candidates: list, data: Any) -> list:
    """Pick the union member whose ``type`` literal matches the data's ``type``, when there is one."""
    if not isinstance(data, Mapping) or "type" not in data:
        return candidates
    chosen = [
        c
        for c in candidates
        if _is_model(c) and _field(c, "type") is not None and data["type"] in get_args(_field(c, "type").annotation)
    ]
    return chosen or candidates


def walk(root: Any, path: Sequence, data: Any = None) -> list | None:
    """The annotations a value at ``path`` may have; None when ``path`` is not allowed by the schema."""
    candidates = _narrow(members(root), data)
    for key in path:
        data = _step(data, key)
        nxt: list = []
        for cand in candidates:
            origin = get_origin(cand)
            if _is_model(cand):
                info = _field(cand, key)
                if info is not None:
                    nxt.extend(members(info.annotation))
            elif cand is Any or cand is dict or origin is dict or origin is Mapping:
                args = get_args(cand)
                nxt.extend(members(args[1]) if args else [Any])
            elif origin in (list, tuple) and isinstance(key, int):
                nxt.extend(members(get_args(cand)[0]))
        if not nxt:
            return None
        candidates = _narrow(nxt, data)
    return candidates


def _step(data: Any, key: Any) -> Any:
    if isinstance(data, Mapping):
        return data.get(key)
    if isinstance(data, list) and isinstance(key, int) and 0 <= key < len(data):
        return data[key]
    return None


def known_keys(candidates: list | None) -> list[str] | None:
    """Keys a mapping with these annotations accepts; None when any key goes (a dict, Any)."""
    keys: list[str] = []
    for cand in candidates or []:
        if not _is_model(cand):
            return None
        keys += [info.alias or name for name, info in cand.model_fields.items()]
    return sorted(set(keys))


def clean_loc(loc: tuple, data: Any) -> tuple:
    """Drop pydantic's union tags from ``loc`` (see the module docstring)."""
    out, node = [], data
    for i, key in enumerate(loc):
        last = i == len(loc) - 1
        if isinstance(node, Mapping) and key not in node and not last and isinstance(key, str):
            continue
        out.append(key)
        node = _step(node, key)
    return tuple(out)


def validation_diagnostics(
    exc: ValidationError, root: type[BaseModel], data: Any, positions: Positions, file: str, prefix: tuple = ()
) -> list[Diagnostic]:
    """One diagnostic per pydantic error; ``data`` is what was validated, found at ``prefix`` in the file."""
    out = []
    for err in exc.errors():
        loc = clean_loc(tuple(err["loc"]), data)
        if err["type"] == "extra_forbidden":
            from rlflow.schemas.verl_names import verl_key_hints  # a big table: imported for an error only

            hints = verl_key_hints(prefix + loc, err.get("input"))
            if hints:
                out += [_at(positions, file, where, f"unknown key {where[-1]!r}", hint) for where, hint in hints]
                continue
        path, message, fix, at = _describe(err, loc, root, data)
        # a missing key has no spot of its own: point at the key that holds the mapping
        where = (prefix + path[:-1], "key") if at == "parent" else (prefix + path, at)
        line, col = positions.locate(*where)
        out.append(Diagnostic(file, line, col, format_path(prefix + path), message, fix))
    return out


def _at(positions: Positions, file: str, path: tuple, message: str, fix: str) -> Diagnostic:
    line, col = positions.locate(path, "key")
    return Diagnostic(file, line, col, format_path(path), message, fix)


def _describe(err: dict, loc: tuple, root: Any, data: Any) -> tuple[tuple, str, str, str]:
    """(path, message, fix, where): where is "key", "value" or "parent" (the key holding the mapping)."""
    kind, value, ctx = err["type"], err.get("input"), err.get("ctx") or {}
    if kind == "extra_forbidden":
        known = known_keys(walk(root, loc[:-1], data)) or []
        fix = suggestion(loc[-1], known) or (f"known keys: {', '.join(known)}" if known else "")
        return loc, f"unknown key {loc[-1]!r}", fix, "key"
    if kind == "missing":
        return loc, f"missing required key {loc[-1]!r}", "", "parent"
    if kind == "union_tag_invalid":
        disc, expected = ctx["discriminator"].strip("'"), _quoted(ctx["expected_tags"])
        return (
            loc + (disc,),
            f"unknown {disc} {ctx['tag']!r}; expected one of {', '.join(expected)}",
            suggestion(ctx["tag"], expected),
            "value",
        )
    if kind == "union_tag_not_found":
        disc = ctx["discriminator"].strip("'")
        tags = _tags(walk(root, loc, data), disc)
        return loc, f"missing key {disc!r}", f"set {disc}: one of {', '.join(tags)}" if tags else "", "key"
    if kind == "literal_error":
        expected = _quoted(ctx.get("expected", ""))
        return loc, f"{short_repr(value)} is not one of {', '.join(expected)}", suggestion(value, expected), "value"
    if kind in _EXPECTED:
        got = "null" if value is None else f"{_type_name(value)} {short_repr(value)}"
        return loc, f"expected {_EXPECTED[kind]}, got {got}", "", "value"
    message = err["msg"].replace("Input should", "should").replace("String should", "should")
    return loc, f"{message[:1].lower()}{message[1:]}; got {short_repr(value)}", "", "value"


def _quoted(text: str) -> list[str]:
    return re.findall(r"'([^']*)'", text)


def _tags(candidates: list | None, disc: str) -> list[str]:
    tags: list[str] = []
    for cand in candidates or []:
        info = _field(cand, disc) if _is_model(cand) else None
        if info is not None and get_origin(info.annotation) is Literal:
            tags += [str(a) for a in get_args(info.annotation)]
    return tags


def _type_name(value: Any) -> str:
    return _TYPE_NAMES.get(type(value), type(value).__name__)

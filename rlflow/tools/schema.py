"""Tool schemas (OpenAI function schemas, as verl's ``OpenAIFunctionToolSchema``) and the checks on model-written arguments.

The tool process reports each tool's schema; the parent checks every call against it before
anything runs: unknown names (with a did-you-mean), arguments that are too large, missing
required arguments, unknown ones and wrong JSON types become an error observation for that call.
"""

from __future__ import annotations

import difflib
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

MAX_ARGUMENT_CHARS = 8192  # a model-written argument object longer than this is refused unrun
_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


class PropertySchema(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str | list[str]
    description: str | None = None
    enum: list[Any] | None = None


class ParametersSchema(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str = "object"
    properties: dict[str, PropertySchema] = Field(default_factory=dict)
    required: list[str] = Field(default_factory=list)


class FunctionSchema(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str = Field(min_length=1)
    description: str
    parameters: ParametersSchema = Field(default_factory=ParametersSchema)
    strict: bool = False


class ToolSchema(BaseModel):
    """verl's ``OpenAIFunctionToolSchema``: ``{type: function, function: {name, description, parameters}}``."""

    model_config = ConfigDict(extra="allow")
    type: str
    function: FunctionSchema

    @property
    def name(self) -> str:
        return self.function.name


def schema_problems(schema: ToolSchema) -> list[str]:
    """What makes a well-formed schema unusable: a type JSON Schema lacks, required arguments it never declares."""
    problems = []
    if schema.type != "function":
        problems.append(f"type is {schema.type!r}; verl's tools are type: function")
    params = schema.function.parameters
    if params.type != "object":
        problems.append(f"function.parameters.type is {params.type!r}; it must be object")
    for key, prop in params.properties.items():
        types = [prop.type] if isinstance(prop.type, str) else prop.type
        for kind in types:
            if kind not in _JSON_TYPES:
                problems.append(f"function.parameters.properties.{key}.type {kind!r} is not a JSON Schema type")
    for key in params.required:
        if key not in params.properties:
            problems.append(f"function.parameters.required names {key!r}, which properties does not declare")
    return problems


def did_you_mean(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1)
    return f"; did you mean '{close[0]}'?" if close else ""


def _type_ok(value: Any, prop: PropertySchema) -> bool:
    types = [prop.type] if isinstance(prop.type, str) else prop.type
    for kind in types:
        allowed = _JSON_TYPES.get(kind, (object,))
        if isinstance(value, bool) and kind in ("integer", "number"):
            continue  # JSON's true is not a number
        if isinstance(value, allowed):
            return True
    return False


def argument_error(name: str, arguments: str, schemas: dict[str, ToolSchema]) -> str | None:
    """Why the call ``name(arguments)`` must not run (the text the model reads back), or None."""
    if name not in schemas:
        return f"Unknown function '{name}'{did_you_mean(name, sorted(schemas))} Available tools: {sorted(schemas)}"
    if len(arguments) > MAX_ARGUMENT_CHARS:
        return f"Arguments for '{name}' are {len(arguments)} characters; at most {MAX_ARGUMENT_CHARS} are accepted"
    values = json.loads(arguments)
    params = schemas[name].function.parameters
    missing = [key for key in params.required if key not in values]
    if missing:
        return f"Missing required arguments for '{name}': {missing}"
    for key, value in values.items():
        prop = params.properties.get(key)
        if prop is None:
            return f"Unknown argument '{key}' for '{name}'{did_you_mean(key, sorted(params.properties))}"
        if not _type_ok(value, prop):
            return f"Argument '{key}' of '{name}' must be {prop.type}, got {type(value).__name__}"
        if prop.enum is not None and value not in prop.enum:
            return f"Argument '{key}' of '{name}' must be one of {prop.enum}"
    return None

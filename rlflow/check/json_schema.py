"""The JSON Schema of pipeline files (``rlflow schema``), generated from the pydantic models.

Each registered stage kind adds the schema of its ``with:``. Design notes: docs/design/check.md.
"""

from __future__ import annotations

from typing import Any

from rlflow.schemas.pipeline import Pipeline
from rlflow.stages import STAGE_KINDS

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def pipeline_json_schema() -> dict[str, Any]:
    schema = Pipeline.model_json_schema(by_alias=True)
    defs = schema.setdefault("$defs", {})
    stage = defs["StageSpec"]
    kinds = STAGE_KINDS.names()
    stage["properties"]["uses"]["examples"] = kinds
    rules = []
    for name in kinds:
        config = STAGE_KINDS.get(name).config_model.model_json_schema(by_alias=True, ref_template="#/$defs/{model}")
        defs.update(config.pop("$defs", {}))
        rules.append(
            {
                "if": {"properties": {"uses": {"const": name}}, "required": ["uses"]},
                "then": {"properties": {"with": config}},
            }
        )
    stage["allOf"] = rules
    _allow_base(schema)
    return {"$schema": SCHEMA_DIALECT, **schema}


def _allow_base(schema: dict[str, Any]) -> None:
    from rlflow.schemas.inherit import BASE_KEY

    properties = schema["properties"]
    properties["stages"].update(  # items apply to a list only, additionalProperties to a mapping only
        type=["array", "object"],
        additionalProperties={"type": ["object", "null"]},
        description="The stages of one step; in a file with base:, a mapping patches the base's stages by name.",
    )
    base = {
        "type": "string",
        "title": "Base",
        "description": "A pipeline file this one builds on (relative to this "
        "file): its mapping is merged under this one's.",
    }
    schema["properties"] = {BASE_KEY: base, **properties}
    schema["if"] = {"required": [BASE_KEY]}
    schema["else"] = {"required": schema.pop("required")}

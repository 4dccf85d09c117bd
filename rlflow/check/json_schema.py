"""The JSON Schema of pipeline files (``rlflow schema``), generated from the pydantic models.

Design decisions:
- The base is ``Pipeline.model_json_schema(by_alias=True)``, so the schema cannot drift from
  the models.
- Each registered stage kind adds an ``if uses == <kind> then with: <its config schema>``
  rule to the stage definition, so editors complete and check ``with:`` keys per kind, and
  ``uses`` suggests the registered kinds (as examples: plugin kinds stay allowed).
- Values in a pipeline may be Jinja2 expressions (``"{{ n }}"``), which a schema cannot
  see through; such fields may show a warning in an editor but validate fine with rlflow.
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
        config = STAGE_KINDS.get(name).config_model.model_json_schema(
            by_alias=True, ref_template="#/$defs/{model}"
        )
        defs.update(config.pop("$defs", {}))
        rules.append({"if": {"properties": {"uses": {"const": name}}, "required": ["uses"]},
                      "then": {"properties": {"with": config}}})
    stage["allOf"] = rules
    return {"$schema": SCHEMA_DIALECT, **schema}

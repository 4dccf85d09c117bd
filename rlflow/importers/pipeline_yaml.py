"""A pipeline as YAML in the house style, for files rlflow writes (``rlflow import-verl``).

Sections as blocks in the order the pipeline format declares its fields; each resource and
each stage on one line, as the shipped pipelines write them. Comment lines have Jinja2's
delimiters broken up, since a pipeline file is rendered as a template before it is read.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel

from rlflow.schemas.pipeline import Pipeline


def render_pipeline(pipeline: dict) -> str:
    """YAML in the house style: sections as blocks, each resource and each stage on one line."""
    import yaml

    parts = []
    for key, value in _ordered(Pipeline, pipeline).items():
        if key == "stages":
            parts.append("stages:\n" + "".join(f"  - {_flow(stage)}\n" for stage in value))
        elif key == "resources":
            parts.append("resources:\n" + "".join(f"  {name}: {_flow(pool)}\n" for name, pool in value.items()))
        else:
            parts.append(yaml.safe_dump({key: value}, sort_keys=False, default_flow_style=False, width=120))
    return "".join(parts)


def _flow(value: Any) -> str:
    import yaml

    text = yaml.safe_dump(value, sort_keys=False, default_flow_style=True, width=10**6).strip()
    # PyYAML writes YAML 1.1 and quotes the key `on`; rlflow reads YAML 1.2, where it is a plain string
    return text.replace("'on': ", "on: ")


def _ordered(model: type[BaseModel], data: dict) -> dict:
    """``data`` with its keys in the order ``model`` declares its fields (nested models likewise)."""
    fields = list(model.model_fields)
    out = {}
    for key in sorted(data, key=lambda k: fields.index(k) if k in fields else len(fields)):
        value, info = data[key], model.model_fields.get(key)
        kind = info.annotation if info is not None else None
        nested = isinstance(kind, type) and issubclass(kind, BaseModel) and isinstance(value, dict)
        out[key] = _ordered(kind, value) if nested else value
    return out


def no_template(line: str) -> str:
    """A comment line with Jinja2's delimiters broken up (the file is rendered as a template)."""
    return re.sub(r"\{([{%#])", r"{ \1", line)

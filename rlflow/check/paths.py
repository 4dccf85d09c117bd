"""The rule that a pipeline's data files, databases folder and model directories (the policy's, the reward
model's, the teachers') exist.

Existence only (a ``stat`` per path, relative to the project root); ``--no-check-paths`` skips it.
Design notes: docs/design/check.md.
"""

from __future__ import annotations

import os
from pathlib import Path

from rlflow.assets import BUILT_IN_CODE, BUILTIN_PREFIX
from rlflow.io import check_regular
from rlflow.schemas.pipeline import Pipeline
from rlflow.schemas.project import ProjectConfig
from rlflow.schemas.subject import Reporter

SKIP_HINT = "or validate with --no-check-paths on a machine without the data"


def check_paths(spec: Pipeline, project: ProjectConfig, report: Reporter) -> None:
    """Report each path of ``spec`` that does not exist (or is a file where a folder is needed) at its line."""
    data, model = spec.data, spec.model
    wanted = [
        (("data", "train"), data.train, "file"),
        (("data", "val"), data.val, "file"),
        (("data", "databases"), data.databases if data.format == "bird" else None, "folder"),
        (("model", "path"), model.path, "folder"),
        (("model", "tokenizer"), model.tokenizer, "folder"),
        (("reward_model", "model_path"), spec.reward_model.model_path, "folder"),
        *(
            (("distillation", "teacher_models", name, "model_path"), teacher.model_path, "folder")
            for name, teacher in spec.distillation.teacher_models.items()
        ),
    ]
    for path, value, kind in wanted:
        if value is None or value.removeprefix(BUILTIN_PREFIX) in BUILT_IN_CODE:
            continue
        try:
            resolved = project.resolve(value)
        except ValueError as exc:  # an unknown builtin: name
            report(path, str(exc), _what(path))
            continue
        relative = (
            ""
            if value.startswith(BUILTIN_PREFIX) or Path(os.path.expanduser(value)).is_absolute()
            else f", resolved from the project root {project.root}"
        )
        if not resolved.exists():
            report(path, f"no {kind} at {resolved}{relative}", f"{_what(path)}, {SKIP_HINT}")
        elif kind == "file" and not resolved.is_file():
            report(path, f"{resolved} is {_kind(resolved)}, not a regular file", f"{_what(path)}, {SKIP_HINT}")
        elif kind == "folder" and not resolved.is_dir():
            report(path, f"{resolved} is a file, not a folder", f"{_what(path)}, {SKIP_HINT}")


def _kind(path: Path) -> str:
    """What ``path`` is when it is not a regular file: a folder, a FIFO, a device..."""
    try:
        check_regular(path)
    except OSError as exc:
        return (exc.strerror or "").split(",")[0] or "not a regular file"
    return "a regular file"


def _what(path: tuple[str, ...]) -> str:
    if path[0] == "distillation":
        return "point it at a local Hugging Face causal LM directory sharing the student's tokenizer, or builtin:tiny-rank-teacher"
    return {
        ("data", "train"): "point it at the train split file",
        ("data", "val"): "point it at the validation split file, or remove data.val",
        ("data", "databases"): "point it at the folder holding <db_id>/<db_id>.sqlite",
        (
            "model",
            "path",
        ): "point it at a local Hugging Face model directory (rlflow never downloads), builtin:tiny-qwen2 or builtin:tiny-sql-warm",
        ("model", "tokenizer"): "point it at a local tokenizer directory, or remove model.tokenizer",
        ("reward_model", "model_path"): "point it at a local Hugging Face directory (a sequence classifier for "
        "rm_score, a causal LM for judge_score), builtin:tiny-rank-rm or builtin:tiny-rank-judge",
    }[path]

"""The validator: every rule a pipeline must follow, checked at once, one layer above schemas, stages and plan.

``load_pipeline`` (``rlflow validate``, ``graph`` and ``run``) parses the file and runs every rule; all problems
are raised together in one ``ConfigError``. Design notes: docs/design/check.md.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from rlflow.check.rules import run_checks
from rlflow.schemas.pipeline_file import LoadedPipeline, parse_pipeline
from rlflow.schemas.project import ProjectConfig
from rlflow.stages import STAGE_KINDS


def config_model_of(kind: str):
    """The ``with:`` model of stage kind ``kind``, or None when no such kind is registered."""
    return STAGE_KINDS.get(kind).config_model if kind in STAGE_KINDS else None


def load_pipeline(
    path: str | os.PathLike,
    sets: Sequence[str] = (),
    project: ProjectConfig | None = None,
    *,
    check_paths: bool = True,
    drops: Sequence[str] = (),
) -> LoadedPipeline:
    """Load and validate a pipeline file; raises ConfigError holding every problem found.

    ``check_paths``: the data files, databases folder and model directory must exist (False to
    validate on a machine without the data: ``rlflow validate --no-check-paths``). ``drops``: stages
    to remove by name (``--drop``).
    """
    parsed = parse_pipeline(path, sets, project, config_model_of, drops)
    run_checks(parsed.subject, parsed.report, parsed.project, check_paths=check_paths)
    problems = parsed.all_problems()
    if problems or parsed.spec is None:
        raise parsed.errors(problems)
    return parsed.loaded()


__all__ = ["load_pipeline"]

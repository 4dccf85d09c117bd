"""The starter project shipped inside the package: what ``rlflow init`` copies, what the repository runs.

The folder is laid out as a project: ``rlflow.yaml``, ``pipelines/`` (the default pipelines),
``data/bird_sample/`` (a small BIRD-format text-to-SQL sample, made by
``scripts/make_bird_sample.py``), ``data/ranking/`` (the ranking task in verl's format,
made by ``scripts/make_ranking.py``), ``examples/ranking/`` (that task's reward function)
and ``models/tiny-sql-warm/``, ``models/tiny-sql-agent/``, ``models/tiny-rank-warm/`` (the warm starts, made by
``scripts/make_warm_start.py``). Design decisions:

- One copy. The repository's own ``rlflow.yaml`` points its vars here, and ``pipelines`` here
  is a link to the repository's ``pipelines/`` (``examples/ranking`` to the repository's
  ``examples/ranking/``; a wheel holds the files themselves), so a clone
  and an installed wheel run the same files, and a pipeline opened from the repository finds the
  repository's project file, not this one.
- Shipped as package data (plain files next to this module), read through ``__file__``: the
  model and the databases must be real files on disk anyway (Hugging Face and SQLite open
  paths), and wheels install unzipped.
- This module holds paths only; copying them into a new project is ``rlflow.cli.init``'s job.
- Names usable from any project (``BUILTIN``): ``builtin:tiny-sql-warm``, ``builtin:tiny-sql-agent``
  and ``builtin:tiny-rank-warm`` (models), ``builtin:bird_sample`` and ``builtin:ranking`` (data
  roots; ``builtin:bird_sample/train.json`` names a file in one). ``builtin:tiny-qwen2`` is a
  model built in code (``rlflow.backends.local.models``), not a folder here.
"""

from __future__ import annotations

from pathlib import Path, PurePath

ASSETS = Path(__file__).resolve().parent
PIPELINES = ASSETS / "pipelines"
BIRD_SAMPLE = ASSETS / "data" / "bird_sample"
WARM_START = ASSETS / "models" / "tiny-sql-warm"
AGENT_WARM_START = ASSETS / "models" / "tiny-sql-agent"
RANK_WARM_START = ASSETS / "models" / "tiny-rank-warm"
RANKING = ASSETS / "data" / "ranking"
BUILTIN_PREFIX = "builtin:"
BUILTIN = {
    "tiny-sql-warm": WARM_START,
    "tiny-sql-agent": AGENT_WARM_START,
    "tiny-rank-warm": RANK_WARM_START,
    "bird_sample": BIRD_SAMPLE,
    "ranking": RANKING,
}
BUILT_IN_CODE = ("tiny-qwen2",)  # built-in models made in code, not packaged folders
# what the starter project holds, relative to ASSETS (this module and caches stay behind)
STARTER_FILES = ("rlflow.yaml", "pipelines", "data", "models", "examples/ranking")


def builtin_path(path: str | PurePath) -> Path | None:
    """The packaged file or folder ``builtin:<name>[/<inside>]`` names; None for any other path (and for
    a model made in code, ``builtin:tiny-qwen2``).

    Raises ValueError for an unknown name, naming the known ones.
    """
    text = str(path)
    if not text.startswith(BUILTIN_PREFIX) or text[len(BUILTIN_PREFIX) :] in BUILT_IN_CODE:
        return None
    name, _, inside = text[len(BUILTIN_PREFIX) :].partition("/")
    if name not in BUILTIN:
        known = ", ".join(BUILTIN_PREFIX + n for n in sorted([*BUILTIN, *BUILT_IN_CODE]))
        raise ValueError(f"unknown built-in {text!r}; the packaged ones are {known}")
    return BUILTIN[name] / inside if inside else BUILTIN[name]

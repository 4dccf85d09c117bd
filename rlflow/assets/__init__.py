"""The starter project shipped inside the package: what ``rlflow init`` copies, what the repository runs.

Paths only (``rlflow.yaml``, ``pipelines/``, the sample data, the warm-start models), read through ``__file__``,
and the ``builtin:`` names any project may use (``BUILTIN``). Design notes: docs/design/assets.md.
"""

from __future__ import annotations

from pathlib import Path, PurePath

ASSETS = Path(__file__).resolve().parent
PIPELINES = ASSETS / "pipelines"
BIRD_SAMPLE = ASSETS / "data" / "bird_sample"
WARM_START = ASSETS / "models" / "tiny-sql-warm"
AGENT_WARM_START = ASSETS / "models" / "tiny-sql-agent"
RANK_WARM_START = ASSETS / "models" / "tiny-rank-warm"
RANK_TEACHER = ASSETS / "models" / "tiny-rank-teacher"  # on-policy distillation (pipelines/ranking_distill.yaml)
RANK_STUDENT = ASSETS / "models" / "tiny-rank-student"
RANK_JUDGE = ASSETS / "models" / "tiny-rank-judge"
JUDGES = ASSETS / "judges"  # shipped judge_score templates
RANK_REWARD_MODEL = ASSETS / "models" / "tiny-rank-rm"  # a sequence classifier (scripts/make_reward_model.py)
RANKING = ASSETS / "data" / "ranking"
BUILTIN_PREFIX = "builtin:"
BUILTIN = {
    "tiny-sql-warm": WARM_START,
    "tiny-sql-agent": AGENT_WARM_START,
    "tiny-rank-warm": RANK_WARM_START,
    "tiny-rank-teacher": RANK_TEACHER,
    "tiny-rank-student": RANK_STUDENT,
    "tiny-rank-judge": RANK_JUDGE,
    "ranking_judge": JUDGES / "ranking_judge.jinja",
    "tiny-rank-rm": RANK_REWARD_MODEL,
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

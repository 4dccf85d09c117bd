"""Rules for a rollout's ``multi_turn`` block beyond its schema: the verl keys it takes and ignores.

A block copied from verl loads whole (``rlflow.tools.config``). A key that verl 0.9.1's agent
loop does not read either is a warning when an enabled block sets it off verl's default, so a
value that seems to change the rollout says that it does not.
"""

from __future__ import annotations

from rlflow.schemas.subject import Reporter, Subject
from rlflow.tools.config import MultiTurnConfig


def check_multi_turn(subject: Subject, report: Reporter) -> None:
    for i, _ in subject.stages:
        turns = getattr(subject.configs.get(i), "multi_turn", None)  # a stage kind without the block has none
        if not isinstance(turns, MultiTurnConfig) or not turns.enable:
            continue
        for key, why in turns.ignored_settings():
            default = MultiTurnConfig.model_fields[key].default
            report.warn(
                ("stages", i, "with", "multi_turn", key),
                f"{getattr(turns, key)!r} is ignored: verl 0.9.1's agent loop does not read {key} either, and in "
                f"rlflow {why}",
                f"remove it, or leave verl's default ({default!r})",
            )

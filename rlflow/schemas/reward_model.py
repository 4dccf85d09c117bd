"""The ``reward_model:`` block: the model a scoring or judging reward stage runs (verl: reward.reward_model.*).

One block declares the model; the stage that uses it (``rm_score`` for a sequence classifier, ``judge_score``
for a generative judge) says where it runs. Pure: pydantic only. Design notes: docs/design/reward_models.md.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rlflow.schemas.strict import StrictModel


class JudgeRolloutSpec(StrictModel):
    """How a generative judge writes its verdict (verl: reward.reward_model.rollout.*)."""

    temperature: float = Field(0.0, ge=0, description="0: greedy verdicts (the same answer scores the same).")
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(-1, ge=-1, description="-1: no top-k cut.")
    prompt_length: int = Field(512, gt=0, description="The longest judging prompt, in the judge's tokens.")
    response_length: int = Field(8, gt=0, description="The longest verdict, in the judge's tokens.")


class RewardModelSpec(StrictModel):
    """A reward model beside the policy (verl: reward.reward_model.*)."""

    enable: bool | None = Field(
        None, description="null: on when a stage scores with the reward model (verl: reward.reward_model.enable)."
    )
    model_path: str | None = Field(
        None,
        description="A local Hugging Face directory or builtin:<name>: a sequence classifier for rm_score, a causal "
        "LM for judge_score (verl: reward.reward_model.model_path).",
    )
    enable_resource_pool: bool | None = Field(
        None,
        description="true: its stage must run on a resource of its own; false: colocated with the actor; null: "
        "wherever its stage's `on:` puts it (verl: reward.reward_model.enable_resource_pool).",
    )
    dtype: Literal["float32", "bfloat16", "float16"] | None = Field(None, description="null: model.dtype.")
    micro_batch_size_per_gpu: int | None = Field(
        None, gt=0, description="Rows per forward; null: trainer.log_prob_micro_batch_size_per_gpu, else all."
    )
    max_length: int | None = Field(
        None, gt=0, description="Tokens a scored (prompt, response) may hold; longer ones keep their tail."
    )
    combine: Literal["replace", "add"] = Field(
        "replace",
        description="How its score meets a rule reward stage's: replace (verl's manner: the model's score is the "
        "training reward, the rule's is still reported) or add (rule + weight x model).",
    )
    weight: float = Field(1.0, allow_inf_nan=False, description="The model's score is multiplied by this.")
    rollout: JudgeRolloutSpec = JudgeRolloutSpec()

"""The generate stage's ``multi_turn`` block: verl's ``actor_rollout_ref.rollout.multi_turn`` keys and defaults.

Design notes: docs/design/tools.md.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

VERL_TARGET = "verl.workers.config.MultiTurnConfig"  # the block's Hydra `_target_` in verl's rollout.yaml
# verl's keys that verl 0.9.1's ToolAgentLoop does not read: why rlflow has no use for each either
IGNORED = {
    "use_inference_chat_template": "the transcript keeps the tokens the model sampled",
    "tokenization_sanity_check_mode": "each tool turn is tokenized as the chat template's delta, so there is "
    "no turn-by-turn tokenization to compare with a whole one",
    "num_repeat_rollouts": "samples per prompt are algorithm.n (or the generate stage's n)",
}
IGNORED_NOTE = "verl's key, accepted and ignored (verl 0.9.1's agent loop does not read it either)."


class MultiTurnConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enable: bool = False
    max_assistant_turns: int | None = Field(None, ge=1, description="Model turns per trajectory; null: no limit.")
    max_user_turns: int | None = Field(None, ge=1, description="Tool turns per trajectory; null: no limit.")
    max_parallel_calls: int = Field(1, ge=1, description="Tool calls run per model turn; later ones are dropped.")
    max_tool_response_length: int = Field(256, ge=1, description="Characters of a tool's answer kept (as verl).")
    tool_response_truncate_side: Literal["left", "middle", "right"] = "middle"
    format: Literal["hermes"] = "hermes"
    tool_config_path: str | None = Field(
        None, description="verl tool-config YAML: tools: [{class_name, config, tool_schema}]."
    )
    function_tool_path: str | None = Field(None, description="Python file of @function_tool functions.")
    use_inference_chat_template: bool = Field(False, description=IGNORED_NOTE)
    tokenization_sanity_check_mode: Literal["disable", "strict", "ignore_strippable"] = Field(
        "strict", description=IGNORED_NOTE
    )
    num_repeat_rollouts: int | None = Field(None, description=IGNORED_NOTE)
    invalid_tool_calls: Literal["drop", "error_observation"] = Field(
        "drop",
        description="A call verl's hermes parser drops (not JSON, not an object, no name or arguments): drop, as "
        "verl (a turn left without calls ends the trajectory), or error_observation: answer it with the error "
        "and give the model another turn.",
    )
    tool_timeout_s: float = Field(10.0, gt=0, description="Per tool call: past it the tool process is killed.")
    tool_max_memory_mb: int | None = Field(1024, ge=64, description="Address-space cap of the tool process.")

    @model_validator(mode="before")
    @classmethod
    def _drop_hydra_target(cls, data):
        """A block copied from verl's rollout.yaml names its dataclass for Hydra; rlflow needs no such hint."""
        if isinstance(data, dict) and data.get("_target_") == VERL_TARGET:
            return {key: value for key, value in data.items() if key != "_target_"}
        return data

    @property
    def has_tools(self) -> bool:
        return bool(self.tool_config_path or self.function_tool_path)

    def ignored_settings(self) -> list[tuple[str, str]]:
        """(key, why rlflow ignores it) for each ``IGNORED`` key set off verl's default."""
        defaults = type(self).model_fields
        return [(key, why) for key, why in IGNORED.items() if getattr(self, key) != defaults[key].default]

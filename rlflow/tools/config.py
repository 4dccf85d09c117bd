"""The generate stage's ``multi_turn`` block: verl's ``actor_rollout_ref.rollout.multi_turn`` keys and defaults.

verl's keys keep verl's meaning (verl/trainer/config/rollout/rollout.yaml); ``tool_timeout_s``
and ``tool_max_memory_mb`` are rlflow's: the per-call deadline and the address-space cap of the
tool process (verl runs tools in its agent-loop worker, with neither).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


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
    use_inference_chat_template: bool = False
    tool_timeout_s: float = Field(10.0, gt=0, description="Per tool call: past it the tool process is killed.")
    tool_max_memory_mb: int | None = Field(1024, ge=64, description="Address-space cap of the tool process.")

    @property
    def has_tools(self) -> bool:
        return bool(self.tool_config_path or self.function_tool_path)

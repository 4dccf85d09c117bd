"""Stage ``generate``: expand each prompt into ``algorithm.n`` samples and sample responses.

verl step 1 ([gen]). Rows are repeated n times (interleaved) on the worker, so a prompt's
group never straddles two workers; the rollout engine then samples with the pipeline's
temperature / top_p / top_k up to ``data.max_response_length`` tokens.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rlflow.stages.base import StageConfig, StageContext, StageKind
from rlflow.stages.registry import register_stage


class GenerateConfig(StageConfig):
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(-1, ge=-1)
    do_sample: bool = True
    engine: Literal["torch", "hf", "vllm"] = "torch"
    n: int | None = Field(None, ge=1, description="Samples per prompt; defaults to algorithm.n (validation uses its own).")


@register_stage
class Generate(StageKind):
    name = "generate"
    config_model = GenerateConfig
    verl_timer = "gen"
    reads_fields = ("prompts", "prompt_mask", "rollout_weights")
    writes_fields = ("responses", "response_mask", "response_text")
    allowed_on = frozenset({"local", "remote"})
    changes_rows = True
    description = "Sample n responses per prompt with the rollout engine."

    def run(self, batch, ctx: StageContext):
        from rlflow.stages.impl.generate import run_generate

        return run_generate(batch, ctx)

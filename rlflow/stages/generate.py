"""Stage ``generate``: expand each prompt into ``algorithm.n`` samples and sample responses.

verl step 1 ([gen]). Design notes: docs/design/stages.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field, ValidationError

from rlflow.stages import rollout_correction
from rlflow.stages.base import StageConfig, StageContext, StageKind
from rlflow.stages.registry import builtin_stage
from rlflow.tools.config import MultiTurnConfig
from rlflow.tools.files import tool_file_problems

if TYPE_CHECKING:  # pragma: no cover
    from rlflow.batch import Batch


class GenerateConfig(StageConfig):
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(-1, ge=-1)
    do_sample: bool = True
    engine: Literal["torch", "hf", "vllm"] = "torch"
    n: int | None = Field(
        None, ge=1, description="Samples per prompt; defaults to algorithm.n (validation uses its own)."
    )
    max_num_seqs: int | None = Field(
        None,
        ge=1,
        description="Rows a local torch rollout decodes at once, bounding its KV cache (verl: rollout.max_num_seqs); "
        "unset: 64 on a CPU, all rows on a GPU.",
    )
    multi_turn: MultiTurnConfig = Field(
        default_factory=MultiTurnConfig,
        description="verl's rollout.multi_turn: tool-calling rollouts (enable, tool_config_path, function_tool_path...).",
    )


def generation_seed(seed: int, step: int, rank: int) -> int:
    """A non-negative 63-bit seed, distinct per (seed, step, rank)."""
    return (seed * 1_000_003 + step * 10_007 + rank * 101 + 17) % (2**63)


def generation_params(ctx: StageContext) -> dict:
    cfg = ctx.config
    turns = getattr(cfg, "multi_turn", None)  # a plugin rollout's config may have none
    return {
        "temperature": cfg.temperature,
        "top_p": cfg.top_p,
        "top_k": cfg.top_k,
        "do_sample": cfg.do_sample,
        "max_response_length": ctx.pipeline.data.max_response_length,
        "engine": cfg.engine,
        "max_num_seqs": cfg.max_num_seqs,
        "seed": generation_seed(ctx.pipeline.trainer.seed, ctx.step, ctx.rank),
        **({"multi_turn": turns.model_dump()} if turns is not None and turns.enable else {}),
    }


@builtin_stage
class Generate(StageKind):
    name = "generate"
    role = "rollout"
    engine_roles = frozenset({"rollout"})
    config_model = GenerateConfig
    verl_timer = "gen"
    reads_fields = ("prompts", "prompt_mask", "rollout_weights")
    writes_fields = ("responses", "response_mask", "response_text")
    allowed_on = frozenset({"local", "remote"})
    changes_rows = True
    description = "Sample n responses per prompt with the rollout engine."

    @classmethod
    def sampling(cls, pipeline, stage) -> dict:
        config = cls.parse_config(stage.with_)
        return {**super().sampling(pipeline, stage), "n": config.n or pipeline.algorithm.n}

    @classmethod
    def multi_turn_on(cls, stage) -> bool:
        """Whether ``stage`` runs the agent loop (a plugin subclass's config may have no ``multi_turn``; a
        ``with:`` that does not parse is reported by the rule that checks it, not here)."""
        try:
            turns = getattr(cls.parse_config(stage.with_), "multi_turn", None)
        except ValidationError:
            return False
        return bool(turns is not None and turns.enable)

    @classmethod
    def reads(cls, pipeline, stage):
        return cls.reads_fields + (("reward_info",) if cls.multi_turn_on(stage) else ())  # its tools_kwargs

    @classmethod
    def writes(cls, pipeline, stage):
        keeps = rollout_correction.keeps_rollout_log_probs(pipeline)
        turns = cls.multi_turn_on(stage)
        return (
            cls.writes_fields
            + ((rollout_correction.ROLLOUT_LOG_PROBS,) if keeps else ())
            + (("num_turns", "tool_call_counts") if turns else ())
        )

    @classmethod
    def check_in_project(cls, pipeline, stage, project_root):
        """The tool files of an enabled ``multi_turn`` block: readable, each schema valid (file and line named)."""
        try:
            config = cls.parse_config(stage.with_)
        except ValidationError:
            return []  # reported by the rule that checks each `with:`
        if not cls.multi_turn_on(stage):
            return []
        resource = pipeline.resources.get(stage.on)
        if resource is not None and resource.type == "remote" and not _runs_agent_loop(resource.backend):
            return [  # it would silently roll out single turns
                (
                    "with.multi_turn.enable",
                    f"remote backend {resource.backend!r} (resource {stage.on!r}) does not run multi-turn rollouts "
                    "(its class does not set runs_agent_loop)",
                    "put the generate stage on a local pool or on a backend that does (rlflow backend list), "
                    "or turn multi_turn off",
                )
            ]
        problems = tool_file_problems(config.multi_turn, Path(project_root), pipeline.data.prompt_template)
        return [(f"with.multi_turn.{field}", message, fix) for field, message, fix in problems]

    def run(self, batch: Batch, ctx: StageContext) -> Batch:
        rows = batch.repeat_interleave(ctx.config.n or ctx.pipeline.algorithm.n)
        rows.update(ctx.engine.generate(ctx.inputs(rows), generation_params(ctx)))
        return rows


def _runs_agent_loop(backend: str) -> bool:
    """Whether the registered remote backend ``backend`` runs the agent loop (an unknown one is reported elsewhere)."""
    from rlflow.backends.remote.registry import REMOTE_BACKENDS

    return backend not in REMOTE_BACKENDS or bool(REMOTE_BACKENDS.get(backend).runs_agent_loop)

"""Stage ``reward_function``: score rows with Python reward functions of verl's custom-reward signature.

The functions run in a supervised child process per worker (``rlflow.reward.function_calls``); a failed call
is that row's 0. Design notes: docs/design/stages.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field, ValidationError, model_validator

from rlflow.reward.function_scores import WeightedFunction, call_arguments, combine
from rlflow.reward.functions import FunctionLoadError, load_function, parse_reference
from rlflow.reward.overlong import OverlongBuffer, shape_scores
from rlflow.stages.base import StageConfig, StageContext, StageKind
from rlflow.stages.model_scores import combined, rule_reward_reads
from rlflow.stages.registry import builtin_stage
from rlflow.stages.token_scores import place_on_last_token, response_lengths

if TYPE_CHECKING:  # pragma: no cover
    from rlflow.batch import Batch
    from rlflow.schemas.pipeline import Pipeline, StageSpec

_REFERENCE = "`package.module:callable` or `path/to/file.py:callable` (relative to the project root)"


class FunctionEntry(StageConfig):
    function: str = Field(description=f"The reward function: {_REFERENCE}.")
    weight: float = Field(1.0, allow_inf_nan=False, description="Its weight in the row's score (a finite number).")
    name: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="Prefix of its reward_extra keys and metrics (default: the callable's name).",
    )


class RewardFunctionConfig(StageConfig):
    function: str | None = Field(None, description=f"One reward function: {_REFERENCE}.")
    functions: list[FunctionEntry] | None = Field(
        None, min_length=1, description="Several reward functions; a row's score is their weighted sum."
    )
    timeout_s: float = Field(5.0, gt=0, allow_inf_nan=False, description="Time limit of one call of a function.")
    max_memory_mb: int | None = Field(
        4096, ge=256, description="Address-space limit of the functions' process (MB); null for none."
    )
    overlong_buffer: OverlongBuffer = Field(
        OverlongBuffer(),
        description="DAPO's overlong reward shaping (verl: reward_model.overlong_buffer), measured against "
        "data.max_response_length.",
    )

    @model_validator(mode="after")
    def _one_way(self) -> RewardFunctionConfig:
        if (self.function is None) == (self.functions is None):
            raise ValueError("give exactly one of `function` (one reward function) or `functions` (a weighted list)")
        seen: dict[str, int] = {}
        for i, fn in enumerate(self.weighted()):
            if fn.name in seen:
                raise ValueError(
                    f"functions[{seen[fn.name]}] and functions[{i}] are both named {fn.name!r}; "
                    "give each its own `name:`"
                )
            seen[fn.name] = i
        return self

    def weighted(self) -> list[WeightedFunction]:
        """The functions with their weights and names (a reference that does not parse is named by its text)."""
        entries = self.functions if self.functions is not None else [FunctionEntry(function=self.function)]
        return [WeightedFunction(e.function, e.weight, e.name or _default_name(e.function)) for e in entries]

    def reference_paths(self) -> list[tuple[str, str]]:
        """(dotted path under the stage, reference) of each function, for diagnostics."""
        if self.functions is None:
            return [("with.function", self.function)]
        return [(f"with.functions[{i}].function", e.function) for i, e in enumerate(self.functions)]


def _default_name(reference: str) -> str:
    try:
        return parse_reference(reference).default_name
    except FunctionLoadError:
        return reference


@builtin_stage
class RewardFunction(StageKind):
    name = "reward_function"
    role = "reward"
    config_model = RewardFunctionConfig
    verl_timer = "reward"
    reads_fields = ("response_text", "response_mask", "data_source", "reward_info")
    writes_fields = ("token_level_scores", "scores")

    @classmethod
    def reads(cls, pipeline: Pipeline, stage: StageSpec) -> tuple[str, ...]:
        return rule_reward_reads(pipeline, cls.reads_fields)

    allowed_on = frozenset({"cpu", "driver", "local"})
    uses_torch = False
    description = "Python reward functions (verl's compute_score signature), run in a child process per worker."

    @classmethod
    def check_in_project(cls, pipeline: Pipeline, stage: StageSpec, project_root: Path) -> list[tuple[str, ...]]:
        """Every function loads from the project root and takes verl's four keywords."""
        try:
            config = cls.parse_config(stage.with_)
        except ValidationError:
            return []  # reported by the rule that checks each `with:`
        problems: list[tuple[str, ...]] = []
        overlong = config.overlong_buffer.problem(pipeline.data.max_response_length)
        if overlong:
            fix = f"set it between 1 and {pipeline.data.max_response_length}, or enable: false"
            problems.append(("with.overlong_buffer.len", overlong, fix))
        for path, reference in config.reference_paths():
            try:
                load_function(parse_reference(reference), project_root)
            except FunctionLoadError as exc:
                problems.append((path, exc.message, exc.fix))
        return problems

    def run(self, batch: Batch, ctx: StageContext) -> Batch:
        """Score ``batch``'s rows; adds ``token_level_scores``, ``scores``, ``reward_extra`` and reward metrics."""
        import numpy as np

        from rlflow.reward.function_calls import FunctionRunner

        config: RewardFunctionConfig = ctx.config
        functions = config.weighted()
        key = f"reward_function:{ctx.stage_name}"
        held = ctx.state.get(key)
        if held is None or held[0] != config:
            if held is not None:
                held[1].close()
            root = ctx.project_root or str(Path.cwd())
            log_path = Path(ctx.run_dir) / "rewards" / f"{ctx.stage_name}.rank{ctx.rank}.log" if ctx.run_dir else None
            references = [f.reference for f in functions]
            runner = FunctionRunner(references, root, config.timeout_s, config.max_memory_mb, log_path)
            ctx.at_shutdown.callback(runner.close)
            held = ctx.state[key] = (config, runner, set())
        _, runner, warned = held
        sources = [str(s) for s in batch["data_source"]]
        outcomes = runner.run(call_arguments(sources, batch["response_text"], batch["reward_info"]))
        scored = combine(functions, outcomes, sources, warned, ctx.step)
        if config.overlong_buffer.enable:
            lengths = response_lengths(batch["response_mask"])  # a transcript's tool answers count, as in verl
            max_len = ctx.pipeline.data.max_response_length
            scored.scores, metrics = shape_scores(
                scored.scores, lengths, config.overlong_buffer, max_len, scored.extras
            )
            scored.metrics.update(metrics)
        scores = combined(scored.scores, batch, ctx.pipeline)
        batch["token_level_scores"] = place_on_last_token(scores, batch["response_mask"])
        batch["scores"] = np.asarray(scores, dtype=np.float32)
        batch["reward_extra"] = scored.extras
        batch.metrics.update(scored.metrics)
        return batch

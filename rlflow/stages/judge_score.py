"""Stage ``judge_score``: a generative judge (a causal LM) writes a verdict on each row; a parser scores it.

The judging prompt is a sandboxed Jinja2 template (``rlflow.reward.judge_template``); the judge is the
``reward_model:`` block's model, decoding with ``reward_model.rollout`` (``rlflow.backends.local.judge``);
the verdict is parsed by a built-in pattern (``rlflow.reward.verdicts``) or a user function run in the
reward sandbox. A malformed verdict scores 0 and is counted, never fatal. Its score meets the rule rewards
as ``rlflow.stages.model_scores`` says. Design notes: docs/design/reward_models.md.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field, ValidationError

from rlflow.reward.judge_template import JudgeTemplateError, load_template, render_messages, row_variables
from rlflow.reward.verdicts import BUILTIN_PARSERS, parse_builtin
from rlflow.stages.base import StageConfig, StageContext, StageKind
from rlflow.stages.model_scores import model_reward_writes, model_scores_batch
from rlflow.stages.registry import builtin_stage

if TYPE_CHECKING:  # pragma: no cover
    from rlflow.batch import Batch
    from rlflow.schemas.pipeline import Pipeline, StageSpec

log = logging.getLogger(__name__)


class JudgeScoreConfig(StageConfig):
    template: str = Field(
        description="The judging prompt: a Jinja2 file relative to the project root, or builtin:<name> "
        "(builtin:ranking_judge). It gets prompt, response, data_source, ground_truth and extra_info."
    )
    parse: str = Field(
        "yes_no",
        description="yes_no (first word yes: 1, no: 0), score (the number after 'Score:', clipped to [0, 10], "
        "/ 10), or a function `path.py:callable` / `module:callable` with verl's compute_score signature, "
        "called with the verdict as solution_str.",
    )
    timeout_s: float = Field(5.0, gt=0, allow_inf_nan=False, description="Time limit of one parse function call.")
    max_memory_mb: int | None = Field(
        4096, ge=256, description="Address-space limit of the parse function's process (MB); null for none."
    )

    @property
    def parse_function(self) -> str | None:
        return None if self.parse in BUILTIN_PARSERS else self.parse


@builtin_stage
class JudgeScore(StageKind):
    name = "judge_score"
    role = "reward_model"
    engine_roles = frozenset({"judge"})
    allowed_on = frozenset({"local"})
    config_model = JudgeScoreConfig
    uses_torch = False  # its fields are numpy (scores, masks, text); the judge's torch stays in the engine
    reads_fields = ("raw_prompt", "response_text", "response_mask", "data_source", "reward_info")
    description = "A generative judge's verdict on each response, parsed to a score (verl's generative reward model)."

    @classmethod
    def writes(cls, pipeline: Pipeline, stage: StageSpec) -> tuple[str, ...]:
        return model_reward_writes(pipeline)

    @classmethod
    def check_in_project(cls, pipeline: Pipeline, stage: StageSpec, project_root: Path) -> list[tuple[str, ...]]:
        """The template exists and parses; a parse function loads and takes verl's keywords."""
        from rlflow.reward.functions import FunctionLoadError, load_function, parse_reference

        try:
            config = cls.parse_config(stage.with_)
        except ValidationError:
            return []  # reported by the rule that checks each `with:`
        problems: list[tuple[str, ...]] = []
        if not pipeline.reward_model.model_path:
            problems.append(("uses", "judge_score needs the judge's model", "set reward_model.model_path"))
        try:
            load_template(config.template, project_root)
        except JudgeTemplateError as exc:
            problems.append(("with.template", exc.message, exc.fix))
        if config.parse_function is not None:
            try:
                load_function(parse_reference(config.parse_function), project_root)
            except FunctionLoadError as exc:
                fix = f"{exc.fix}; or use a built-in pattern: {', '.join(BUILTIN_PARSERS)}"
                problems.append(("with.parse", exc.message, fix))
        return problems

    def run(self, batch: Batch, ctx: StageContext) -> Batch:
        import numpy as np

        config: JudgeScoreConfig = ctx.config
        template = _held(ctx, "template", config, lambda: load_template(config.template, _root(ctx)))
        rows = [
            row_variables(*values)
            for values in zip(
                batch["raw_prompt"], batch["response_text"], batch["data_source"], batch["reward_info"], strict=True
            )
        ]
        messages, failures = render_messages(template, rows)
        if failures and len(failures) == len(rows):
            from rlflow.errors import StageError

            raise StageError(f"judge template: every row failed to render; the first: {failures[0]}")
        if failures:
            _warn_once(ctx, "template", f"judge template failed on {len(failures)} row(s), scored 0: {failures[0]}")
        verdicts = self._verdicts(messages, ctx)
        scores = self._parse(verdicts, batch, ctx)
        bad = sum(s is None for s, m in zip(scores, messages, strict=True) if m is not None)
        n = max(len(rows), 1)
        metrics = {
            "reward_model/parse_error_ratio": bad / n,
            "reward_model/template_error_ratio": len(failures) / n,
        }
        if bad:
            first = next(v for v, s, m in zip(verdicts, scores, messages, strict=True) if s is None and m is not None)
            _warn_once(ctx, "parse", f"judge verdict not parsed by {config.parse!r}, scored 0: {first[:200]!r}")
        raw = np.asarray([0.0 if s is None else s for s in scores], dtype=np.float32)
        return model_scores_batch(raw, batch, ctx.pipeline, metrics)

    def _verdicts(self, messages: list, ctx: StageContext) -> list[str | None]:
        """The judge's verdict per row (None where the template failed: such rows are not judged)."""
        from rlflow.batch import Batch

        rm = ctx.pipeline.reward_model
        judged = [i for i, m in enumerate(messages) if m is not None]
        out: list[str | None] = [None] * len(messages)
        if not judged:
            return out
        params = {
            **rm.rollout.model_dump(),
            "micro_batch_size": rm.micro_batch_size_per_gpu or ctx.pipeline.trainer.log_prob_micro_batch_size_per_gpu,
            "seed": ctx.pipeline.trainer.seed + ctx.step,  # sampled verdicts differ by step, reproducibly
        }
        request = Batch(non_tensors={"judge_prompt": [messages[i] for i in judged]})
        for i, verdict in zip(judged, ctx.engine.judge(request, params)["verdict_text"], strict=True):
            out[i] = verdict
        return out

    def _parse(self, verdicts: list[str | None], batch: Batch, ctx: StageContext) -> list[float | None]:
        config: JudgeScoreConfig = ctx.config
        if config.parse_function is None:
            return parse_builtin(config.parse, verdicts)
        from rlflow.reward.function_scores import call_arguments

        runner = _held(ctx, "runner", config, lambda: _runner(config, ctx))
        judged = [i for i, v in enumerate(verdicts) if v is not None]
        sources = [str(batch["data_source"][i]) for i in judged]
        infos = [batch["reward_info"][i] for i in judged]
        outcomes = runner.run(call_arguments(sources, [verdicts[i] for i in judged], infos))
        scores: list[float | None] = [None] * len(verdicts)
        for i, (outcome,) in zip(judged, outcomes, strict=True):
            scores[i] = None if outcome.failure else outcome.score
            if outcome.failure:
                _warn_once(ctx, f"function {outcome.kind}", f"judge parse function {outcome.kind}: {outcome.detail}")
        return scores


def _root(ctx: StageContext) -> str:
    return ctx.project_root or str(Path.cwd())


def _held(ctx: StageContext, what: str, config: JudgeScoreConfig, make):
    """A per-worker object made once per config (the template, the parse function's process)."""
    key = f"judge_score:{ctx.stage_name}:{what}"
    held = ctx.state.get(key)
    if held is None or held[0] != config:
        if held is not None and hasattr(held[1], "close"):
            held[1].close()
        held = ctx.state[key] = (config, make())
    return held[1]


def _runner(config: JudgeScoreConfig, ctx: StageContext):
    from rlflow.reward.function_calls import FunctionRunner

    log_path = Path(ctx.run_dir) / "rewards" / f"{ctx.stage_name}.rank{ctx.rank}.log" if ctx.run_dir else None
    runner = FunctionRunner([config.parse_function], _root(ctx), config.timeout_s, config.max_memory_mb, log_path)
    ctx.at_shutdown.callback(runner.close)
    return runner


def _warn_once(ctx: StageContext, kind: str, message: str) -> None:
    warned = ctx.state.setdefault(f"judge_score:{ctx.stage_name}:warned", set())
    if kind not in warned:
        warned.add(kind)
        log.warning("stage %s: %s (logged once per kind)", ctx.stage_name, message)

"""``run_generate``: expand each prompt into n rows on the worker and sample responses.

Design decisions:
- Rows are repeated (interleaved, as verl's ``repeat(interleave=True)``) here on the worker,
  so a prompt's group never straddles two workers and the driver ships each prompt once.
- Only ``prompts`` / ``prompt_mask`` go to the engine (they are all it needs, and a remote
  engine gets a small message); the stage returns the whole expanded batch with the
  engine's ``responses``, ``response_mask`` and ``response_text`` added.
- The sampling seed is derived from (trainer.seed, step, rank): a rerun samples the same
  tokens, different ranks and steps sample different ones.
"""

from __future__ import annotations

from rlflow.batch import Batch
from rlflow.stages.base import StageContext


def generation_seed(seed: int, step: int, rank: int) -> int:
    """A non-negative 63-bit seed, distinct per (seed, step, rank)."""
    return (seed * 1_000_003 + step * 10_007 + rank * 101 + 17) % (2**63)


def generation_params(ctx: StageContext) -> dict:
    cfg = ctx.config
    return {
        "temperature": cfg.temperature, "top_p": cfg.top_p, "top_k": cfg.top_k, "do_sample": cfg.do_sample,
        "max_response_length": ctx.pipeline.data.max_response_length, "engine": cfg.engine,
        "seed": generation_seed(ctx.pipeline.trainer.seed, ctx.step, ctx.rank),
    }


def run_generate(batch: Batch, ctx: StageContext) -> Batch:
    cfg = ctx.config
    n = cfg.n or ctx.pipeline.algorithm.n
    rows = batch.repeat_interleave(n)
    out = ctx.engine.generate(rows.select(("prompts", "prompt_mask")), generation_params(ctx))
    rows.update(out)
    return rows

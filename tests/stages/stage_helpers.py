"""Helpers for running stage kinds in-process on the tiny model (no Ray).

``data_batch`` builds what the data loader hands the first stage (left-padded ``prompts``,
``prompt_mask``, ``uid``, ``data_source``, ``raw_prompt``, ``reward_info``); ``text_reward``
plays the reward stage with a rule on the response text (1.0 when it contains ``SELECT``,
else a small length-dependent score so groups vary), writing ``scores`` and
``token_level_scores`` on the last response token as the real reward does.
"""

from __future__ import annotations

import torch

from rlflow.batch import Batch
from rlflow.plan.compile import rollout_sampling
from rlflow.schemas.pipeline import Pipeline
from rlflow.stages import get_stage_kind
from rlflow.stages.base import StageContext

TEXTS = ["How many singers are there?", "List the names of all shops in Boston.", "SELECT"]


def make_pipeline(
    *, algorithm: dict | None = None, trainer: dict | None = None, generate: dict | None = None, with_ref: bool = False
) -> Pipeline:
    stages = [
        {"name": "generate", "uses": "generate", "on": "pool", "with": generate or {}},
        {"name": "old_log_prob", "uses": "old_log_prob", "on": "pool"},
        {"name": "advantage", "uses": "grpo_advantage", "on": "driver"},
        {"name": "update_actor", "uses": "update_actor", "on": "pool"},
        {"name": "sync_weights", "uses": "sync_weights", "on": "pool"},
    ]
    if with_ref:
        stages.insert(2, {"name": "ref_log_prob", "uses": "ref_log_prob", "on": "pool"})
    if (algorithm or {}).get("adv_estimator") == "gae":  # PPO: the critic's two stages around the advantage
        at = [s["name"] for s in stages].index("advantage")
        stages[at:at] = [{"name": "values", "uses": "compute_values", "on": "pool"}]
        stages.insert(at + 2, {"name": "update_critic", "uses": "update_critic", "on": "pool"})
    return Pipeline.model_validate(
        {
            "name": "stage-test",
            "data": {"train": "train.json", "max_prompt_length": 32, "max_response_length": 8},
            "algorithm": {"n": 2, **(algorithm or {})},
            "trainer": {
                "train_batch_size": 3,
                "ppo_mini_batch_size": 3,
                "seed": 7,
                "optim": {"lr": 1e-3},
                **(trainer or {}),
            },
            "resources": {"pool": {"type": "local", "device": "cpu"}},
            "stages": stages,
        }
    )


def data_batch(tokenizer, step: int = 1, texts: list[str] = TEXTS) -> Batch:
    from rlflow.backends.local.models import build_prompt_batch

    batch = build_prompt_batch(tokenizer, texts, 32)
    batch["uid"] = [f"s{step}-p{i}" for i in range(len(texts))]
    batch["data_source"] = ["bird"] * len(texts)
    batch["raw_prompt"] = list(texts)
    batch["reward_info"] = [{"db_id": "shop", "gold": "SELECT 1"} for _ in texts]
    return batch


def run_stage(pipeline: Pipeline, engine, name: str, batch: Batch, step: int = 1, config: dict | None = None) -> Batch:
    spec = pipeline.stage(name)
    kind = get_stage_kind(spec.uses)
    ctx = StageContext(
        pipeline=pipeline,
        config=kind.parse_config(spec.with_ if config is None else config),
        stage_name=name,
        step=step,
        engine=engine,
        reads=kind.reads(pipeline, spec),
        sampling=dict(rollout_sampling(pipeline)) if kind.needs_sampling else {},
    )
    return kind().run(batch, ctx)


def text_reward(batch: Batch) -> Batch:
    scores = torch.tensor([1.0 if "SELECT" in text else (len(text) % 5) / 10 for text in batch["response_text"]])
    last = (batch["response_mask"].sum(-1) - 1).clamp(min=0)
    token_level = torch.zeros(batch["responses"].shape)
    token_level[torch.arange(len(batch)), last] = scores
    extra = [{"acc": float(s == 1.0), "format_ok": 1.0} for s in scores.tolist()]
    return Batch({"scores": scores, "token_level_scores": token_level}, {"reward_extra": extra})

"""Helpers shared by the local-backend tests (imported by name: ``from local_helpers import ...``).

``sharpen`` re-draws a model's matrices with a larger scale: a freshly initialised model's
logits are nearly flat, so its greedy output is one repeated token and would make
greedy-agreement tests pass vacuously.
"""

from __future__ import annotations

import torch

from rlflow.schemas.pipeline import Pipeline

PROMPTS = ["How many singers are there?", "List the names of all shops in Boston.", "SELECT"]
READINGS = ("perf/mfu/", "actor/perf/")  # wall-clock and memory readings: two runs of one update differ there


def without_readings(metrics: dict[str, float]) -> dict[str, float]:
    """An update's metrics less its MFU and memory readings (what a replay must reproduce exactly)."""
    return {k: v for k, v in metrics.items() if not k.startswith(READINGS)}


def make_pipeline(
    *,
    algorithm: dict | None = None,
    trainer: dict | None = None,
    data: dict | None = None,
    generate: dict | None = None,
    model: dict | None = None,
) -> Pipeline:
    """A valid pipeline for the tiny model with the given section overrides."""
    return Pipeline.model_validate(
        {
            "name": "local-test",
            "model": model or {},
            "data": {"train": "train.json", "max_prompt_length": 32, "max_response_length": 8, **(data or {})},
            "algorithm": {"n": 2, **(algorithm or {})},
            "trainer": {
                "train_batch_size": 2,
                "ppo_mini_batch_size": 2,
                "seed": 5,
                "optim": {"lr": 1e-3},
                **(trainer or {}),
            },
            "resources": {"pool": {"type": "local", "device": "cpu"}},
            "stages": [
                {"name": "generate", "uses": "generate", "on": "pool", "with": generate or {}},
                {"name": "old_log_prob", "uses": "old_log_prob", "on": "pool"},
                {"name": "advantage", "uses": "grpo_advantage", "on": "driver"},
                {"name": "update_actor", "uses": "update_actor", "on": "pool"},
                {"name": "sync_weights", "uses": "sync_weights", "on": "pool"},
            ],
        }
    )


def sharpen(model, seed: int = 0, scale: float = 0.15):
    """Re-draw every weight matrix from N(0, scale) so the logits are peaked (see module docstring)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 2:
                param.normal_(0.0, scale, generator=gen)
    return model

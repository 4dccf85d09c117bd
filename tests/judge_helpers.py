"""Helpers for the judge_score tests: a tiny judge saved as a Hugging Face directory, pipelines and batches."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rlflow.batch import Batch
from rlflow.schemas.pipeline import Pipeline


def save_tiny_judge(out: Path) -> Path:
    """A random 1-layer Qwen2 with the built-in tokenizer and chat template (tiny-rank-warm's), saved to ``out``."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from rlflow.data.tokenizer import load_tokenizer
    from rlflow.schemas.pipeline import ModelSpec

    tokenizer = load_tokenizer(ModelSpec(path="builtin:tiny-rank-warm"))
    config = Qwen2Config(
        vocab_size=-(-len(tokenizer) // 64) * 64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        Qwen2ForCausalLM(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def judge_pipeline(model_path: str, *, judge: dict | None = None, rollout: dict | None = None) -> Pipeline:
    """A pipeline whose judge_score stage (named ``judge``) is the only reward."""
    return Pipeline.model_validate(
        {
            "name": "judge-test",
            "data": {"train": "train.json", "max_prompt_length": 32, "max_response_length": 8},
            "algorithm": {"n": 1},
            "trainer": {"train_batch_size": 2, "ppo_mini_batch_size": 2, "seed": 7},
            "reward_model": {"model_path": model_path, "rollout": {"response_length": 4, **(rollout or {})}},
            "resources": {"pool": {"type": "local", "device": "cpu"}},
            "stages": [
                {"name": "generate", "uses": "generate", "on": "pool"},
                {
                    "name": "judge",
                    "uses": "judge_score",
                    "on": "pool",
                    "with": judge or {"template": "builtin:ranking_judge"},
                },
                {"name": "old_log_prob", "uses": "old_log_prob", "on": "pool"},
                {"name": "advantage", "uses": "grpo_advantage", "on": "driver"},
                {"name": "update_actor", "uses": "update_actor", "on": "pool"},
                {"name": "sync_weights", "uses": "sync_weights", "on": "pool"},
            ],
        }
    )


def ranking_batch(responses: list[str], numbers=(3, 9, 4, 5, 6), source: str = "second_largest") -> Batch:
    """What reaches a reward stage on the ranking task: responses, their mask, sources, reward_info."""
    answer = str(sorted(numbers)[{"largest": -1, "smallest": 0, "second_largest": -2, "second_smallest": 1}[source]])
    n = len(responses)
    return Batch(
        {"response_mask": np.ones((n, 4), dtype=np.int64)},
        {
            "raw_prompt": ["<|im_start|>user\nWhich number?<|im_end|>\n"] * n,
            "response_text": list(responses),
            "data_source": [source] * n,
            "reward_info": [{"ground_truth": answer, "extra_info": {"numbers": list(numbers)}}] * n,
        },
    )

"""TRL's GRPOTrainer doing the work of one rlflow step, for bench_step.py and bench_startup.py.

Runs in the TRL virtual environment (scripts/setup_trl_venv.sh), never in rlflow's:

    .venv-trl/bin/python -m benchmarks.trl_grpo_run --model-dir DIR --steps 5 --out times.json

Equal work, decided once here:
- the same model directory and tokenizer as the rlflow arms, in float32;
- the same prompts in the same order: the pipeline is loaded with rlflow's own loader and its
  train split with ``rlflow.data.load_split`` (same template and schema text), and the rows
  are laid out in the order rlflow's ``StepSampler`` draws them (TRL's shuffling off);
- ``train_batch_size`` prompts x ``n`` completions of at most ``max_response_length`` tokens
  per step, temperature 1, top-p 1, no top-k, KV-cached ``generate``;
- KL against a frozen reference (``beta`` = the pipeline's ``kl_loss_coef``, TRL's k3 estimator
  = ``low_var_kl``), clip ``epsilon`` = ``clip_ratio``, token-mean loss (TRL's ``dapo``), the
  pipeline's learning rate, constant (rlflow's default schedule);
- one optimizer step per generation batch, in micro-batches of ``ppo_micro_batch_size_per_gpu``
  completions (gradient accumulation), as rlflow's actor does;
- the reward is rlflow's SQL execution reward (``rlflow.stages.text2sql_reward.score_row``), in-process;
- one thread (rlflow's actor worker gets one CPU and one thread).

It writes, as JSON: the process start, the wall-clock time of the start of training, of each
step's begin and end, each step's duration, and TRL's own logged metrics.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model-dir", required=True)
    p.add_argument("--pipeline", default="pipelines/bird_grpo.yaml")
    p.add_argument("--set", dest="sets", action="append", default=[], help="--set for the pipeline (sizes)")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", required=True)
    return p.parse_args()


def load_spec(args):
    from rlflow.check import load_pipeline

    return load_pipeline(args.pipeline, [f"model_path={args.model_dir}", *args.sets]).spec


def ordered_rows(spec, root: Path, tokenizer, steps: int) -> list[dict]:
    """The train prompts in the order rlflow's sampler gives them to ``steps`` steps."""
    from rlflow.data import StepSampler, load_split

    data = load_split(spec, "train", root, tokenizer)
    sampler = StepSampler(len(data), spec.trainer.train_batch_size, spec.trainer.seed, spec.data.shuffle)
    rows = []
    for _ in range(steps):
        for i in sampler.next_indices():
            e = data[i]
            rows.append(
                {
                    "prompt": e.prompt,
                    "db_path": e.reward_info["extra_info"]["db_path"],
                    "gold_sql": e.reward_info["ground_truth"],
                }
            )
    return rows


def sql_reward_function():
    """rlflow's execution reward as a TRL reward function (connections and gold results cached)."""
    from rlflow.stages.text2sql_reward import Text2SqlRewardConfig, _caches, score_row

    config, caches = Text2SqlRewardConfig(), _caches({})

    def sql_execution_reward(prompts, completions, db_path, gold_sql, **_):
        return [
            score_row(c, {"ground_truth": g, "extra_info": {"db_path": d}}, config, caches)[0]
            for c, d, g in zip(completions, db_path, gold_sql, strict=True)
        ]

    return sql_execution_reward


def main() -> None:
    args = parse_args()
    import psutil

    process_start = psutil.Process().create_time()
    import torch

    torch.set_num_threads(args.threads)
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    root = Path.cwd()
    spec = load_spec(args)
    tokenizer = AutoTokenizer.from_pretrained(args.model_dir, local_files_only=True)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    dataset = Dataset.from_list(ordered_rows(spec, root, tokenizer, args.steps))
    t, a = spec.trainer, spec.algorithm
    micro = t.ppo_micro_batch_size_per_gpu or t.ppo_mini_batch_size * a.n
    completions = t.train_batch_size * a.n
    record: dict = {"process_start": process_start, "steps": [], "logs": [], "threads": args.threads}

    class Clock(TrainerCallback):
        def on_train_begin(self, *_, **__):
            record["train_begin"] = time.time()

        def on_step_begin(self, *_, **__):
            record["steps"].append({"begin": time.time()})

        def on_step_end(self, *_, **__):
            record["steps"][-1]["end"] = time.time()

        def on_log(self, _args, _state, _control, logs=None, **__):
            record["logs"].append(dict(logs or {}))

    with tempfile.TemporaryDirectory() as scratch:
        config = GRPOConfig(
            output_dir=scratch,
            max_steps=args.steps,
            per_device_train_batch_size=micro,
            gradient_accumulation_steps=completions // micro,
            num_generations=a.n,
            max_completion_length=spec.data.max_response_length,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            beta=a.kl_loss_coef,
            epsilon=a.clip_ratio,
            loss_type="dapo",
            num_iterations=1,
            learning_rate=t.optim.lr,
            lr_scheduler_type="constant",
            max_grad_norm=t.grad_clip,
            shuffle_dataset=False,
            seed=t.seed,
            logging_steps=1,
            save_strategy="no",
            report_to=[],
            use_cpu=True,
            bf16=False,
            fp16=False,
            dataloader_num_workers=0,
            disable_tqdm=True,
            model_init_kwargs={"dtype": "float32"},
        )
        trainer = GRPOTrainer(
            model=args.model_dir,
            reward_funcs=sql_reward_function(),
            args=config,
            train_dataset=dataset,
            processing_class=tokenizer,
            callbacks=[Clock()],
        )
        record["trainer_ready"] = time.time()
        trainer.train()
    ends = [s["end"] for s in record["steps"]]
    begins = [record["train_begin"], *ends[:-1]]
    record["step_s"] = [e - b for b, e in zip(begins, ends)]
    record["mean_completion_length"] = [
        log["completions/mean_length"] for log in record["logs"] if "completions/mean_length" in log
    ]
    record["versions"] = {m: __import__(m).__version__ for m in ("trl", "torch", "transformers")}
    Path(args.out).write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())

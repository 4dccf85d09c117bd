"""Make the warm start of the BIRD GRPO pipeline: a short supervised fine-tune of the built-in tiny model.

    python scripts/make_warm_start.py       # remakes rlflow/assets/models/tiny-sql-warm (about 8 min on 1 core)
    python scripts/make_warm_start.py [--bird-root rlflow/assets/data/bird_sample] [--out DIR] [--seed 0]
                                      [--train-questions 0] [--steps 320] [--lr 1e-3] [--batch-size 16]

A randomly initialised ``builtin:tiny-qwen2`` never writes a query that runs, so GRPO sees
reward 0 everywhere and learns nothing. This script gives it a start: it fine-tunes the
built-in architecture and tokenizer on the TRAIN split's gold SQL and saves a Hugging Face
directory (``save_pretrained``: config, weights, tokenizer) that ``model.path`` can point at.

Design decisions:
- The prompts are exactly the pipeline's: the split is loaded through
  ``pipelines/bird_grpo.yaml`` and ``rlflow.data.load_split`` (same template, schema text,
  tokenization and length policy), and the model and tokenizer come from
  ``rlflow.backends.local.models`` (``builtin:tiny-qwen2`` built from ``--seed``).
- The target is what the reward accepts and nothing more: "```sql\\n<gold SQL>\\n```" then
  EOS. The loss covers the target tokens only; the prompt is context.
- Training stops early on purpose, after a fixed ``--steps`` (320 steps of 16, about 13
  epochs of the 402 train questions): the warm start writes well-formed SQL and has started
  to copy values from the question into the query, but greedy decoding still gets most dev
  questions wrong while a sample of 8 often holds a right one (on the shipped sample: greedy
  0.30, pass@8 0.51 on dev), which is the room GRPO works in. Trained longer it reaches 0.50
  greedy on dev by step 480 and leaves GRPO less to show. Only the train split is trained on;
  the dev split is decoded (greedy) for the report.
- Deterministic on one machine: seeded initialisation, seeded shuffling, deterministic
  algorithms; a constant learning rate after a short warmup, so ``--steps`` alone says where
  it stopped. Another CPU or thread count may round differently, so a rerun elsewhere gives
  close, not bit-identical, weights.
- The weights are stored as bfloat16 (half the size of float32); the accuracy reported (and
  written to ``warm_start.json``) is measured on the saved weights after reloading them.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
PIPELINE = ROOT / "pipelines" / "bird_grpo.yaml"
BUILTIN = "builtin:tiny-qwen2"
log = logging.getLogger("make_warm_start")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--bird-root",
        default="rlflow/assets/data/bird_sample",
        help="BIRD-format folder (train.json, dev.json, databases/)",
    )
    p.add_argument("--out", default="rlflow/assets/models/tiny-sql-warm", help="output Hugging Face directory")
    p.add_argument("--seed", type=int, default=0, help="seed of the initial weights and of the shuffling")
    p.add_argument("--steps", type=int, default=320, help="optimizer steps (training stops here on purpose)")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=20, help="linear warmup steps")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument(
        "--train-questions",
        type=int,
        default=0,
        help="fine-tune on this many train questions, a seeded random subset (0: all)",
    )
    p.add_argument(
        "--eval-every", type=int, default=0, help="also report greedy accuracy every N steps (0: only at the end)"
    )
    p.add_argument("--eval-limit", type=int, default=0, help="questions per split in --eval-every reports (0: all)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (the shipped weights were made with 1)")
    return p.parse_args(argv)


# ---- data -------------------------------------------------------------------------------------
def load_splits(bird_root: str):
    """(spec, tokenizer, train dataset, dev dataset) with the pipeline's own prompt building."""
    from rlflow.check import load_pipeline
    from rlflow.data import load_split
    from rlflow.data.tokenizer import load_tokenizer

    loaded = load_pipeline(PIPELINE, sets=[f"bird_root={bird_root}", f"model_path={BUILTIN}"])
    spec = loaded.spec
    tokenizer = load_tokenizer(spec.model, ROOT)
    train = load_split(spec, "train", ROOT, tokenizer)
    dev = load_split(spec, "val", ROOT, tokenizer)
    return spec, tokenizer, train, dev


def target_text(gold_sql: str) -> str:
    """The response the reward accepts: the gold SQL in a ```sql fence (EOS is appended as a token)."""
    return f"```sql\n{gold_sql.strip()}\n```"


def sft_rows(dataset, tokenizer) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, target ids ending with EOS) for every example of ``dataset``."""
    texts = [target_text(e.reward_info["ground_truth"]) for e in dataset.examples]
    targets = tokenizer(texts, add_special_tokens=False)["input_ids"]
    return [
        (list(e.input_ids), list(t) + [tokenizer.eos_token_id]) for e, t in zip(dataset.examples, targets, strict=True)
    ]


def subset(num_rows: int, count: int, seed: int) -> list[int]:
    """The first ``count`` of a seeded permutation of ``range(num_rows)``, sorted (all rows when ``count`` is 0)."""
    if not count or count >= num_rows:
        return list(range(num_rows))
    order = torch.randperm(num_rows, generator=torch.Generator().manual_seed(seed)).tolist()
    return sorted(order[:count])


def collate(rows: list[tuple[list[int], list[int]]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded ``input_ids`` / ``attention_mask`` / ``labels`` (-100 outside the targets)."""
    width = max(len(p) + len(t) for p, t in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    for r, (prompt, target) in enumerate(rows):
        n, m = len(prompt), len(target)
        ids[r, : n + m] = torch.tensor(prompt + target)
        mask[r, : n + m] = 1
        labels[r, n : n + m] = torch.tensor(target)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def batches(num_rows: int, batch_size: int, seed: int):
    """Endless shuffled index batches: a new permutation each epoch, from one seeded generator."""
    generator = torch.Generator().manual_seed(seed)
    while True:
        order = torch.randperm(num_rows, generator=generator).tolist()
        for start in range(0, num_rows - batch_size + 1, batch_size):
            yield order[start : start + batch_size]


# ---- evaluation -------------------------------------------------------------------------------
@torch.no_grad()
def exec_accuracy(model, tokenizer, dataset, limit: int = 0, batch_size: int = 32, max_new_tokens: int = 64) -> dict:
    """Greedy decoding scored by the pipeline's reward: exec_acc and format_ok rates over ``dataset``."""
    from rlflow.backends.local.generation import SamplingParams, sample
    from rlflow.stages.text2sql_reward import Text2SqlRewardConfig, _caches, score_row

    config, caches, state = Text2SqlRewardConfig(), None, {}
    caches = _caches(state)
    params = SamplingParams(
        max_new_tokens=max_new_tokens,
        eos_token_ids=(tokenizer.eos_token_id,),
        pad_token_id=tokenizer.pad_token_id,
        do_sample=False,
    )
    count = min(limit or len(dataset), len(dataset))
    totals = {"exec_acc": 0, "format_ok": 0}
    model.eval()
    for start in range(0, count, batch_size):
        indices = list(range(start, min(start + batch_size, count)))
        batch = dataset.to_batch(indices, tokenizer.pad_token_id)
        responses, mask = sample(model, batch["prompts"], batch["prompt_mask"], params)
        lengths = mask.sum(-1).tolist()
        texts = tokenizer.batch_decode([r[:n] for r, n in zip(responses.tolist(), lengths)], skip_special_tokens=True)
        for text, info in zip(texts, batch["reward_info"], strict=True):
            _, extra = score_row(text, info, config, caches)
            totals["exec_acc"] += extra["acc"]
            totals["format_ok"] += extra["format_ok"]
    for conn in caches.connections.values():
        conn.close()
    return {k: v / max(count, 1) for k, v in totals.items()} | {"questions": count}


# ---- training ---------------------------------------------------------------------------------
def train(model, rows, args, report) -> list[dict]:
    """``args.steps`` AdamW steps of next-token loss on the targets; returns the loss log."""
    pad_id = model.generation_config.pad_token_id
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / max(args.warmup, 1)))
    history, running, start = [], [], time.perf_counter()
    model.train()
    for step, indices in enumerate(batches(len(rows), args.batch_size, args.seed), start=1):
        batch = collate([rows[i] for i in indices], pad_id)
        loss = model(**batch, use_cache=False).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        running.append(float(loss.detach()))
        if step % 20 == 0 or step == args.steps:
            history.append({"step": step, "loss": sum(running) / len(running), "seconds": time.perf_counter() - start})
            log.info("step %d  loss %.4f  (%.0f s)", step, history[-1]["loss"], history[-1]["seconds"])
            running = []
        if args.eval_every and step % args.eval_every == 0 and step < args.steps:
            report(step)
            model.train()
        if step == args.steps:
            return history
    return history


def save(model, tokenizer, out: Path, meta: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "warm_start.json").write_text(json.dumps(meta, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True, warn_only=True)
    from rlflow.backends.local.models import load_model
    from rlflow.schemas.pipeline import ModelSpec

    spec, tokenizer, train_set, dev_set = load_splits(args.bird_root)
    model = load_model(ModelSpec(path=BUILTIN), tokenizer, seed=args.seed)
    torch.manual_seed(args.seed)

    def report(step: int) -> None:
        tr = exec_accuracy(model, tokenizer, train_set, args.eval_limit, max_new_tokens=spec.data.max_response_length)
        dv = exec_accuracy(model, tokenizer, dev_set, args.eval_limit, max_new_tokens=spec.data.max_response_length)
        log.info(
            "step %d  greedy exec_acc train %.3f  dev %.3f  (format_ok train %.2f dev %.2f)",
            step,
            tr["exec_acc"],
            dv["exec_acc"],
            tr["format_ok"],
            dv["format_ok"],
        )

    chosen = subset(len(train_set), args.train_questions, args.seed)
    rows = sft_rows(train_set, tokenizer)
    history = train(model, [rows[i] for i in chosen], args, report)
    out = (ROOT / args.out) if not Path(args.out).is_absolute() else Path(args.out)
    meta = {
        "base": BUILTIN,
        "bird_root": args.bird_root,
        "trained_on": str(train_set.source.name),
        "train_questions": len(chosen),
        "train_question_ids": [train_set[i].reward_info["extra_info"]["question_id"] for i in chosen],
        "seed": args.seed,
        "steps": args.steps,
        "lr": args.lr,
        "warmup": args.warmup,
        "batch_size": args.batch_size,
        "threads": args.threads,
        "command": "python scripts/make_warm_start.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "loss": history,
    }
    save(model, tokenizer, out, meta)
    reloaded = load_model(ModelSpec(path=str(out)), tokenizer, seed=args.seed)
    n = spec.data.max_response_length
    meta["greedy_exec_acc"] = {
        "train": exec_accuracy(reloaded, tokenizer, train_set, max_new_tokens=n),
        "dev": exec_accuracy(reloaded, tokenizer, dev_set, max_new_tokens=n),
    }
    (out / "warm_start.json").write_text(json.dumps(meta, indent=2) + "\n")
    log.info(
        "saved %s: greedy exec_acc train %.3f, dev %.3f",
        out,
        meta["greedy_exec_acc"]["train"]["exec_acc"],
        meta["greedy_exec_acc"]["dev"]["exec_acc"],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

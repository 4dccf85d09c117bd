"""Make the warm start of a shipped GRPO pipeline: a short supervised fine-tune of the built-in tiny model.

    python scripts/make_warm_start.py                   # remakes rlflow/assets/models/tiny-sql-warm (8 min, 1 core)
    python scripts/make_warm_start.py --task ranking    # remakes rlflow/assets/models/tiny-rank-warm (1 min)
    python scripts/make_warm_start.py --task bird_agent # remakes rlflow/assets/models/tiny-sql-agent (from tiny-sql-warm)
    python scripts/make_warm_start.py --task ranking_teacher  # rlflow/assets/models/tiny-rank-teacher (2 min)
    python scripts/make_warm_start.py --task ranking_student  # rlflow/assets/models/tiny-rank-student (1 min)
    python scripts/make_warm_start.py --task tools --pipeline PIPELINE --out DIR  # your tools on your data
    python scripts/make_warm_start.py [--task bird] [--out DIR] [--seed 0] [--train-questions 0]
                                      [--steps N] [--lr LR] [--batch-size B]

A randomly initialised ``builtin:tiny-qwen2`` never writes a query that runs or an answer
after ``####``, so GRPO sees reward 0 everywhere and learns nothing. This script gives it a start: it
fine-tunes the built-in architecture and tokenizer on the TRAIN split's reference answers and
saves a Hugging Face directory (``save_pretrained``: config, weights, tokenizer) that
``model.path`` can point at.

Design decisions:
- The prompts and the scores are exactly the pipeline's: the split is loaded through the task's
  pipeline and ``rlflow.data.load_split`` (same template or chat template, tokenization and
  length policy), greedy answers are scored by the pipeline's own reward stage, and the model
  and tokenizer come from ``rlflow.backends.local.models`` (``builtin:tiny-qwen2`` built from
  ``--seed``). Accuracy is the reward's ``acc``.
- The target is what the reward accepts and nothing more, then EOS: for text-to-SQL
  "```sql\\n<gold SQL>\\n```"; for verl-format data the row's ``extra_info["answer"]`` (the
  reference solution, where verl's preprocessing scripts keep it; ranking: "#### 6").
  The loss covers the target tokens only; the prompt is context.
- BIRD: training stops early on purpose, after a fixed ``--steps`` (320 steps of 16, about 13
  epochs of the 402 train questions): the warm start writes well-formed SQL and has started
  to copy values from the question into the query, but greedy decoding still gets most dev
  questions wrong while a sample of 8 often holds a right one (on the shipped sample: greedy
  0.30, pass@8 0.51 on dev), which is the room GRPO works in. Trained longer it reaches 0.50
  greedy on dev by step 480 and leaves GRPO less to show. Only the train split is trained on;
  the dev split is decoded (greedy) for the report.
- Ranking stops earlier still, after 80 steps of 32 (2560 of the 4000 train questions, under
  one epoch): greedy 0.32 on the validation split and pass@8 0.80 (the smallest already at
  0.60, the second largest at 0.12). Trained on, it passes 0.6 greedy by step 200.
- On-policy distillation (``pipelines/ranking_distill.yaml``) ships a teacher and a student for ranking.
  ``ranking_teacher`` is the ranking start trained on to 240 steps: greedy 0.73 on the 400 validation
  questions (0.69 on the first 200; 0.74 on train). ``ranking_student`` is a smaller model (``SMALL_ARCH``: half the built-in hidden size, MLP,
  layers and heads, the same tokenizer; its config.json says so) from random weights, stopped at 64 steps
  while it is still climbing: greedy 0.245 on validation (0.125 at 60 steps, 0.31-0.38 from 68 on).
- The BIRD agent (``bird_agent``, ``pipelines/bird_grpo_agent.yaml``) starts from the BIRD warm
  start and learns the tool protocol from synthetic transcripts built on the real databases: the
  model calls ``run_sql`` with a query, reads the rows (rendered by the shipped SQL tool and
  appended through the chat template exactly as the agent loop appends them), then answers with
  the gold SQL. The probe is the gold SQL itself, or, for a question whose gold query returns rows
  and has a string literal, in about a third of them the same query with that literal's case
  flipped, whose "(0 rows)" the answer then corrects. The loss covers the model's turns only (the
  rows read get none, as in GRPO). Accuracy is measured by the agent loop itself with the tool.
  100 steps of 16 (about 4 epochs, 4 minutes): greedy 0.41 on dev with a 160-token budget (0.43
  with the shipped 256), the tool called on nearly every question (``num_turns`` 3.98: a call, the
  rows, an answer). Stopped at 50 steps it samples
  (at temperature 1) malformed calls too often for GRPO to start from (sampled reward 0.04-0.11,
  two calls in three unparsable); at 100 the sampled reward is 0.17-0.31.
- Your own tools (``tools``): the same kind of transcripts for any pipeline with an enabled
  ``multi_turn`` block, from its own tool files and its train rows' demonstration calls
  (``extra_info["tool_calls"]``), starting from its ``model.path``; see ``scripts/warm_start_tools.py``.
  The record holds the greedy agent loop's mean score, turns, tool calls and tool error ratio.
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
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
BUILTIN = "builtin:tiny-qwen2"
log = logging.getLogger("make_warm_start")


# half the built-in tiny-qwen2 (hidden size, MLP, layers, heads), same tokenizer: the distillation student
SMALL_ARCH = (
    ("hidden_size", 128),
    ("intermediate_size", 384),
    ("num_hidden_layers", 2),
    ("num_attention_heads", 2),
    ("num_key_value_heads", 1),
)


@dataclass(frozen=True)
class Task:
    pipeline: str
    sets: tuple[str, ...]  # --set values giving the pipeline the built-in model (and its data)
    out: str
    steps: int
    lr: float
    batch_size: int
    init: str = BUILTIN  # the weights training starts from
    agent: bool = False  # transcripts with tool calls (the pipeline's multi_turn block)
    arch: tuple[tuple[str, int], ...] = ()  # Qwen2Config overrides of the built-in shape (a smaller model)


TASKS = {
    "bird": Task(
        "pipelines/bird_grpo.yaml",
        ("bird_root=rlflow/assets/data/bird_sample", f"model_path={BUILTIN}"),
        "rlflow/assets/models/tiny-sql-warm",
        320,
        1e-3,
        16,
    ),
    "bird_agent": Task(
        "pipelines/bird_grpo_agent.yaml",
        ("bird_root=rlflow/assets/data/bird_sample", "agent_model_path=rlflow/assets/models/tiny-sql-warm"),
        "rlflow/assets/models/tiny-sql-agent",
        100,
        5e-4,
        16,
        init="rlflow/assets/models/tiny-sql-warm",
        agent=True,
    ),
    # --pipeline names the pipeline (its project root holds the data and tools), --out the new model, and
    # training starts from the pipeline's own model.path
    "tools": Task("", (), "", 60, 5e-4, 8, init="", agent=True),
    "ranking": Task(
        "pipelines/ranking_grpo.yaml",
        (f"rank_model_path={BUILTIN}",),
        "rlflow/assets/models/tiny-rank-warm",
        80,
        1e-3,
        32,
    ),
    # on-policy distillation (pipelines/ranking_distill.yaml): the same start trained on, and a smaller student
    "ranking_teacher": Task(
        "pipelines/ranking_grpo.yaml",
        (f"rank_model_path={BUILTIN}",),
        "rlflow/assets/models/tiny-rank-teacher",
        240,
        1e-3,
        32,
    ),
    "ranking_student": Task(
        "pipelines/ranking_grpo.yaml",
        (f"rank_model_path={BUILTIN}",),
        "rlflow/assets/models/tiny-rank-student",
        64,
        1e-3,
        32,
        arch=SMALL_ARCH,
    ),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", choices=sorted(TASKS), default="bird", help="which shipped pipeline to warm-start")
    p.add_argument("--pipeline", default=None, help="--task tools: your pipeline, with an enabled multi_turn block")
    p.add_argument("--set", dest="sets", action="append", default=[], help="extra --set for the pipeline")
    p.add_argument("--out", default=None, help="output Hugging Face directory (default: the task's asset folder)")
    p.add_argument("--seed", type=int, default=0, help="seed of the initial weights and of the shuffling")
    p.add_argument("--steps", type=int, default=None, help="optimizer steps (training stops here on purpose)")
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--warmup", type=int, default=20, help="linear warmup steps")
    p.add_argument("--batch-size", type=int, default=None)
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
    args = p.parse_args(argv)
    task = TASKS[args.task]
    if (args.task == "tools") != bool(args.pipeline) or (args.task == "tools" and not args.out):
        p.error(
            "--task tools takes --pipeline (yours, with multi_turn enabled) and --out (a new model folder); "
            "the shipped tasks take neither --pipeline"
        )
    args.out = args.out or task.out
    args.steps = args.steps or task.steps
    args.lr = args.lr or task.lr
    args.batch_size = args.batch_size or task.batch_size
    return args


# ---- data -------------------------------------------------------------------------------------
def load_splits(task: Task, sets: list[str], pipeline: str | None = None):
    """(spec, tokenizer, train dataset, dev dataset, project root) with the pipeline's own prompt building;
    ``pipeline``: a pipeline of the user's (``--task tools``), whose project root is its own."""
    from rlflow.check import load_pipeline
    from rlflow.data import load_split
    from rlflow.data.tokenizer import load_tokenizer

    loaded = load_pipeline(Path(pipeline) if pipeline else ROOT / task.pipeline, sets=[*task.sets, *sets])
    spec, root = loaded.spec, loaded.project.root if pipeline else ROOT
    tokenizer = load_tokenizer(spec.model, root)
    train = load_split(spec, "train", root, tokenizer)
    dev = load_split(spec, "val", root, tokenizer)
    return spec, tokenizer, train, dev, root


def target_text(reward_info: dict, data_format: str) -> str:
    """The response the reward accepts (EOS is appended as a token): the gold SQL in a ```sql fence,
    or a verl row's reference solution ``extra_info["answer"]``."""
    if data_format == "verl":
        return str(reward_info["extra_info"]["answer"])
    return f"```sql\n{reward_info['ground_truth'].strip()}\n```"


Row = tuple[list[int], list[int], list[int]]  # prompt ids, target ids, 1 where the target is trained on


def sft_rows(dataset, tokenizer, data_format: str) -> list[Row]:
    """(prompt ids, target ids ending with EOS, all trained on) for every example of ``dataset``."""
    texts = [target_text(e.reward_info, data_format) for e in dataset.examples]
    targets = tokenizer(texts, add_special_tokens=False)["input_ids"]
    eos = tokenizer.eos_token_id
    return [
        (list(e.input_ids), list(t) + [eos], [1] * (len(t) + 1)) for e, t in zip(dataset.examples, targets, strict=True)
    ]


def flipped_literal(sql: str) -> str | None:
    """``sql`` with its first string literal's case flipped; None when it has none that changes."""
    found = re.search(r"'([^']*[A-Za-z][^']*)'", sql)
    if found is None or found.group(1).swapcase() == found.group(1):
        return None
    return sql[: found.start(1)] + found.group(1).swapcase() + sql[found.end(1) :]


def agent_rows(dataset, tokenizer, spec, seed: int) -> list[Row]:
    """Transcripts of the agent's protocol (see the module docstring): call, rows read (no loss), answer."""
    import random

    from rlflow.backends.agent_loop import ToolTurn
    from rlflow.reward.sql_exec import connect_readonly, execute
    from rlflow.tools.child import truncate
    from rlflow.tools.sql import MAX_RESULT_BYTES, render

    turns = multi_turn_block(spec)
    tool = load_tool_config(turns)
    render_turn = ToolTurn(tokenizer).tokens
    eos = tokenizer.eos_token_id
    chooser = random.Random(seed)
    connections: dict[str, object] = {}

    def rows_text(db_path: str, sql: str) -> tuple[str, bool]:
        if db_path not in connections:
            connections[db_path] = connect_readonly(db_path)
        result = execute(connections[db_path], sql, 2.0, tool["max_rows"], MAX_RESULT_BYTES, head=True)
        if not result.ok:
            return f"Error: {result.message}", False
        text = render(result.columns, result.head, result.more, tool["max_cell_chars"])
        return truncate(text, turns["max_tool_response_length"], "middle"), bool(result.head)

    out = []
    for example in dataset.examples:
        gold = example.reward_info["ground_truth"].strip()
        db_path = example.reward_info["extra_info"]["db_path"]
        probe = gold
        flipped = flipped_literal(gold)
        if flipped is not None and chooser.random() < 1 / 3 and rows_text(db_path, gold)[1]:
            probe = flipped if not rows_text(db_path, flipped)[1] else gold
        call = json.dumps({"name": "run_sql", "arguments": {"sql": probe}})
        first = tokenizer(f"<tool_call>{call}</tool_call>", add_special_tokens=False)["input_ids"] + [eos]
        seen = render_turn([rows_text(db_path, probe)[0]])
        answer = tokenizer(f"```sql\n{gold}\n```", add_special_tokens=False)["input_ids"] + [eos]
        out.append(
            (list(example.input_ids), first + seen + answer, [1] * len(first) + [0] * len(seen) + [1] * len(answer))
        )
    for conn in connections.values():
        conn.close()
    return out


def multi_turn_block(spec) -> dict:
    """The generate stage's ``with.multi_turn`` of the pipeline."""
    return next(s.with_["multi_turn"] for s in spec.stages if s.uses == "generate")


def load_tool_config(multi_turn: dict) -> dict:
    """The SQL tool's ``config`` from the pipeline's tool-config file."""
    import yaml

    entries = yaml.safe_load((ROOT / multi_turn["tool_config_path"]).read_text())["tools"]
    config = next(e["config"] for e in entries if e["class_name"].endswith("SqlTool"))
    return {"max_rows": 5, "max_cell_chars": 40, **config}


def subset(num_rows: int, count: int, seed: int) -> list[int]:
    """The first ``count`` of a seeded permutation of ``range(num_rows)``, sorted (all rows when ``count`` is 0)."""
    if not count or count >= num_rows:
        return list(range(num_rows))
    order = torch.randperm(num_rows, generator=torch.Generator().manual_seed(seed)).tolist()
    return sorted(order[:count])


def collate(rows: list[Row], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded ``input_ids`` / ``attention_mask`` / ``labels`` (-100 outside the trained target tokens)."""
    width = max(len(p) + len(t) for p, t, _ in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    for r, (prompt, target, trained) in enumerate(rows):
        n, m = len(prompt), len(target)
        ids[r, : n + m] = torch.tensor(prompt + target)
        mask[r, : n + m] = 1
        labels[r, n : n + m] = torch.tensor([t if keep else -100 for t, keep in zip(target, trained, strict=True)])
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def batches(num_rows: int, batch_size: int, seed: int):
    """Endless shuffled index batches: a new permutation each epoch, from one seeded generator."""
    generator = torch.Generator().manual_seed(seed)
    while True:
        order = torch.randperm(num_rows, generator=generator).tolist()
        for start in range(0, num_rows - batch_size + 1, batch_size):
            yield order[start : start + batch_size]


# ---- evaluation -------------------------------------------------------------------------------
class Scorer:
    """The pipeline's own reward stage, run here on greedy answers."""

    def __init__(self, spec, root: Path = ROOT) -> None:
        from rlflow.plan.compile import compile_plan
        from rlflow.stages import get_stage_kind
        from rlflow.stages.base import StageContext

        stage = compile_plan(spec).first_with_role("reward")
        self.kind = get_stage_kind(stage.kind)()
        config = self.kind.parse_config(dict(stage.config))
        self.ctx = StageContext(spec, config, stage.name, reads=stage.reads, project_root=str(root))

    def __call__(self, batch) -> list[dict]:
        return self.scored(batch)["reward_extra"]

    def scored(self, batch):
        """The reward stage's output on ``batch``: ``scores`` and ``reward_extra``."""
        return self.kind.run(self.ctx.inputs(batch), self.ctx)


@torch.no_grad()
def accuracy(model, tokenizer, dataset, scorer, limit: int = 0, batch_size: int = 32, max_new_tokens: int = 64) -> dict:
    """Greedy decoding scored by the pipeline's reward: the ``acc`` and ``format_ok`` rates over ``dataset``."""
    from rlflow.backends.local.generation import SamplingParams, sample

    params = SamplingParams(
        max_new_tokens=max_new_tokens,
        eos_token_ids=(tokenizer.eos_token_id,),
        pad_token_id=tokenizer.pad_token_id,
        do_sample=False,
    )
    count = min(limit or len(dataset), len(dataset))
    totals = {"acc": 0.0, "format_ok": 0.0}
    model.eval()
    for start in range(0, count, batch_size):
        indices = list(range(start, min(start + batch_size, count)))
        batch = dataset.to_batch(indices, tokenizer.pad_token_id)
        responses, mask = sample(model, batch["prompts"], batch["prompt_mask"], params)
        lengths = mask.sum(-1).tolist()
        batch["response_mask"] = mask
        batch["response_text"] = tokenizer.batch_decode(
            [r[:n] for r, n in zip(responses.tolist(), lengths)], skip_special_tokens=True
        )
        for extra in scorer(batch):
            totals["acc"] += extra["acc"]
            totals["format_ok"] += extra["format_ok"]
    return {k: v / max(count, 1) for k, v in totals.items()} | {"questions": count}


@torch.no_grad()
def agent_accuracy(
    model, tokenizer, dataset, scorer, spec, limit: int = 0, batch_size: int = 32, root: Path = ROOT
) -> dict:
    """``accuracy`` of greedy multi-turn rollouts: the agent loop with the pipeline's tools (from ``root``); also the
    mean score, turns and tool calls per question and the tools' error ratio (``acc``/``format_ok``: 0 for a
    reward that has none)."""
    from dataclasses import replace

    from rlflow.backends.agent_loop import ToolTurn, rows_tools_kwargs, run_agent_loop
    from rlflow.backends.local.generation import SamplingParams, sample
    from rlflow.tools.config import MultiTurnConfig
    from rlflow.tools.runner import ToolRunner

    config = MultiTurnConfig.model_validate(multi_turn_block(spec))
    budget = spec.data.max_response_length
    pad = tokenizer.pad_token_id
    params = SamplingParams(
        max_new_tokens=budget, eos_token_ids=(tokenizer.eos_token_id,), pad_token_id=pad, do_sample=False
    )

    def decode(sequences: list[list[int]], max_new: int, turn: int):
        width = max(len(q) for q in sequences)
        ids = torch.tensor([[pad] * (width - len(q)) + q for q in sequences])
        mask = torch.tensor([[0] * (width - len(q)) + [1] * len(q) for q in sequences])
        responses, got = sample(model, ids, mask, replace(params, max_new_tokens=max_new))
        return [(responses[i, :n].tolist(), [0.0] * n) for i, n in enumerate(got.sum(-1).tolist())]

    runner = ToolRunner(config, root)
    render = ToolTurn(tokenizer).tokens
    count = min(limit or len(dataset), len(dataset))
    totals = {"acc": 0.0, "format_ok": 0.0, "num_turns": 0.0, "score": 0.0, "tool_calls": 0.0}
    failed = 0
    model.eval()
    try:
        for start in range(0, count, batch_size):
            batch = dataset.to_batch(list(range(start, min(start + batch_size, count))), pad)
            prompts = [row[m.bool()].tolist() for row, m in zip(batch["prompts"], batch["prompt_mask"], strict=True)]
            kwargs = rows_tools_kwargs(batch)
            rows = run_agent_loop(
                prompts,
                decode,
                lambda calls, kwargs=kwargs: runner.call([c for _, c in calls], [kwargs[r] for r, _ in calls]),
                render,
                tokenizer.decode,
                config,
                budget,
            )
            batch["response_mask"] = torch.ones((len(rows), 1), dtype=torch.long)
            batch["response_text"] = [tokenizer.decode(r.tokens, skip_special_tokens=True) for r in rows]
            scored = scorer.scored(batch)
            for extra, score, row in zip(scored["reward_extra"], scored["scores"], rows, strict=True):
                totals["acc"] += extra.get("acc", 0.0)
                totals["format_ok"] += extra.get("format_ok", 0.0)
                totals["num_turns"] += row.num_turns
                totals["score"] += float(score)
                totals["tool_calls"] += len(row.calls)
                failed += sum(call.error for call in row.calls)
    finally:
        runner.close()
    error_ratio = failed / totals["tool_calls"] if totals["tool_calls"] else 0.0
    return {k: v / max(count, 1) for k, v in totals.items()} | {"tool_error_ratio": error_ratio, "questions": count}


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


def small_model(tokenizer, arch: tuple[tuple[str, int], ...], seed: int):
    """The built-in tiny-qwen2 with ``arch``'s shape overrides, seeded; saved with its own config.json."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from rlflow.backends.local.models import BUILTIN_MODELS

    config = Qwen2Config(
        vocab_size=-(-len(tokenizer) // 64) * 64,  # as the built-in model rounds it
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        **(BUILTIN_MODELS["tiny-qwen2"] | dict(arch)),
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


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

    task = TASKS[args.task]
    spec, tokenizer, train_set, dev_set, root = load_splits(task, args.sets, args.pipeline)
    scorer = Scorer(spec, root)
    n = spec.data.max_response_length
    base = ModelSpec(path=task.init) if task.init else spec.model  # --task tools: the pipeline's own model
    model = (
        small_model(tokenizer, task.arch, args.seed)
        if task.arch
        else load_model(base, tokenizer, seed=args.seed, root=root)
    ).float()
    torch.manual_seed(args.seed)

    def measure(model, dataset, limit: int = 0) -> dict:
        if task.agent:
            return agent_accuracy(model, tokenizer, dataset, scorer, spec, limit, root=root)
        return accuracy(model, tokenizer, dataset, scorer, limit, max_new_tokens=n)

    def report(step: int) -> None:
        tr = measure(model, train_set, args.eval_limit)
        dv = measure(model, dev_set, args.eval_limit)
        log.info(
            "step %d  greedy acc train %.3f  dev %.3f  (format_ok train %.2f dev %.2f)",
            step,
            tr["acc"],
            dv["acc"],
            tr["format_ok"],
            dv["format_ok"],
        )

    chosen = subset(len(train_set), args.train_questions, args.seed)
    figures: dict = {}
    if args.task == "tools":
        from warm_start_tools import DemoError, tool_rows

        try:
            rows, figures = tool_rows(train_set, tokenizer, spec, root, lambda i: target_text(i, spec.data.format))
        except DemoError as exc:
            raise SystemExit(f"make_warm_start: {exc}") from None
    elif task.agent:
        rows = agent_rows(train_set, tokenizer, spec, args.seed)
    else:
        rows = sft_rows(train_set, tokenizer, spec.data.format)
    history = train(model, [rows[i] for i in chosen], args, report)
    out = Path(args.out) if args.task == "tools" else ROOT / args.out  # yours: from the working directory
    meta = {
        "base": base.path if not task.arch else f"{base.path} shape, {dict(task.arch)}, random init",
        "task": args.task,
        "pipeline": args.pipeline or task.pipeline,
        **figures,
        "trained_on": str(train_set.source.name),
        "train_questions": len(chosen),
        "seed": args.seed,
        "steps": args.steps,
        "lr": args.lr,
        "warmup": args.warmup,
        "batch_size": args.batch_size,
        "threads": args.threads,
        "command": "python scripts/make_warm_start.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "loss": history,
    }
    if spec.data.format != "verl":
        meta["train_question_ids"] = [train_set[i].reward_info["extra_info"]["question_id"] for i in chosen]
    save(model, tokenizer, out, meta)
    reloaded = load_model(ModelSpec(path=str(out.absolute())), tokenizer, seed=args.seed)
    meta["greedy_acc"] = {"train": measure(reloaded, train_set), "dev": measure(reloaded, dev_set)}
    (out / "warm_start.json").write_text(json.dumps(meta, indent=2) + "\n")
    log.info(
        "saved %s: greedy acc train %.3f, dev %.3f",
        out,
        meta["greedy_acc"]["train"]["acc"],
        meta["greedy_acc"]["dev"]["acc"],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Make the ranking task's judge: a tiny causal LM that answers ``yes`` / ``no`` to the shipped judging prompt.

    python scripts/make_judge_model.py      # remakes rlflow/assets/models/tiny-rank-judge (a few minutes, 1 core)
    python scripts/make_judge_model.py [--out DIR] [--init builtin:tiny-rank-warm] [--steps N] [--lr LR]
                                       [--batch-size B] [--seed 0]

``pipelines/ranking_judge.yaml`` scores the policy with a generative judge (stage ``judge_score``)
instead of the rule; this script makes the judge it ships with, ``builtin:tiny-rank-judge``.

Design decisions:
- The prompt is exactly the stage's: each (question, answer) is rendered by ``builtin:ranking_judge``
  through ``rlflow.reward.judge_template`` (the stage's code), put in the judge's chat template, and
  the target is ``yes`` or ``no`` then EOS. The loss covers the target only.
- The label is the ranking rule itself (``examples/ranking/reward.py``'s score: exactly
  ``#### <the asked-for number>``), so the judge learns to agree with the rule, and the
  agreement is measurable. Answers are synthetic, drawn per question: half right, a third another
  number of the question (the wrong answers a ranking policy writes most), the rest malformed
  (a right or wrong number without ``####``, or with text after it).
- The judge is reference-guided (the template shows the row's ``ground_truth``), as verl's generative
  reward models often are: without the reference, 250 steps of 32 left the judge at chance on a right
  answer against another number of the question (loss flat at 0.21 per target token from step 100),
  since ranking and comparing at once is more than this model learns in minutes from one bit per example.
- It starts from ``builtin:tiny-rank-warm`` (the built-in architecture and tokenizer, which has
  already learnt to rank the digits), so a few minutes of one CPU core are enough.
- Agreement is measured on the saved weights, reloaded by ``rlflow.backends.local.judge.Judge`` and
  parsed by the stage's ``yes_no`` pattern, on the VALIDATION questions (never trained on), three
  answers each (right, another number, malformed) and on the two hard kinds alone.
- Deterministic on one machine: seeded draws and shuffles, one torch thread, deterministic
  algorithms; weights stored as bfloat16; the record is ``judge_model.json``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
TEMPLATE = "builtin:ranking_judge"
DATA = ROOT / "rlflow" / "assets" / "data" / "ranking"


def rule():
    """The ranking reward (examples/ranking/reward.py), loaded as the pipeline loads it."""
    from rlflow.reward.functions import load_function, parse_reference

    return load_function(parse_reference("examples/ranking/reward.py:compute_score"), ROOT)


def questions(split: str) -> list[dict]:
    import pyarrow.parquet as pq

    return pq.read_table(DATA / f"{split}.parquet").to_pylist()


def answers(row: dict, rng: random.Random) -> list[str]:
    """A right answer, another number of the question, and a malformed one (see the design notes)."""
    right = row["reward_model"]["ground_truth"]
    other = str(rng.choice([n for n in row["extra_info"]["numbers"] if str(n) != right]))
    malformed = rng.choice([right, f"#### {right} {other}", f"#### {right}####", f"{other}", f"#### {right}."])
    return [f"#### {right}", f"#### {other}", malformed]


def draw(row: dict, rng: random.Random) -> str:
    kind = rng.random()
    right, other, malformed = answers(row, rng)
    return right if kind < 0.5 else other if kind < 0.85 else malformed


def example(row: dict, response: str, template, score) -> tuple[list[dict], str]:
    """The judge's chat for (row, response) and the rule's verdict on it (kept: each renders once)."""
    key = (row["data_source"], tuple(row["extra_info"]["numbers"]), response)
    if key not in _EXAMPLES:
        _EXAMPLES[key] = _example(row, response, template, score)
    return _EXAMPLES[key]


_EXAMPLES: dict[tuple, tuple[list[dict], str]] = {}


def _example(row: dict, response: str, template, score) -> tuple[list[dict], str]:
    from rlflow.reward.judge_template import render_messages, row_variables

    info = {"ground_truth": row["reward_model"]["ground_truth"], "extra_info": row["extra_info"]}
    (messages,), failures = render_messages(template, [row_variables("", response, row["data_source"], info)])
    if failures:
        raise SystemExit(f"the judge template failed: {failures[0]}")
    right = score(row["data_source"], response, info["ground_truth"], row["extra_info"])["score"] == 1.0
    return messages, "yes" if right else "no"


def encode(tokenizer, messages: list[dict], verdict: str) -> tuple[list[int], list[int]]:
    """Token ids of the chat plus the verdict and EOS; labels -100 on the prompt."""
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    target = tokenizer(verdict, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return ids + target, [-100] * len(ids) + target


def collate(pairs: list[tuple[list[int], list[int]]], pad: int):
    width = max(len(ids) for ids, _ in pairs)
    ids = torch.full((len(pairs), width), pad, dtype=torch.long)
    labels = torch.full((len(pairs), width), -100, dtype=torch.long)
    mask = torch.zeros((len(pairs), width), dtype=torch.long)
    for i, (row, lab) in enumerate(pairs):  # right padding: positions need no shifting
        ids[i, : len(row)] = torch.tensor(row)
        labels[i, : len(lab)] = torch.tensor(lab)
        mask[i, : len(row)] = 1
    return ids, mask, labels


def train(model, tokenizer, rows: list[dict], template, score, args) -> list[dict]:
    rng = random.Random(args.seed)
    optim = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    warmup = max(args.steps // 10, 1)
    sched = torch.optim.lr_scheduler.LambdaLR(optim, lambda s: min((s + 1) / warmup, 1.0))
    model.train()
    losses, start, running = [], time.perf_counter(), 0.0
    for step in range(1, args.steps + 1):
        batch = [
            encode(tokenizer, *example(r, draw(r, rng), template, score)) for r in rng.sample(rows, args.batch_size)
        ]
        ids, mask, labels = collate(batch, tokenizer.pad_token_id)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        optim.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        sched.step()
        running += loss.item()
        if step % 50 == 0 or step == args.steps:
            losses.append({"step": step, "loss": running / (step % 50 or 50), "seconds": time.perf_counter() - start})
            print(json.dumps(losses[-1]), flush=True)
            running = 0.0
    return losses


def agreement(out: Path, rows: list[dict], template, score, seed: int) -> dict:
    """The saved judge's yes/no against the rule on ``rows``: overall and per kind of answer."""
    from rlflow.backends.local.judge import Judge
    from rlflow.reward.verdicts import parse_yes_no
    from rlflow.schemas.reward_model import JudgeRolloutSpec

    spec = SimpleNamespace(
        model_path=str(out), dtype="float32", micro_batch_size_per_gpu=64, rollout=JudgeRolloutSpec(response_length=4)
    )
    pipeline = SimpleNamespace(
        reward_model=spec, model=SimpleNamespace(dtype="float32"), trainer=SimpleNamespace(seed=0)
    )
    judge = Judge(pipeline, root=ROOT)
    rng = random.Random(seed + 1)
    kinds: dict[str, list[bool]] = {"right": [], "other_number": [], "malformed": []}
    parse_errors = 0
    for row in rows:
        cases = [example(row, response, template, score) for response in answers(row, rng)]
        verdicts = judge.verdicts([m for m, _ in cases], {})
        for kind, (_, label), verdict in zip(kinds, cases, verdicts, strict=True):
            parsed = parse_yes_no(verdict)
            parse_errors += parsed is None
            kinds[kind].append(parsed == (1.0 if label == "yes" else 0.0))
    every = [ok for oks in kinds.values() for ok in oks]
    return {
        "questions": len(rows),
        "agreement": sum(every) / len(every),
        **{f"agreement_{k}": sum(v) / len(v) for k, v in kinds.items()},
        "parse_errors": parse_errors,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="rlflow/assets/models/tiny-rank-judge")
    p.add_argument(
        "--init", default="builtin:tiny-rank-warm", help="the model to start from (builtin:tiny-qwen2: none)"
    )
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.manual_seed(args.seed)
    from rlflow.backends.local.models import load_model
    from rlflow.data.tokenizer import load_tokenizer
    from rlflow.reward.judge_template import load_template
    from rlflow.schemas.pipeline import ModelSpec

    spec = ModelSpec(path=args.init, tokenizer="builtin:tiny-rank-warm", dtype="float32")
    tokenizer = load_tokenizer(spec, ROOT)
    model = load_model(spec, tokenizer, seed=args.seed, root=ROOT)
    template, score = load_template(TEMPLATE, ROOT), rule()
    losses = train(model, tokenizer, questions("train"), template, score, args)
    out = Path(args.out) if Path(args.out).is_absolute() else ROOT / args.out
    out.mkdir(parents=True, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(out)
    tokenizer.save_pretrained(out)
    measured = agreement(out, questions("val"), template, score, args.seed)
    record = {
        "base": args.init,
        "task": "ranking judge (yes/no)",
        "template": TEMPLATE,
        "command": "python scripts/make_judge_model.py"
        + (" " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip(),
        "steps": args.steps,
        "lr": args.lr,
        "batch_size": args.batch_size,
        "seed": args.seed,
        "threads": 1,
        "loss": losses,
        "validation": measured,
    }
    (out / "judge_model.json").write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(measured, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

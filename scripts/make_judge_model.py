"""Make the ranking task's judge: a tiny causal LM that answers ``yes`` / ``no`` to the shipped judging prompt.

    python scripts/make_judge_model.py      # remakes rlflow/assets/models/tiny-rank-judge (~5 minutes, 1 core)
    python scripts/make_judge_model.py [--out DIR] [--init new|MODEL] [--steps N] [--lr LR]
                                       [--batch-size B] [--eval-every N] [--seed 0]

``pipelines/ranking_judge.yaml`` scores the policy with a generative judge (stage ``judge_score``)
instead of the rule; this script makes the judge it ships with, ``builtin:tiny-rank-judge``.

Design decisions:
- The prompt is exactly the stage's: each (question, answer) is rendered by ``builtin:ranking_judge``
  through ``rlflow.reward.judge_template`` (the stage's code), put in the judge's chat template, and
  the target is ``yes`` or ``no`` then EOS. The loss covers the target only.
- The label is the ranking rule itself (``examples/ranking/reward.py``'s score: exactly
  ``#### <the asked-for number>``), so the judge learns to agree with the rule, and the
  agreement is measurable. Answers are synthetic, drawn per question; each batch holds, for every
  question in it, its right answer AND another number of it (the wrong answer a ranking policy
  writes most), so the only thing telling them apart is the comparison; half the questions add a
  malformed answer (a right or wrong number without ``####``, or with text after it).
- The judge is reference-guided, as verl's generative reward models often are, and the template
  makes the comparison local: the reference is written as a right answer is (``#### <n>``) on the
  line just above the answer, without the question, so the two digits sit in identical token
  contexts at fixed distances from the verdict (``6 `` -- digit then space -- is one token, which is
  why a malformed ``#### 6 9`` differs already at the digit). Earlier versions showed the question
  and the bare reference: the judge (from ``builtin:tiny-rank-warm``) learnt only to reject malformed
  answers and said ``no`` to every well-formed one (agreement 0.667: right 0.0).
- It starts from random weights (``--init new``), the built-in architecture and tokenizer but
  smaller (``SHAPE``: 2 layers, hidden 128), so that a thousand steps fit in minutes on one core;
  starting from ``builtin:tiny-rank-warm`` hurt (its first verdict loss is ~10, and it stalls at
  ``no``). AdamW, lr warmed up over 50 steps then constant.
- Every ``--eval-every`` steps the first verdict token is checked against the rule on 400 TRAINING
  questions held out from the draws (``DEV``); the kept checkpoint is the one with the best worst
  kind (then the best sum; the earliest of equals).
- Agreement is measured on the saved (bfloat16) weights, reloaded by ``rlflow.backends.local.judge.Judge``
  and parsed by the stage's ``yes_no`` pattern, on the VALIDATION questions (never trained on nor
  used to pick the checkpoint), three answers each (right, another number, malformed), per kind.
- Deterministic on one machine: seeded draws and init, one torch thread, deterministic
  algorithms; weights stored as bfloat16; the record is ``judge_model.json``.
"""

from __future__ import annotations

import argparse
import copy
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
DEV = 400  # training questions held out to pick the checkpoint by


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


def batch_of(rows: list[dict], rng: random.Random, template, score) -> list[tuple[list[int], list[int]]]:
    """Each question with its right answer and another number of it, and half of them a malformed one too."""
    out = []
    for row in rows:
        right, other, malformed = answers(row, rng)
        out += [(row, right), (row, other)] + ([(row, malformed)] if rng.random() < 0.5 else [])
    return [example(row, response, template, score) for row, response in out]


def quick_agreement(model, tokenizer, cases: list[tuple[str, list[int], str]]) -> dict:
    """Greedy first verdict token (the one that decides) against the rule, per kind: for picking a checkpoint."""
    yes = tokenizer("yes", add_special_tokens=False)["input_ids"][0]
    no = tokenizer("no", add_special_tokens=False)["input_ids"][0]
    hits: dict[str, list[bool]] = {}
    model.eval()
    with torch.no_grad():
        for start in range(0, len(cases), 200):
            chunk = cases[start : start + 200]
            width = max(len(ids) for _, ids, _ in chunk)
            ids = torch.full((len(chunk), width), tokenizer.pad_token_id, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for i, (_, row, _) in enumerate(chunk):  # left padding, positions from each row's first token
                ids[i, width - len(row) :] = torch.tensor(row)
                mask[i, width - len(row) :] = 1
            positions = (mask.cumsum(-1) - 1).clamp(min=0)
            top = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits[:, -1].argmax(-1)
            for (kind, _, label), token in zip(chunk, top.tolist(), strict=True):
                verdict = "yes" if token == yes else "no" if token == no else "?"
                hits.setdefault(kind, []).append(verdict == label)
    model.train()
    return {kind: sum(v) / len(v) for kind, v in hits.items()}


def train(model, tokenizer, rows: list[dict], dev: list[dict], template, score, args) -> tuple[list[dict], dict]:
    rng = random.Random(args.seed)
    optim = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    warmup = 50
    sched = torch.optim.lr_scheduler.LambdaLR(optim, lambda s: min((s + 1) / warmup, 1.0))
    dev_rng, cases = random.Random(args.seed + 2), []
    for row in dev:
        for kind, response in zip(("right", "other_number", "malformed"), answers(row, dev_rng), strict=True):
            messages, label = example(row, response, template, score)
            prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            cases.append((kind, tokenizer(prompt, add_special_tokens=False)["input_ids"], label))
    model.train()
    log, start, running = [], time.perf_counter(), 0.0
    best = {"step": 0, "dev": {}, "key": (-1.0, -1.0), "state": None}
    for step in range(1, args.steps + 1):
        batch = [encode(tokenizer, *ex) for ex in batch_of(rng.sample(rows, args.batch_size), rng, template, score)]
        ids, mask, labels = collate(batch, tokenizer.pad_token_id)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        optim.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        sched.step()
        running += loss.item()
        if step % args.eval_every == 0 or step == args.steps:
            dev_agreement = quick_agreement(model, tokenizer, cases)
            key = (min(dev_agreement.values()), sum(dev_agreement.values()))
            entry = {
                "step": step,
                "loss": running / (step % args.eval_every or args.eval_every),
                "seconds": time.perf_counter() - start,
                "dev": dev_agreement,
            }
            log.append(entry)
            print(json.dumps(entry), flush=True)
            running = 0.0
            if key > best["key"]:  # strictly better: the earliest of equals
                best = {"step": step, "dev": dev_agreement, "key": key, "state": copy.deepcopy(model.state_dict())}
    model.load_state_dict(best["state"])
    return log, {"step": best["step"], "dev": best["dev"]}


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


# The judge's shape: the built-in architecture (Qwen2, the built-in tokenizer), smaller, so that a
# thousand steps fit in minutes on one core; its config.json travels with the weights.
SHAPE = dict(
    hidden_size=128,
    intermediate_size=384,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
    rope_theta=10000.0,
    tie_word_embeddings=True,
    rms_norm_eps=1e-6,
)


def new_model(tokenizer, seed: int):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=-(-len(tokenizer) // 64) * 64,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        **SHAPE,
    )
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(config)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="rlflow/assets/models/tiny-rank-judge")
    p.add_argument("--init", default="new", help="'new': random weights of SHAPE; else a model to start from")
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--batch-size", type=int, default=32, help="questions per step (2-3 answers each)")
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.manual_seed(args.seed)
    from rlflow.backends.local.models import load_model
    from rlflow.data.tokenizer import load_tokenizer
    from rlflow.reward.judge_template import load_template
    from rlflow.schemas.pipeline import ModelSpec

    spec = ModelSpec(
        path="builtin:tiny-qwen2" if args.init == "new" else args.init,
        tokenizer="builtin:tiny-rank-warm",
        dtype="float32",
    )
    tokenizer = load_tokenizer(spec, ROOT)
    if args.init == "new":
        model = new_model(tokenizer, args.seed)
    else:
        model = load_model(spec, tokenizer, seed=args.seed, root=ROOT)
    template, score = load_template(TEMPLATE, ROOT), rule()
    train_rows = questions("train")
    rows, dev = train_rows[:-DEV], train_rows[-DEV:]  # the checkpoint is picked on held-out TRAIN questions
    log, best = train(model, tokenizer, rows, dev, template, score, args)
    out = Path(args.out) if Path(args.out).is_absolute() else ROOT / args.out
    out.mkdir(parents=True, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(out)
    tokenizer.save_pretrained(out)
    measured = agreement(out, questions("val"), template, score, args.seed)
    record = {
        "base": args.init,
        "shape": SHAPE if args.init == "new" else None,
        "task": "ranking judge (yes/no)",
        "template": TEMPLATE,
        "command": "python scripts/make_judge_model.py"
        + (" " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip(),
        "steps": args.steps,
        "lr": args.lr,
        "batch_size": args.batch_size,
        "seed": args.seed,
        "threads": 1,
        "kept": best,
        "log": log,
        "validation": measured,
    }
    (out / "judge_model.json").write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(measured, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

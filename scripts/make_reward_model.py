"""Make the ranking task's reward model: a tiny sequence classifier trained to agree with the ranking rule.

    python scripts/make_reward_model.py     # remakes rlflow/assets/models/tiny-rank-rm (a few minutes, 1 core)
    python scripts/make_reward_model.py [--out DIR] [--seed 0] [--samples 4] [--train-questions 0]
                                        [--steps N] [--lr LR] [--group-questions 0] [--sample-rows 64]
                                        [--malformed 0] [--absent 0] [--rank-weight 0]

``pipelines/ranking_rm.yaml`` trains the ranking policy on a reward model's score (verl's disrm,
``reward_model:`` + stage ``rm_score``) instead of the rule's. This script makes that model,
``builtin:tiny-rank-rm``: a ``Qwen2ForSequenceClassification`` (num_labels=1) whose score says
whether a response is what ``examples/ranking/reward.py`` accepts.

Design decisions:
- The shipped model learns from the warm start's own responses: sampled from ``builtin:tiny-rank-warm``
  at temperature 1, ``--samples`` (4) per question, labelled by the pipeline's own reward stage
  (``compute_score``'s ``acc``), 64 per step, BCE of the last-token score against the label. 300 steps
  at lr 3e-4: held-out agreement 0.834 (AUC 0.875), pairwise accuracy on the validation questions'
  five candidate answers 0.90 (the right one on top 0.685; chance 0.5 and 0.2).
- Any such model is hackable: GRPO moves the policy to answers the warm start rarely wrote, where the
  model guesses. Trained on it with the pipeline's default KL (``kl_loss_coef`` 0.001) the policy
  collapsed on seed 2 (0.32 -> 0.28 -> 0.00); a 500-step model (agreement 0.871) fell on seed 1 too
  (0.32 -> 0.22). Training on what a policy can drift to did not close the hole in the time there was:
  each question's five numbers as candidates with a pairwise loss (``--group-questions``,
  ``--rank-weight``; pairwise 0.92) left "###### 9" open (0.32 -> 0.365), and near misses
  (``--malformed``) and the digits a question lacks (``--absent``) moved the policy to other forms
  (0.32 -> 0.26). What holds is RLHF's own answer: a KL anchor to the warm start.
  ``pipelines/ranking_rm.yaml`` sets ``kl_loss_coef: 0.1`` and on seed 2 the same model then took
  validation 0.32 -> 0.43 and kept it. The candidate options stay for experiments.
- Only the TRAIN split is trained on. Two held-out figures on the VALIDATION questions, which the train
  split never holds, go to ``reward_model.json``: ``held_out_agreement`` (also under ``agreement``), the
  accuracy of ``score > 0`` against ``acc > 0`` on the warm start's samples drawn the same way (and the AUC,
  the chance a right response outscores a wrong one); and ``held_out_candidates``, by data source, the
  pairwise accuracy (the right candidate outscores each wrong candidate of its question; chance 0.5) and
  how often the right candidate tops its question (chance 0.2).
- The input is exactly what the ``rm_score`` stage scores: the chat-templated prompt plus the
  response text, tokenized by ``rlflow.backends.local.reward_model.encode`` and read at the last
  token (``last_token_scores``), so training and scoring cannot drift apart.
- The body starts from tiny-rank-warm's weights (same shape and tokenizer, 3.5M parameters), which
  already reads the questions; the score head starts at zero. The score is a logit: its sign is the
  verdict and its size the confidence; the GRPO advantage normalises the scale per group anyway.
- Deterministic on one machine: seeded sampling, seeded shuffling, deterministic algorithms, one
  torch thread by default. The weights are stored as bfloat16; the figures recorded are measured
  on the saved weights after reloading them through ``RewardModel``, as the stage loads them.
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
WARM = "builtin:tiny-rank-warm"
log = logging.getLogger("make_reward_model")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="rlflow/assets/models/tiny-rank-rm", help="output Hugging Face directory")
    p.add_argument("--seed", type=int, default=0, help="seed of the sampling, the head and the shuffling")
    p.add_argument("--samples", type=int, default=4, help="responses sampled per question (temperature 1)")
    p.add_argument("--train-questions", type=int, default=0, help="train questions sampled on (0: all)")
    p.add_argument("--steps", type=int, default=300, help="optimizer steps")
    p.add_argument(
        "--group-questions",
        type=int,
        default=0,
        help="train questions per step whose every number is scored as a candidate answer",
    )
    p.add_argument("--sample-rows", type=int, default=64, help="warm-start samples per step")
    p.add_argument("--malformed", type=int, default=0, help="near-miss candidates per train question (MALFORMED)")
    p.add_argument("--absent", type=int, default=0, help="1: the digits a question lacks are candidates too")
    p.add_argument(
        "--rank-weight",
        type=float,
        default=0.0,
        help="weight of the pairwise loss (right candidate above each wrong one) beside the BCE",
    )
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--warmup", type=int, default=20, help="linear warmup steps")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (the shipped weights were made with 1)")
    return p.parse_args(argv)


# ---- data: the warm start's samples, labelled by the rule ------------------------------------------
def sample_rows(policy, tokenizer, dataset, indices: list[int], samples: int, seed: int, max_new: int):
    """(raw prompt, response text, rule label) for ``samples`` draws on each question of ``indices``."""
    from dataclasses import replace

    from rlflow.backends.local.generation import SamplingParams, sample

    params = SamplingParams(
        max_new_tokens=max_new, eos_token_ids=(tokenizer.eos_token_id,), pad_token_id=tokenizer.pad_token_id
    )
    out = []
    for chunk, start in enumerate(range(0, len(indices), 64)):
        batch = dataset.to_batch(indices[start : start + 64], tokenizer.pad_token_id).repeat_interleave(samples)
        drawn = replace(params, seed=seed * 100_003 + chunk)
        responses, mask = sample(policy, batch["prompts"], batch["prompt_mask"], drawn)
        batch["response_mask"] = mask
        batch["response_text"] = tokenizer.batch_decode(
            [r[:n] for r, n in zip(responses.tolist(), mask.sum(-1).tolist(), strict=True)], skip_special_tokens=True
        )
        out.append(batch)
    return out


def labelled(batches, scorer) -> list[tuple[str, str, float]]:
    rows = []
    for batch in batches:
        labels = [extra["acc"] for extra in scorer(batch)]
        rows += list(zip(batch["raw_prompt"], batch["response_text"], labels, strict=True))
    return rows


def rule():
    """``compute_score`` of examples/ranking/reward.py, the label every row gets."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("ranking_reward", ROOT / "examples" / "ranking" / "reward.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.compute_score


# near misses a policy drifts to (a GRPO run on a model trained without them wrote "###### 0"); the rule
# rejects every one of them
MALFORMED = ("###### {n}", "### {n}", "#### {n} #### {m}", "#### {n}.", "#### {n}#", "The answer is {n}")


def candidate_groups(dataset, indices: list[int], malformed: int = 0, seed: int = 0, absent: bool = False):
    """(data source, rows) per question: each number of the question as the answer, in the form the warm
    start writes (its SFT target, ``#### 6``), then ``malformed`` near misses (a seeded form of MALFORMED
    with the right number, or a wrong one for every third), all labelled by the rule."""
    import random

    score = rule()
    groups = []
    for i in indices:
        e = dataset.examples[i]
        truth = str(e.reward_info["ground_truth"])
        numbers = [str(n) for n in e.reward_info["extra_info"]["numbers"]]
        responses = [f"#### {n}" for n in numbers]
        if absent:  # the digits the question does not hold: a GRPO run drifted to "#### 3" for "1, 4, 2, 7, 0"
            responses += [f"#### {d}" for d in range(10) if str(d) not in numbers]
        rng = random.Random(seed * 1_000_003 + i)
        wrong = [n for n in numbers if n != truth] or numbers
        for k in range(malformed):
            n = rng.choice(wrong) if k % 3 == 2 else truth
            responses.append(rng.choice(MALFORMED).format(n=n, m=rng.choice(numbers)))
        rows = [(e.prompt, r, score(e.data_source, r, truth)["acc"]) for r in responses]
        groups.append((e.data_source, rows))
    return groups


# ---- the classifier -------------------------------------------------------------------------------
def build_classifier(warm_dir: Path, seed: int):
    """A Qwen2ForSequenceClassification with tiny-rank-warm's body and a zero score head (float32)."""
    from transformers import AutoConfig, Qwen2ForSequenceClassification

    config = AutoConfig.from_pretrained(str(warm_dir), local_files_only=True)
    config.num_labels = 1
    config.architectures = ["Qwen2ForSequenceClassification"]
    torch.manual_seed(seed)
    model = Qwen2ForSequenceClassification.from_pretrained(
        str(warm_dir), config=config, dtype=torch.float32, local_files_only=True
    )
    torch.nn.init.zeros_(model.score.weight)
    return model


def scores_of(model, tokenizer, rows, batch_size: int = 256) -> torch.Tensor:
    from rlflow.backends.local.reward_model import encode, last_token_scores, pad_right

    out = []
    with torch.no_grad():
        for start in range(0, len(rows), batch_size):
            part = rows[start : start + batch_size]
            ids = encode(tokenizer, [p for p, _, _ in part], [r for _, r, _ in part], None)
            out.append(last_token_scores(model, *pad_right(ids, tokenizer.pad_token_id)))
    return torch.cat(out)


def agreement(scores: torch.Tensor, labels: torch.Tensor) -> dict:
    """Accuracy of ``score > 0`` against the rule, and the AUC (ties count half)."""
    right, wrong = scores[labels > 0], scores[labels <= 0]
    auc = None
    if len(right) and len(wrong):
        above = (right[:, None] > wrong[None, :]).float() + 0.5 * (right[:, None] == wrong[None, :]).float()
        auc = float(above.mean())
    acc = float(((scores > 0) == (labels > 0)).float().mean())
    return {"accuracy": round(acc, 4), "auc": None if auc is None else round(auc, 4), "rows": len(labels)}


def pairwise(groups_scores: list[torch.Tensor], groups_labels: list[torch.Tensor]) -> torch.Tensor:
    """Mean over (right, wrong) pairs of one question of softplus(wrong - right): the right one above each."""
    terms = []
    for scores, labels in zip(groups_scores, groups_labels, strict=True):
        right, wrong = scores[labels > 0], scores[labels <= 0]
        if len(right) and len(wrong):
            terms.append(torch.nn.functional.softplus(wrong[None, :] - right[:, None]).flatten())
    return torch.cat(terms).mean() if terms else torch.zeros(())


def pairwise_accuracy(scores: torch.Tensor, groups) -> dict:
    """Per data source and over all: the share of (right, wrong) candidate pairs of one question where the right
    one scores higher (ties count half; chance 0.5), and how often the right one tops its question (chance 0.2)."""
    by_source: dict[str, list[float]] = {}
    offset = 0
    for source, rows in groups:
        s = scores[offset : offset + len(rows)]
        y = torch.tensor([label for *_, label in rows])
        offset += len(rows)
        right, wrong = s[y > 0], s[y <= 0]
        if not len(right) or not len(wrong):
            continue
        above = (right[:, None] > wrong[None, :]).float() + 0.5 * (right[:, None] == wrong[None, :]).float()
        top = float(s.argmax() == int(torch.nonzero(y > 0)[0]))
        for key in (source, "all"):
            acc = by_source.setdefault(key, [0.0, 0.0, 0.0, 0.0])
            acc[0] += float(above.sum())
            acc[1] += above.numel()
            acc[2] += top
            acc[3] += 1
    return {
        key: {"pairwise": round(a / n, 4), "top1": round(t / q, 4), "questions": int(q)}
        for key, (a, n, t, q) in sorted(by_source.items())
    }


def train(model, tokenizer, rows, groups, args) -> list[dict]:
    """``args.steps`` AdamW steps. Each holds ``args.group_questions`` questions' candidate groups and
    ``args.sample_rows`` warm-start samples: BCE of the last-token score against the rule's label (in a group
    the right and the wrong candidates weigh half each, balanced; the samples weigh as drawn), plus
    ``args.rank_weight`` x the pairwise loss across each group's candidates."""
    from rlflow.backends.local.reward_model import encode, last_token_scores, pad_right

    ids = encode(tokenizer, [p for p, _, _ in rows], [r for _, r, _ in rows], None)
    labels = torch.tensor([y for _, _, y in rows], dtype=torch.float32)
    group_ids = [encode(tokenizer, [p for p, _, _ in g], [r for _, r, _ in g], None) for _, g in groups]
    group_labels = [torch.tensor([y for *_, y in g], dtype=torch.float32) for _, g in groups]
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / max(args.warmup, 1)))
    generator = torch.Generator().manual_seed(args.seed)
    history, running, start, order, group_order = [], [], time.perf_counter(), [], []
    model.train()
    for step in range(1, args.steps + 1):
        if len(order) < args.sample_rows:
            order = torch.randperm(len(rows), generator=generator).tolist()
        if len(group_order) < args.group_questions:
            group_order = torch.randperm(len(groups), generator=generator).tolist()
        chosen, order = order[: args.sample_rows], order[args.sample_rows :]
        picked, group_order = group_order[: args.group_questions], group_order[args.group_questions :]
        batch_ids = [ids[i] for i in chosen] + [row for g in picked for row in group_ids[g]]
        scores = last_token_scores(model, *pad_right(batch_ids, tokenizer.pad_token_id))
        sample_scores, cand_scores = scores[: len(chosen)], scores[len(chosen) :]
        cand_labels = torch.cat([torch.zeros(0)] + [group_labels[g] for g in picked])
        sizes = [len(group_labels[g]) for g in picked]
        weights = [torch.zeros(0)]  # --group-questions 0: the warm start's samples alone
        for g in picked:
            y = group_labels[g]
            n_right = float((y > 0).sum())
            n_wrong = len(y) - n_right
            weights.append(torch.where(y > 0, 0.5 / max(n_right, 1.0), 0.5 / max(n_wrong, 1.0)) * len(y))
        weights = torch.cat(weights)
        bce = torch.nn.functional.binary_cross_entropy_with_logits
        loss_samples = bce(sample_scores, labels[chosen], reduction="sum")
        loss_cands = (bce(cand_scores, cand_labels, reduction="none") * weights).sum()
        loss_bce = (loss_samples + loss_cands) / len(batch_ids)
        rank = pairwise(list(cand_scores.split(sizes)), [group_labels[g] for g in picked])
        loss = loss_bce + args.rank_weight * rank
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        running.append((float(loss_bce.detach()), float(rank.detach())))
        if step % 50 == 0 or step == args.steps:
            history.append(
                {
                    "step": step,
                    "bce": round(sum(b for b, _ in running) / len(running), 4),
                    "pairwise": round(sum(r for _, r in running) / len(running), 4),
                    "seconds": round(time.perf_counter() - start, 1),
                }
            )
            log.info(
                "step %d  bce %.4f  pairwise %.4f  (%.0f s)",
                step,
                *[history[-1][k] for k in ("bce", "pairwise", "seconds")],
            )
            running = []
    model.eval()
    return history


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True, warn_only=True)
    from make_warm_start import TASKS, Scorer, load_splits, subset

    from rlflow.assets import RANK_WARM_START
    from rlflow.backends.local.models import load_model
    from rlflow.backends.local.reward_model import RewardModel
    from rlflow.schemas.pipeline import ModelSpec
    from rlflow.schemas.reward_model import RewardModelSpec

    spec, tokenizer, train_set, val_set, root = load_splits(TASKS["ranking"], [f"rank_model_path={WARM}"])
    scorer = Scorer(spec, root)
    policy = load_model(ModelSpec(path=WARM), tokenizer, seed=args.seed, root=root).eval()
    n = spec.data.max_response_length
    chosen = subset(len(train_set), args.train_questions, args.seed)
    started = time.perf_counter()
    train_rows = labelled(sample_rows(policy, tokenizer, train_set, chosen, args.samples, args.seed, n), scorer)
    held_out = labelled(
        sample_rows(policy, tokenizer, val_set, list(range(len(val_set))), args.samples, args.seed + 1, n), scorer
    )
    log.info(
        "sampled %d train rows (%.3f right), %d held-out rows (%.3f right) in %.0f s",
        len(train_rows),
        sum(y for *_, y in train_rows) / len(train_rows),
        len(held_out),
        sum(y for *_, y in held_out) / len(held_out),
        time.perf_counter() - started,
    )
    train_groups = candidate_groups(train_set, chosen, args.malformed, args.seed, absent=args.absent)
    val_groups = candidate_groups(val_set, list(range(len(val_set))))
    val_near = candidate_groups(val_set, list(range(len(val_set))), 3, args.seed + 1, absent=True)
    model = build_classifier(RANK_WARM_START, args.seed)
    history = train(model, tokenizer, train_rows, train_groups, args)

    out = ROOT / args.out
    out.mkdir(parents=True, exist_ok=True)
    model.config.pad_token_id = tokenizer.pad_token_id
    model.to(torch.bfloat16).save_pretrained(out)
    tokenizer.save_pretrained(out)
    # as the rm_score stage loads it: the bfloat16 weights in the pipeline's model.dtype (float32)
    reloaded = RewardModel(spec.model_copy(update={"reward_model": RewardModelSpec(model_path=str(out))}), root=root)
    figures = {}
    # the train figure on a seeded 2000 of its rows: scoring all of them would take longer than training
    train_probe = [train_rows[i] for i in subset(len(train_rows), 2000, args.seed)]
    for name, rows in (("train", train_probe), ("held_out", held_out)):
        scores = reloaded.score([p for p, _, _ in rows], [r for _, r, _ in rows], {"micro_batch_size": 256})
        figures[name] = agreement(scores, torch.tensor([y for *_, y in rows]))
        figures[name]["right_ratio"] = round(sum(y for *_, y in rows) / len(rows), 4)
    # every number of each validation question as the answer ("#### 6"): the right one against the wrong ones
    cand_rows = [row for _, rows in val_groups for row in rows]
    scores = reloaded.score([p for p, _, _ in cand_rows], [r for _, r, _ in cand_rows], {"micro_batch_size": 256})
    candidates = pairwise_accuracy(scores, val_groups)
    cand_labels = torch.tensor([y for *_, y in cand_rows])
    candidates["all"]["accuracy"] = agreement(scores, cand_labels)["accuracy"]
    # the same questions with 3 near misses each (MALFORMED) beside the 5 well-formed candidates
    near_rows = [row for _, rows in val_near for row in rows]
    scores = reloaded.score([p for p, _, _ in near_rows], [r for _, r, _ in near_rows], {"micro_batch_size": 256})
    near = pairwise_accuracy(scores, val_near)["all"]
    meta = {
        "base": WARM,
        "policy": WARM,
        "pipeline": "pipelines/ranking_grpo.yaml",
        "label": "examples/ranking/reward.py:compute_score (acc)",
        "seed": args.seed,
        "samples_per_question": args.samples,
        "temperature": 1.0,
        "train_questions": len(chosen),
        "held_out_questions": len(val_set),
        "train_rows": len(train_rows),
        "held_out_rows": len(held_out),
        "candidate_rows": f"every number of each train question as '#### <n>', and {args.malformed} near misses"
        f" ({sum(len(g) for _, g in train_groups)} rows)",
        "malformed_per_question": args.malformed,
        "absent_digits": bool(args.absent),
        "steps": args.steps,
        "lr": args.lr,
        "warmup": args.warmup,
        "group_questions_per_step": args.group_questions,
        "sample_rows_per_step": args.sample_rows,
        "rank_weight": args.rank_weight,
        "threads": args.threads,
        "command": " ".join(["python scripts/make_reward_model.py", *(sys.argv[1:] if argv is None else argv)]),
        "seconds": round(time.perf_counter() - started, 1),
        "loss": history,
        "agreement": figures,
        # the warm start's held-out samples (as before): accuracy of score > 0 against the rule
        "held_out_agreement": figures["held_out"]["accuracy"],
        # validation questions, each of its numbers as the answer: pairwise accuracy and top-1 by source
        "held_out_candidates": candidates,
        "held_out_candidates_with_near_misses": near,
    }
    (out / "reward_model.json").write_text(json.dumps(meta, indent=2) + "\n")
    log.info("saved %s: agreement with the rule %s; candidates %s", out, json.dumps(figures), json.dumps(candidates))
    return 0


if __name__ == "__main__":
    sys.exit(main())

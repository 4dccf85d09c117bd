"""Make the ranking task's data: verl-format Parquet of "which number is the second largest" questions.

    python scripts/make_ranking.py     # remakes rlflow/assets/data/ranking/{train,val}.parquet
    python scripts/make_ranking.py [--out DIR] [--train 4000] [--val 400] [--seed 0] [--numbers 5]

The second shipped task, beside text-to-SQL: "Which number is the second largest: 3, 9, 4, 5, 6?
Give it after ####." with a chat-format prompt and the answer after ``####``, scored by a plain
reward function (examples/ranking/reward.py).

Design decisions:
- verl's RL format, as verl's data preprocessing scripts write it (e.g. gsm8k.py): columns
  ``data_source``, ``prompt`` (a list of chat messages), ``ability``, ``reward_model``
  (``{style: rule, ground_truth}``) and ``extra_info`` (split, index, the numbers and the
  reference ``answer``). Nothing in it is specific to rlflow.
- Four data sources in equal numbers, ``largest``, ``smallest``, ``second_largest`` and
  ``second_smallest``, so validation reports ``val-core/<data_source>/...`` for each and shows
  which ranks the model has learnt.
- The numbers are distinct digits (``--numbers`` of them), so the answer is one token the
  model copies from the prompt and the task is the ranking itself. A question in the
  validation split never appears in the train split.
- 400 validation questions, so that any accuracy on them has a standard error of at most 2.5
  points. The first 200 are drawn before the train split and the rest after it: the split held
  200 until then, and drawing the new ones last keeps the train split the shipped models were
  trained on.
- Chosen for what a 3.5M-parameter model can learn in minutes on a CPU: after a short
  supervised start it answers a third of the questions and a sample of 8 often holds the right
  answer, which is the room GRPO works in (multi-digit arithmetic, by contrast, the built-in
  model learns too slowly, even under supervision, for GRPO to show a gain in minutes).
- Deterministic: one seeded ``random.Random``; the same arguments give the same files.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VAL_BEFORE_TRAIN = 200  # validation questions drawn before the train split, the rest after it
RANKS = {"largest": -1, "smallest": 0, "second_largest": -2, "second_smallest": 1}  # index into the sorted numbers
INSTRUCTION = "Give it after ####."


def record(source: str, numbers: list[int], split: str, index: int) -> dict:
    answer = sorted(numbers)[RANKS[source]]
    question = f"Which number is the {source.replace('_', ' ')}: {', '.join(map(str, numbers))}? {INSTRUCTION}"
    return {
        "data_source": source,
        "prompt": [{"role": "user", "content": question}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": str(answer)},
        "extra_info": {"split": split, "index": index, "numbers": numbers, "answer": f"#### {answer}"},
    }


def make_splits(train: int, val: int, seed: int, numbers: int) -> dict[str, list[dict]]:
    """Both splits, sources in turn: up to ``VAL_BEFORE_TRAIN`` validation questions, then ``train`` others,
    then the rest of the ``val`` validation questions; no question is drawn twice."""
    if not 2 <= numbers <= 10:
        raise ValueError(f"--numbers must be 2 to 10 distinct digits, not {numbers}")
    rng = random.Random(seed)
    sources = list(RANKS)
    seen: set[tuple[str, tuple[int, ...]]] = set()
    splits: dict[str, list[dict]] = {"val": [], "train": []}
    for split, count in (("val", min(val, VAL_BEFORE_TRAIN)), ("train", train), ("val", val)):
        while len(splits[split]) < count:
            source = sources[len(splits[split]) % len(sources)]
            drawn = rng.sample(range(10), numbers)
            if (source, tuple(drawn)) in seen:
                continue
            seen.add((source, tuple(drawn)))
            splits[split].append(record(source, drawn, split, len(splits[split])))
    return splits


def write_parquet(records: list[dict], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(records), path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="rlflow/assets/data/ranking", help="output folder")
    p.add_argument("--train", type=int, default=4000, help="train questions")
    p.add_argument("--val", type=int, default=400, help="validation questions")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--numbers", type=int, default=5, help="distinct digits per question")
    args = p.parse_args(argv)
    out = Path(args.out) if Path(args.out).is_absolute() else ROOT / args.out
    for split, records in make_splits(args.train, args.val, args.seed, args.numbers).items():
        write_parquet(records, out / f"{split}.parquet")
        print(f"{out / f'{split}.parquet'}: {len(records)} questions")
    return 0


if __name__ == "__main__":
    sys.exit(main())

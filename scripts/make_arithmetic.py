"""Make the arithmetic task's data: verl-format Parquet of addition and subtraction questions.

    python scripts/make_arithmetic.py     # remakes rlflow/assets/data/arithmetic/{train,val}.parquet
    python scripts/make_arithmetic.py [--out DIR] [--train 4000] [--val 200] [--seed 0] [--max-value 99]

The second shipped task, beside text-to-SQL: "what is 347 + 85?" with a chat-format prompt and
the answer after ``####``, scored by a plain reward function (examples/arithmetic/reward.py).

Design decisions:
- verl's RL format, as verl's data preprocessing scripts write it (e.g. gsm8k.py): columns
  ``data_source``, ``prompt`` (a list of chat messages), ``ability``, ``reward_model``
  (``{style: rule, ground_truth}``) and ``extra_info`` (split, index, the operands and the
  reference ``answer``). Nothing in it is specific to rlflow.
- Two data sources, ``arith_add`` and ``arith_sub``, in equal numbers, so validation reports
  ``val-core/<data_source>/...`` for each. Subtraction keeps the result non-negative.
- Operands have 1 or 2 digits (``--max-value``), the digit count drawn first so short and long numbers are
  equally common; questions in the validation split never appear in the train split.
- Deterministic: one seeded ``random.Random``; the same arguments give the same files.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("arith_add", "arith_sub")
INSTRUCTION = "Give the result after ####."


def operand(rng: random.Random, max_value: int) -> int:
    digits = rng.randint(1, len(str(max_value)))
    return rng.randint(0 if digits == 1 else 10 ** (digits - 1), min(10**digits - 1, max_value))


def question(rng: random.Random, source: str, max_value: int) -> tuple[int, int, str, int]:
    """(a, b, operator, result) of one question of ``source``."""
    a, b = operand(rng, max_value), operand(rng, max_value)
    if source == "arith_add":
        return a, b, "+", a + b
    a, b = max(a, b), min(a, b)
    return a, b, "-", a - b


def record(source: str, a: int, b: int, op: str, result: int, split: str, index: int) -> dict:
    return {
        "data_source": source,
        "prompt": [{"role": "user", "content": f"What is {a} {op} {b}? {INSTRUCTION}"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": str(result)},
        "extra_info": {"split": split, "index": index, "a": a, "b": b, "op": op, "answer": f"#### {result}"},
    }


def make_splits(train: int, val: int, seed: int, max_value: int) -> dict[str, list[dict]]:
    """Both splits: ``val`` questions first (half per source), then ``train`` others."""
    rng = random.Random(seed)
    seen: set[tuple[int, int, str]] = set()
    splits: dict[str, list[dict]] = {"val": [], "train": []}
    for split, count in (("val", val), ("train", train)):
        while len(splits[split]) < count:
            source = SOURCES[len(splits[split]) % len(SOURCES)]
            a, b, op, result = question(rng, source, max_value)
            if (a, b, op) in seen:
                continue
            seen.add((a, b, op))
            splits[split].append(record(source, a, b, op, result, split, len(splits[split])))
    return splits


def write_parquet(records: list[dict], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(records), path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="rlflow/assets/data/arithmetic", help="output folder")
    p.add_argument("--train", type=int, default=4000, help="train questions")
    p.add_argument("--val", type=int, default=200, help="validation questions")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-value", type=int, default=99, help="largest operand")
    args = p.parse_args(argv)
    out = Path(args.out) if Path(args.out).is_absolute() else ROOT / args.out
    for split, records in make_splits(args.train, args.val, args.seed, args.max_value).items():
        write_parquet(records, out / f"{split}.parquet")
        print(f"{out / f'{split}.parquet'}: {len(records)} questions")
    return 0


if __name__ == "__main__":
    sys.exit(main())

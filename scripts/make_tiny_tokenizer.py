"""Train the built-in tiny model's tokenizer (deterministic, offline).

    python scripts/make_tiny_tokenizer.py [--bird rlflow/assets/data/bird_sample] [--vocab-size 3072]
                                          [--out rlflow/data/assets/tiny_tokenizer]

Writes ``tokenizer.json`` and ``tokenizer_config.json`` (a Hugging Face tokenizer directory
that ``PreTrainedTokenizerFast.from_pretrained`` loads) for ``builtin:tiny-qwen2``.

Design decisions:
- Byte-level BPE (as GPT-2 and Qwen use): any text round-trips, and merges learnt on SQL and
  English make a 64-token response long enough for a whole query, which a character-level
  vocabulary would not.
- A value is the same tokens in the question and in the SQL. GPT-2's pre-tokenizer glues a
  space to the front of the next word, so `from France?` gives `ĠFrance` while
  `country = 'France'` gives `France`: a tiny model must then learn a separate mapping for
  every constant instead of copying it (only 23% of the sample's constants were copyable
  token for token). Here a space is glued to the END of the word before it (`fromĠ`,
  `France`, `?`), and digits are always single tokens, so 91% are; sequences grow by ~5%.
  Merges never cross these pieces, so the corpus runs out of pairs worth merging before
  ``--vocab-size``: the shipped vocabulary has 1,277 entries.
- The corpus is the BIRD-format sample when it exists (questions, evidence, gold SQL, the
  databases' CREATE TABLE text and answers in the expected output format), plus a built-in
  corpus of SQL keywords, functions and templated sentences, so the tokenizer also builds on a
  fresh checkout. Everything is sorted or drawn from one seeded ``random.Random``, and BPE
  training breaks ties by pair order, so the same inputs give the same file byte for byte.
- Special tokens: ``<|pad|>`` (id 0), ``<|endoftext|>`` (id 1, the EOS), and ChatML's
  ``<|im_start|>`` / ``<|im_end|>`` with a ChatML chat template, so that a data loader that
  applies chat templates treats the tiny model like a Qwen instruct model.
- Output-format markers (``<answer>``, ``</answer>``, ``<think>``, ``</think>``, ````` ```sql `````)
  are added as single, non-special tokens: decoding keeps them (``skip_special_tokens`` does
  not strip them), and a tiny policy learns one token instead of five.
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "rlflow" / "data" / "assets" / "tiny_tokenizer"
PAD, EOS, IM_START, IM_END = "<|pad|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL = [PAD, EOS, IM_START, IM_END]
MARKERS = ["<answer>", "</answer>", "<think>", "</think>", "```sql"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

KEYWORDS = (
    "SELECT FROM WHERE AND OR NOT IN IS NULL LIKE BETWEEN GROUP BY ORDER HAVING LIMIT OFFSET AS ON JOIN INNER "
    "LEFT RIGHT OUTER CROSS UNION ALL DISTINCT CASE WHEN THEN ELSE END ASC DESC EXISTS CAST INTEGER REAL TEXT "
    "CREATE TABLE PRIMARY KEY FOREIGN REFERENCES INSERT INTO VALUES"
).split()
FUNCTIONS = "COUNT SUM AVG MIN MAX ROUND LENGTH SUBSTR UPPER LOWER STRFTIME IIF COALESCE ABS".split()
NOUNS = (
    "customer order product employee student course school city country movie player team "
    "account loan client district payment store item sale patient doctor book author"
).split()
COLUMNS = (
    "id name age price amount date year city country salary score rating title type status "
    "category gender grade quantity total balance population budget"
).split()
QUESTION_STARTS = [
    "How many",
    "What is the",
    "List the",
    "Which",
    "Find the",
    "Show the",
    "Give the",
    "Among the",
    "Please list",
    "Name the",
    "State the",
    "What are the",
]
# Pre-tokenization: a word, one digit, or a run of punctuation, each with at most one trailing
# space; any other whitespace on its own.
PIECES = r"\p{L}+ ?|\p{N} ?|[^\s\p{L}\p{N}]+ ?|\s+"
AGG_WORDS = ["average", "total", "highest", "lowest", "number of", "maximum", "minimum"]


def builtin_corpus(rng: random.Random, lines: int = 6000) -> list[str]:
    """SQL and question text from templates: enough to learn SQL and English merges."""
    out = [" ".join(KEYWORDS), " ".join(FUNCTIONS), " ".join(NOUNS), " ".join(COLUMNS)]
    for _ in range(lines):
        table, other = rng.choice(NOUNS), rng.choice(NOUNS)
        col, col2 = rng.choice(COLUMNS), rng.choice(COLUMNS)
        fn, value = rng.choice(FUNCTIONS), rng.randint(0, 2000)
        out.append(
            rng.choice(
                [
                    f"SELECT {fn}({col}) FROM {table} WHERE {col2} > {value}",
                    f"SELECT {col} FROM {table} WHERE {col2} = '{rng.choice(NOUNS).title()}'",
                    f"SELECT T1.{col} FROM {table} AS T1 INNER JOIN {other} AS T2 ON T1.id = T2.{table}_id",
                    f"SELECT {col2}, COUNT(*) FROM {table} GROUP BY {col2} ORDER BY COUNT(*) DESC LIMIT {value % 10 + 1}",
                    f"CREATE TABLE {table} ({col} INTEGER PRIMARY KEY, {col2} TEXT, {other}_id INTEGER)",
                ]
            )
        )
        out.append(
            f"{rng.choice(QUESTION_STARTS)} {rng.choice(AGG_WORDS)} {col} of the {table}s whose {col2} is {value}?"
        )
    return out


# The sample's dev questions the shipped vocabulary was built from: dev grew from 100 to 400 questions
# after the tokenizer and the warm starts trained with it were made, and the later 300 are left out so
# that the same sample still gives the same tokenizer.
TOKENIZER_DEV_QUESTIONS = 100


def bird_corpus(root: Path) -> list[str]:
    """Questions, evidence, gold SQL, answers in the output format and every schema's DDL."""
    out: list[str] = []
    for split, limit in (("train.json", None), ("dev.json", TOKENIZER_DEV_QUESTIONS)):
        path = root / split
        if not path.exists():
            continue
        for row in json.loads(path.read_text())[:limit]:
            out += [row.get("question", ""), row.get("evidence", ""), row.get("SQL", "")]
            out.append(
                f"<think>The question asks about {row.get('db_id', '')}.</think>"
                f"<answer>```sql\n{row.get('SQL', '')}\n```</answer>"
            )
    for db in sorted((root / "databases").glob("*/*.sqlite")):
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            out += [sql for (sql,) in conn.execute("SELECT sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY name")]
    return [line for line in out if line]


def train(corpus: list[str], vocab_size: int):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PIECES), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(MARKERS),
        min_frequency=2,
        show_progress=False,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    tok.add_tokens([AddedToken(m, normalized=False, special=False) for m in MARKERS])
    return tok


def write(tok, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"), pretty=True)
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "pad_token": PAD,
        "eos_token": EOS,
        "bos_token": None,
        "unk_token": None,
        "additional_special_tokens": [IM_START, IM_END],
        "model_max_length": 2048,
        "padding_side": "left",
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bird", type=Path, default=ROOT / "rlflow" / "assets" / "data" / "bird_sample")
    parser.add_argument("--vocab-size", type=int, default=3072)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    corpus = builtin_corpus(random.Random(args.seed))
    bird = bird_corpus(args.bird) if args.bird.is_dir() else []
    tok = train(corpus + bird, args.vocab_size)
    write(tok, args.out)
    print(f"wrote {args.out} (vocab {tok.get_vocab_size()}, {len(corpus)} built-in + {len(bird)} BIRD lines)")


if __name__ == "__main__":
    main()
